//go:build stack && linux

package stack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// binaries builds secure_app and mockupstream, once per test binary, into
// bin/stacktest (with -race, so the build shares the test runs' cache).
func binaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := filepath.Abs(filepath.Join(root, "bin", "stacktest"))
		if err != nil {
			buildErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-race", "-o", dir+"/", "./solutions/secure_app", "./cmd/mockupstream")
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
		buildDir = dir
	})
	require.NoError(t, buildErr)
	return buildDir
}

// runOutput runs a short command (bounded by 30 s) and returns its
// combined output.
func runOutput(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// freeAddr is a loopback address nothing listens on yet.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// proc is a process a test started.
type proc struct {
	out  *bytes.Buffer
	stop func() // SIGTERM, then SIGKILL after 10 s; waits; idempotent
}

// start runs bin with env as its whole environment (plus PATH) and stops it
// when the test ends. It dies with the test binary too (parent-death
// signal), so nothing outlives the run.
func start(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: &out}, &lockedWriter{w: &out}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start(), "starting %s", name)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var once sync.Once
	p := &proc{out: &out, stop: func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		})
	}}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			outMu.Lock()
			defer outMu.Unlock()
			t.Logf("%s output (last 2 KiB):\n%s", name, tail(out.String(), 2048))
		}
	})
	return p
}

type lockedWriter struct{ w io.Writer }

var outMu sync.Mutex

func (l *lockedWriter) Write(p []byte) (int, error) {
	outMu.Lock() // stdout and stderr share one buffer
	defer outMu.Unlock()
	return l.w.Write(p)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// waitHTTP polls url until it answers 200, for at most within.
func waitHTTP(t *testing.T, url string, within time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Second}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		resp, err := client.Get(url)
		require.NoError(c, err, "%s did not answer within %s", url, within)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		assert.Equal(c, http.StatusOK, resp.StatusCode, "%s did not answer 200 within %s", url, within)
	}, within, 100*time.Millisecond)
}

// dashboard is the part of the Grafana dashboard JSON the tests read.
type dashboard struct {
	Panels []panel `json:"panels"`
}

type panel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "stack/grafana/dashboards/gateway.json"))
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	return d
}

// query is one dashboard query and the panel it belongs to.
type query struct{ panel, expr string }

func (d dashboard) queries() []query {
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, query{p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// dashboardUIDs is the data source uid of every panel and query.
func dashboardUIDs(t *testing.T) []string {
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			require.NotNil(t, p.Datasource, "panel %q names its data source", p.Title)
			out = append(out, p.Datasource.UID)
			for _, tg := range p.Targets {
				require.NotNil(t, tg.Datasource, "a query of %q names its data source", p.Title)
				out = append(out, tg.Datasource.UID)
			}
		}
	}
	walk(readDashboard(t).Panels)
	return out
}

// evaluable replaces Grafana's variables with what Prometheus takes.
func evaluable(expr string) string {
	return strings.NewReplacer("$__rate_interval", "1m", "$__interval", "5s", "$__range", "5m").Replace(expr)
}
