package redistest

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit/redismark"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

// recordingTB stands in for a test so the helper's skip-or-fail decision
// can be observed instead of ending the real test.
type recordingTB struct {
	testing.TB
	mu      sync.Mutex
	skipped bool
	failed  bool
	msg     string
	logs    []string
}

func (r *recordingTB) Helper()      {}
func (r *recordingTB) Name() string { return "Recording" }
func (r *recordingTB) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *recordingTB) Skip(args ...any) { r.Skipf("%s", fmt.Sprint(args...)) }
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// findWith runs the finder against a recording TB in its own goroutine
// (Skipf and Fatalf end that goroutine, as they end a real test).
func findWith(f *finder) *recordingTB {
	rec := &recordingTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.find(rec)
	}()
	<-done
	return rec
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func noServer(string) (string, error) { return "", exec.ErrNotFound }

func noDocker(context.Context) (string, func(), error) {
	return "", nil, errors.New("docker unavailable: no engine")
}

func TestMissingRedisFailsWhenRequired(t *testing.T) {
	rec := findWith(&finder{getenv: env(map[string]string{RequiredEnv: "1"}), lookPath: noServer, docker: noDocker})
	assert.True(t, rec.failed, "with %s=1 a missing Redis must fail the test", RequiredEnv)
	assert.False(t, rec.skipped, "with %s=1 a missing Redis must never skip", RequiredEnv)
	assert.Contains(t, rec.msg, "no redis-server on PATH")
	assert.Contains(t, rec.msg, "docker unavailable")
}

func TestMissingRedisSkipsWhenNotRequired(t *testing.T) {
	rec := findWith(&finder{getenv: env(nil), lookPath: noServer, docker: noDocker})
	assert.True(t, rec.skipped, "without %s a missing Redis skips", RequiredEnv)
	assert.False(t, rec.failed)
	assert.Contains(t, rec.msg, RequiredEnv, "the skip message should say how to make it a failure")
	reason, ok := redismark.SkipReason(rec.msg)
	assert.True(t, ok, "labctl finds a missing Redis by the shared skip marker: %q", rec.msg)
	assert.Contains(t, reason, "no redis-server on PATH", "the one-line reason says what was tried")
	assert.NotContains(t, rec.msg, "\n", "the skip reason is one line")
}

func TestUnreachableRedisURLFailsWhenRequired(t *testing.T) {
	// Port 1 on loopback: nothing listens there, so the connection is refused at once.
	rec := findWith(&finder{
		getenv: env(map[string]string{URLEnv: "redis://127.0.0.1:1/0", RequiredEnv: "1"}),
		lookPath: func(string) (string, error) {
			t.Error("REDIS_URL is set: PATH must not be searched")
			return "", exec.ErrNotFound
		},
		docker: noDocker,
	})
	assert.True(t, rec.failed, "an explicit REDIS_URL that does not answer must fail when Redis is required")
	assert.Contains(t, rec.msg, "does not answer")
}

func TestRedactHidesPassword(t *testing.T) {
	assert.Equal(t, "redis://user:xxxxx@host:6379/0", redact("redis://user:s3cret@host:6379/0"))
	assert.Equal(t, "redis://host:6379/0", redact("redis://host:6379/0"))
}

func TestPrefixIsPerTestWithHashTag(t *testing.T) {
	p := Prefix(t)
	assert.True(t, strings.HasPrefix(p, "test:{TestPrefixIsPerTestWithHashTag-"), p)
	assert.Equal(t, p, Prefix(t), "the same test must get the same prefix")
	t.Run("sub", func(t *testing.T) { assert.NotEqual(t, p, Prefix(t)) })
}

func TestStartsRedisServerFromPath(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server on PATH; this path of the helper is tested where one is installed")
	}
	f := &finder{getenv: env(nil), lookPath: func(string) (string, error) { return bin, nil }, docker: noDocker}
	rec := findWith(f)
	require.False(t, rec.failed || rec.skipped, rec.msg)
	require.NotNil(t, f.stop)
	t.Cleanup(f.stop)
	assert.Contains(t, strings.Join(rec.logs, "\n"), Marker)
	assert.NoError(t, ping(f.url), "the started server should answer")
	f.stop()
	f.stop = func() {}
	assert.Error(t, ping(f.url), "stop should stop the server")
}

// TestIntegrationRedisHelperReachesRealRedis is the helper's own real-Redis
// test: `labctl integration` runs it with REDIS_INTEGRATION_REQUIRED=1.
func TestIntegrationRedisHelperReachesRealRedis(t *testing.T) {
	rdb := Client(t)
	ctx := t.Context()
	key := Prefix(t) + "k"
	require.NoError(t, rdb.Set(ctx, key, "v", 0).Err())
	got, err := rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
	info, err := rdb.Info(ctx, "server").Result()
	require.NoError(t, err)
	assert.Contains(t, info, "redis_version", "a real Redis reports its version; a fake would not")
}
