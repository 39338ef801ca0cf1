//go:build stack && linux

package stack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RequiredEnv makes the real-Prometheus checks fail instead of skipping when
// prometheus or promtool is not on PATH. make ci sets it.
const RequiredEnv = "STACK_PROMETHEUS_REQUIRED"

// replica is one running secure_app.
type replica struct{ name, api, admin string }

// stackProcs is what loopbackStack started.
type stackProcs struct {
	reps []replica
	// restartUpstream stops mockupstream and starts it again on the same
	// address: the replicas' pooled connections die, the next calls dial.
	restartUpstream func()
}

// loopbackStack runs the compose file's gateways on loopback: mockupstream
// and two secure_app replicas with each compose service's environment, the
// addresses rewritten to free loopback ports, Redis from redistest, and no
// collector (tracing off).
func loopbackStack(t *testing.T, p *types.Project) stackProcs {
	t.Helper()
	bins := binaries(t)
	redisURL := redistest.URL(t)
	// secure_app puts its own hash tags in its keys, so its prefix has no
	// braces: one of this run's own, whose keys are deleted at the end.
	rdb := redistest.Client(t)
	prefix := fmt.Sprintf("stacktest-%d-%d", os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})

	mock := p.Services["mockupstream"]
	mockAddr := freeAddr(t)
	var menv []string
	for k := range mock.Environment {
		menv = append(menv, k+"="+env(mock, k))
	}
	// Fast, and failing often enough to show retries and failures.
	menv = append(menv, "MOCKUPSTREAM_ADDR="+mockAddr, "MOCKUPSTREAM_LATENCY=5ms", "MOCKUPSTREAM_JITTER=3ms",
		"MOCKUPSTREAM_CHUNK_DELAY=2ms", "MOCKUPSTREAM_ERROR_RATE=0.3", "MOCKUPSTREAM_ERRORS=500", "MOCKUPSTREAM_SLOW=")
	mockProc := start(t, "mockupstream", filepath.Join(bins, "mockupstream"), menv)
	waitHTTP(t, "http://"+mockAddr+"/healthz", 15*time.Second)
	restart := func() {
		mockProc.stop()
		mockProc = start(t, "mockupstream (restarted)", filepath.Join(bins, "mockupstream"), menv)
		waitHTTP(t, "http://"+mockAddr+"/healthz", 15*time.Second)
	}

	var out []replica
	for _, s := range gatewayServices(p) {
		r := replica{name: s.Name, api: freeAddr(t), admin: freeAddr(t)}
		var genv []string
		for k := range s.Environment {
			v := env(s, k)
			switch k {
			case "OTEL_EXPORTER_OTLP_ENDPOINT":
				continue
			case "GATEWAY_UPSTREAM":
				v = strings.Replace(v, "mockupstream:"+port(t, env(mock, "MOCKUPSTREAM_ADDR")), mockAddr, 1)
			}
			genv = append(genv, k+"="+v)
		}
		genv = append(genv, "GATEWAY_ADDR="+r.api, "GATEWAY_ADMIN_ADDR="+r.admin, "REDIS_URL="+redisURL,
			"GATEWAY_REDIS_PREFIX="+prefix, "GATEWAY_READINESS_DELAY=0s", "GATEWAY_DRAIN_GRACE=2s", "GATEWAY_LOG_LEVEL=warn")
		start(t, s.Name, filepath.Join(bins, "secure_app"), genv)
		out = append(out, r)
	}
	for _, r := range out {
		waitHTTP(t, "http://"+r.admin+"/readyz", 30*time.Second)
	}
	return stackProcs{reps: out, restartUpstream: restart}
}

// token mints a token for tenant on tier with the replicas' secret.
func token(t *testing.T, p *types.Project, tenant, tier string) string {
	t.Helper()
	s := gatewayServices(p)[0]
	cmd := exec.CommandContext(t.Context(), filepath.Join(binaries(t), "secure_app"), "token", "--tenant", tenant, "--tier", tier, "--ttl", "10m")
	cmd.Env = []string{"JWT_SECRET=" + env(s, "JWT_SECRET")}
	out, err := cmd.Output()
	require.NoError(t, err, "secure_app token")
	return strings.TrimSpace(string(out))
}

// traffic sends a bounded wave of requests over the replicas: pro-tier
// chat (every third one streamed), a free-tier burst that its rate limit
// refuses, a model the free tier may not use, and a call without a token.
// It returns how many requests it sent.
func traffic(t *testing.T, reps []replica, pro, free string) int {
	t.Helper()
	client := &http.Client{Timeout: 15 * time.Second}
	send := func(rep replica, tok, model string, stream bool) int {
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"why is the sky blue"}]}`, model)
		if stream {
			body = fmt.Sprintf(`{"model":%q,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"why is the sky blue"}]}`, model)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://"+rep.api+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		codes = map[int]int{}
		sem   = make(chan struct{}, 8)
	)
	n := 0
	do := func(rep replica, tok, model string, stream bool) {
		n++
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c := send(rep, tok, model, stream)
			mu.Lock()
			codes[c]++
			mu.Unlock()
		}()
	}
	for i := range 30 {
		do(reps[i%len(reps)], pro, "auto", i%3 == 0)
	}
	for range 8 {
		do(reps[0], free, "auto", false)
	}
	do(reps[1], free, "mock", false)
	do(reps[0], "", "auto", false)
	wg.Wait()
	t.Logf("traffic: %d requests, answers by status: %v", n, codes)
	require.Positive(t, codes[http.StatusOK], "some requests succeed")
	require.Positive(t, codes[http.StatusTooManyRequests], "the free tier's burst is refused")
	return n
}

// localClient reads the replicas' /metrics and Prometheus's query API, all
// on loopback: a call that takes longer than this is a hung service, and
// fails the test instead of hanging it.
var localClient = &http.Client{Timeout: 10 * time.Second}

// scrape returns a replica's /metrics page.
func scrape(t *testing.T, r replica) []byte {
	t.Helper()
	resp, err := localClient.Get("http://" + r.admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return b
}

// needTool finds a Prometheus tool, or skips (fails under STACK_PROMETHEUS_REQUIRED=1).
func needTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if os.Getenv(RequiredEnv) == "1" {
		t.Fatalf("%s is not on PATH and %s=1: install it (apt-get install prometheus)", name, RequiredEnv)
	}
	t.Skipf("%s not on PATH (apt-get install prometheus); make ci requires it", name)
	return ""
}

var metricName = regexp.MustCompile(`\b(?:gateway|go|process)_[a-z0-9_]+\b`)

// TestFullStackOnLoopback runs the compose file's gateways and upstream on
// loopback under a little traffic, then checks the dashboard against them:
// its metric names, promtool, and every query through a real Prometheus.
func TestFullStackOnLoopback(t *testing.T) {
	p := loadCompose(t)
	st := loopbackStack(t, p)
	reps := st.reps
	pro, free := token(t, p, "stack-pro", "pro"), token(t, p, "stack-free", "free")
	traffic(t, reps, pro, free)

	t.Run("every dashboard query names a metric the replicas export", func(t *testing.T) {
		exported := map[string]bool{}
		for _, r := range reps {
			parser := expfmt.NewTextParser(model.UTF8Validation)
			mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(scrape(t, r))))
			require.NoError(t, err)
			for name, mf := range mfs {
				exported[name] = true
				if mf.GetType().String() == "HISTOGRAM" {
					for _, suffix := range []string{"_bucket", "_sum", "_count"} {
						exported[name+suffix] = true
					}
				}
			}
		}
		qs := readDashboard(t).queries()
		require.NotEmpty(t, qs)
		for _, q := range qs {
			names := metricName.FindAllString(q.expr, -1)
			assert.NotEmpty(t, names, "panel %q: query names no metric: %s", q.panel, q.expr)
			for _, n := range names {
				assert.True(t, exported[n], "panel %q reads %s, which no replica exports", q.panel, n)
			}
		}
	})

	t.Run("promtool check metrics passes on every replica", func(t *testing.T) {
		promtool := needTool(t, "promtool")
		for _, r := range reps {
			cmd := exec.CommandContext(t.Context(), promtool, "check", "metrics")
			cmd.Stdin = strings.NewReader(string(scrape(t, r)))
			out, err := cmd.CombinedOutput()
			assert.NoError(t, err, "%s: promtool check metrics:\n%s", r.name, out)
		}
		out, err := exec.CommandContext(t.Context(), promtool, "check", "config", "--syntax-only", filepath.Join(root, "stack/prometheus.yml")).CombinedOutput()
		assert.NoError(t, err, "promtool check config stack/prometheus.yml:\n%s", out)
	})

	t.Run("a real Prometheus returns data for every dashboard query", func(t *testing.T) {
		prom := needTool(t, "prometheus")
		base := startPrometheus(t, prom, reps)
		for _, r := range reps {
			waitQuery(t, base, fmt.Sprintf(`up{job="gateway",instance=%q} == 1`, r.admin), 1, 30*time.Second)
		}
		// A second wave after the first scrapes, so every counter and
		// histogram has moved between two samples (rate needs two) — on
		// new upstream connections, so connect time has too.
		st.restartUpstream()
		traffic(t, reps, pro, free)
		waitQuery(t, base, `sum(gateway_http_requests_total)`, requestsServed(t, reps), 30*time.Second)
		waitQuery(t, base, `count(count_over_time(gateway_requests_in_flight[1m]) >= 3)`, 2, 30*time.Second)

		var empty []string
		for _, q := range readDashboard(t).queries() {
			res, err := promQuery(t, base, evaluable(q.expr))
			if !assert.NoError(t, err, "panel %q: %s", q.panel, q.expr) {
				continue
			}
			finite := 0
			for _, v := range res {
				if !math.IsNaN(v) && !math.IsInf(v, 0) {
					finite++
				}
			}
			if finite == 0 {
				empty = append(empty, fmt.Sprintf("%s: %s (%d series, none finite)", q.panel, q.expr, len(res)))
			}
		}
		sort.Strings(empty)
		assert.Empty(t, empty, "every dashboard query returns data from a real Prometheus")
	})
}

// requestsServed is gateway_http_requests_total summed over the replicas, now.
func requestsServed(t *testing.T, reps []replica) float64 {
	t.Helper()
	total := 0.0
	for _, r := range reps {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := parser.TextToMetricFamilies(strings.NewReader(string(scrape(t, r))))
		require.NoError(t, err)
		if mf := mfs["gateway_http_requests_total"]; mf != nil {
			for _, m := range mf.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	require.Positive(t, total)
	return total
}

// startPrometheus runs prometheus on a free loopback port, scraping the
// replicas' admin listeners every second, and returns its base URL.
func startPrometheus(t *testing.T, bin string, reps []replica) string {
	t.Helper()
	dir := t.TempDir()
	var targets []string
	for _, r := range reps {
		targets = append(targets, strconv.Quote(r.admin))
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: gateway\n    static_configs:\n      - targets: [%s]\n",
		strings.Join(targets, ", "))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600))
	addr := freeAddr(t)
	start(t, "prometheus", bin, nil, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	base := "http://" + addr
	waitHTTP(t, base+"/-/ready", 30*time.Second)
	return base
}

// promQuery evaluates expr now and returns each series' value.
func promQuery(t *testing.T, base, expr string) ([]float64, error) {
	t.Helper()
	resp, err := localClient.Get(base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("prometheus: %s", r.Error)
	}
	var out []float64
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("value %v: %w", s.Value[1], err)
		}
		out = append(out, v)
	}
	return out, nil
}

// waitQuery polls until expr's first value is at least want.
func waitQuery(t *testing.T, base, expr string, want float64, within time.Duration) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		res, err := promQuery(t, base, expr)
		require.NoError(c, err)
		require.NotEmpty(c, res, "prometheus: %s has no value yet", expr)
		assert.GreaterOrEqual(c, res[0], want, "prometheus: %s did not reach %v within %s", expr, want, within)
	}, within, 250*time.Millisecond)
}
