package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests start the real service on loopback ports, against a real
// Redis (redistest: REDIS_URL, a redis-server of the test run's own, or a
// skip that REDIS_INTEGRATION_REQUIRED=1 turns into a failure), with keys
// under a prefix of the test's own.

func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }

const secret = "test-secret-that-is-at-least-32-bytes-long!"

type instance struct {
	url, admin     string
	stop           context.CancelFunc
	code           chan int
	stdout, stderr *testkit.LogBuffer
}

// prefix is a key prefix of the test's own, without the hash-tag braces
// redistest puts in it (the limits add their own tag per tenant).
func prefix(t *testing.T) string {
	return strings.NewReplacer("{", "", "}", "").Replace(redistest.Prefix(t))
}

// start runs secure_app with a strong secret (unless the test has set
// JWT_SECRET or JWT_SECRET_FILE itself), the test's Redis and prefix, and an
// admin listener of its own; args come after those.
func start(t *testing.T, prefix string, args ...string) *instance {
	t.Helper()
	if os.Getenv(identity.EnvSecret) == "" && os.Getenv(identity.EnvSecretFile) == "" {
		t.Setenv(identity.EnvSecret, secret)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	admin := adminLn.Addr().String()
	require.NoError(t, adminLn.Close()) // the service opens it again
	ctx, stop := context.WithCancel(t.Context())
	in := &instance{url: "http://" + ln.Addr().String(), admin: "http://" + admin, stop: stop, code: make(chan int, 1),
		stdout: &testkit.LogBuffer{}, stderr: &testkit.LogBuffer{}}
	all := append([]string{"-readiness-delay=0", "-redis-url", redistest.URL(t), "-redis-prefix", prefix, "-admin-addr", admin,
		"-provider", "name=alpha,latency=1ms,chunk-delay=1ms", "-provider", "name=beta,latency=1ms"}, args...)
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		in.code <- run(ctx, all, in.stdout, in.stderr, ln)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-in.code:
		case <-time.After(30 * time.Second): // a watchdog, not a timing assertion
			t.Error("run did not return after its context was cancelled")
		}
	})
	require.Eventually(t, func() bool {
		select {
		case <-exited:
			require.FailNow(t, "secure_app exited at start", in.stderr.String())
		default:
		}
		resp, err := client.Get(in.admin + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "secure_app did not start: %s", in.stderr)
	return in
}

var client = &http.Client{Timeout: 20 * time.Second}

func token(t *testing.T, tenant, tier string, ttl time.Duration) string {
	t.Helper()
	tok, err := identity.Mint([]byte(secret), "gateway-lab", "gateway-lab-api", tenant, tier, ttl, time.Now())
	require.NoError(t, err)
	return tok
}

func call(t *testing.T, url, tok, body string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

const hello = `{"model":"auto","messages":[{"role":"user","content":"hello"}]}`

func errorCode(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e.Error.Code
}

func TestRefusesToStartWithoutAStrongSecret(t *testing.T) {
	var out, errOut testkit.LogBuffer
	t.Setenv("JWT_SECRET", "")
	assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", "redis://127.0.0.1:1"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "JWT_SECRET", "says which variable is missing")
	t.Setenv("JWT_SECRET", "too-short")
	errOut = testkit.LogBuffer{}
	assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", "redis://127.0.0.1:1"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "32")
	assert.NotContains(t, errOut.String(), "too-short", "and never prints the secret")
}

func TestTokenCommandPrintsOnlyTheToken(t *testing.T) {
	t.Setenv("JWT_SECRET", secret)
	var out, errOut testkit.LogBuffer
	require.Equal(t, 0, run(t.Context(), []string{"token", "--tenant", "acme", "--tier", "pro", "--ttl", "1h"}, &out, &errOut, nil), errOut.String())
	tok := strings.TrimSpace(out.String())
	assert.NotContains(t, tok, "\n", "the token alone on stdout, so $(secure_app token …) works")
	v, err := identity.NewVerifier(identity.Config{Secret: []byte(secret), Issuer: "gateway-lab", Audience: "gateway-lab-api"})
	require.NoError(t, err)
	c, err := v.Verify("Bearer " + tok)
	require.NoError(t, err)
	assert.Equal(t, "acme", c.Tenant)
	assert.Equal(t, "pro", c.Tier)
	assert.Equal(t, 2, run(t.Context(), []string{"token", "--tenant", "acme", "--tier", "platinum"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "platinum")
}

func TestIdentityComesFromAVerifiedToken(t *testing.T) {
	in := start(t, prefix(t))
	code, _, body := call(t, in.url, token(t, "acme", "pro", time.Hour), hello)
	require.Equal(t, http.StatusOK, code, body)

	code, h, body := call(t, in.url, "", hello)
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Equal(t, "missing_token", errorCode(t, body))
	assert.Contains(t, h.Get("WWW-Authenticate"), "Bearer")

	expired, err := identity.Mint([]byte(secret), "gateway-lab", "gateway-lab-api", "acme", "pro", time.Second, time.Now().Add(-time.Hour))
	require.NoError(t, err)
	code, _, body = call(t, in.url, expired, hello)
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Equal(t, "expired_token", errorCode(t, body))

	forged, err := identity.Mint([]byte("another-secret-that-is-32-bytes-long!!"), "gateway-lab", "gateway-lab-api", "acme", "enterprise", time.Hour, time.Now())
	require.NoError(t, err)
	code, _, body = call(t, in.url, forged, hello)
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Equal(t, "invalid_token", errorCode(t, body))
	assert.NotContains(t, body, "signature", "the caller learns only that the token is invalid")

	req, _ := http.NewRequest(http.MethodPost, in.url+"/v1/chat/completions", strings.NewReader(hello))
	req.Header.Set("X-Tenant-ID", "acme")
	resp, err := client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a tenant header is not an identity here")

	logs := in.stderr.String()
	assert.Contains(t, logs, `"reason":"signature invalid"`, "the precise reason is logged server-side")
	assert.NotContains(t, logs, forged, "never the token")
	assert.NotContains(t, logs, secret, "never the secret")
	assert.NotContains(t, logs, "hello", "never the prompt")
}

func TestTierPolicyRefusesWhatTheTierMayNotDo(t *testing.T) {
	in := start(t, prefix(t))
	free := token(t, "small-co", "free", time.Hour)
	code, _, body := call(t, in.url, free, `{"model":"beta","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusForbidden, code, "the free tier may use only auto")
	assert.Equal(t, "model_not_allowed", errorCode(t, body))

	big := fmt.Sprintf(`{"model":"auto","messages":[{"role":"user","content":%q}]}`, strings.Repeat("x", 40_000))
	code, _, body = call(t, in.url, free, big)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code, "32 KiB prompts on free")
	assert.Equal(t, "prompt_too_large", errorCode(t, body))
	assert.Contains(t, body, "32768", "the refusal names the limit")

	code, _, body = call(t, in.url, token(t, "big-co", "pro", time.Hour), big)
	assert.Equal(t, http.StatusOK, code, "pro takes it: %s", body)
}

func TestIntegrationTwoReplicasShareOneRateLimit(t *testing.T) {
	p := prefix(t)
	a, b := start(t, p), start(t, p)
	free := token(t, "shared-co", "free", time.Hour) // burst 5, 1 per second
	ok := 0
	for i := range 10 {
		url := a.url
		if i%2 == 1 {
			url = b.url
		}
		if code, _, _ := call(t, url, free, hello); code == http.StatusOK {
			ok++
		}
	}
	assert.Equal(t, 5, ok, "two replicas, one quota: the tenant's burst of 5, not 10")
}

func TestMetricsAreOnlyOnTheAdminListener(t *testing.T) {
	in := start(t, prefix(t))
	code, _, _ := call(t, in.url, "", hello)
	require.Equal(t, http.StatusUnauthorized, code)
	resp, err := client.Get(in.url + "/metrics")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode, "metrics are not on the public listener")
	resp, err = client.Get(in.admin + "/metrics")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.True(t, strings.Contains(string(b), `gateway_auth_refusals_total{reason="no authorization header"} 1`),
		"the admin listener serves the metrics, the 401 counted by its precise reason")
}

func TestUpstreamsOnPrivateAddressesAreRefusedUnlessMarkedLocal(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"from loopback"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	t.Setenv("UP_KEY", "sk-test")
	guarded := start(t, prefix(t), "-upstream", "name=up,url="+up.URL+"/v1,model=m,key-env=UP_KEY")
	code, _, body := call(t, guarded.url, token(t, "acme", "pro", time.Hour), `{"model":"up","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusBadGateway, code, "an upstream on 127.0.0.1 is refused at dial time: %s", body)
	assert.NotContains(t, body, "from loopback")

	local := start(t, prefix(t), "-upstream", "name=up,url="+up.URL+"/v1,model=m,key-env=UP_KEY,local=true")
	code, _, body = call(t, local.url, token(t, "acme", "pro", time.Hour), `{"model":"up","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusOK, code, "marked local=true, the same upstream is allowed: %s", body)
	assert.Contains(t, body, "from loopback")
}

func TestTiersFileErrorsAreLinePrecise(t *testing.T) {
	file := t.TempDir() + "/tiers.yaml"
	require.NoError(t, os.WriteFile(file, []byte("tiers:\n  free:\n    rate_per_second: 1\n    brust: 5\n"), 0o644))
	t.Setenv("JWT_SECRET", secret)
	var out, errOut testkit.LogBuffer
	assert.Equal(t, 2, run(t.Context(), []string{"-tiers", file, "-redis-url", "redis://127.0.0.1:1"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "tiers.yaml:4:", "the start fails naming the file and line")
}

// tiersFile writes a policy with one tier, "tight", whose limits the test sets.
func tiersFile(t *testing.T, inFlight, tokensPerMinute int) string {
	t.Helper()
	file := t.TempDir() + "/tiers.yaml"
	body := fmt.Sprintf(`tiers:
  tight:
    rate_per_second: 100
    burst: 100
    max_in_flight: %d
    max_prompt_bytes: 65536
    models: ["*"]
    max_request_timeout: 30s
    tokens_per_minute: %d
`, inFlight, tokensPerMinute)
	require.NoError(t, os.WriteFile(file, []byte(body), 0o644))
	return file
}

func TestIntegrationTokenQuotaIsReservedThenSettled(t *testing.T) {
	// 2,000 tokens a minute; each request reserves about 15 + its
	// max_tokens of 500, and the simulated answer uses about 20.
	in := start(t, prefix(t), "-tiers", tiersFile(t, 8, 2000))
	tok := token(t, "counted", "tight", time.Hour)
	body := `{"model":"auto","max_tokens":500,"messages":[{"role":"user","content":"hello"}]}`
	for i := range 10 {
		code, _, resp := call(t, in.url, tok, body)
		require.Equal(t, http.StatusOK, code, "request %d: settling gives back what the answer did not use, so ten fit in 2,000: %s", i, resp)
	}
	greedy := `{"model":"auto","max_tokens":1900,"messages":[{"role":"user","content":"hello"}]}`
	code, h, resp := call(t, in.url, tok, greedy)
	assert.Equal(t, http.StatusTooManyRequests, code, "a reservation the quota cannot hold now is refused: %s", resp)
	assert.Equal(t, "tokens_per_minute", errorCode(t, resp))
	assert.NotEmpty(t, h.Get("Retry-After"), "with when to come back")

	huge := `{"model":"auto","max_tokens":5000,"messages":[{"role":"user","content":"hello"}]}`
	code, _, resp = call(t, in.url, tok, huge)
	assert.Equal(t, http.StatusRequestEntityTooLarge, code, "a request that could never fit the quota is not told to wait")
	assert.Equal(t, "tokens_over_quota", errorCode(t, resp))
}

func TestIntegrationInFlightCapIsSharedByReplicas(t *testing.T) {
	p := prefix(t)
	file := tiersFile(t, 2, 0)
	slow := []string{"-tiers", file, "-provider", "name=slow,latency=2s"}
	a, b := start(t, p, slow...), start(t, p, slow...)
	tok := token(t, "busy-co", "tight", time.Hour)
	const slowBody = `{"model":"slow","messages":[{"role":"user","content":"take your time"}]}`
	codes := make(chan int, 3)
	for _, url := range []string{a.url, b.url} {
		go func() { c, _, _ := call(t, url, tok, slowBody); codes <- c }()
	}
	require.Eventually(t, func() bool {
		return strings.Contains(metricsOf(t, a.admin), "gateway_requests_in_flight 1") &&
			strings.Contains(metricsOf(t, b.admin), "gateway_requests_in_flight 1")
	}, 10*time.Second, 10*time.Millisecond, "one request in flight on each replica")
	code, _, body := call(t, a.url, tok, slowBody)
	assert.Equal(t, http.StatusTooManyRequests, code, "the tenant's third request is over max_in_flight 2 across both replicas: %s", body)
	assert.Equal(t, "too_many_concurrent_requests", errorCode(t, body))
	assert.Equal(t, http.StatusOK, <-codes)
	assert.Equal(t, http.StatusOK, <-codes)
}

func TestIntegrationRedisDownFailsClosedOrOpenAsConfigured(t *testing.T) {
	down := "redis://127.0.0.1:1/0"
	t.Setenv("JWT_SECRET", secret)
	var out, errOut testkit.LogBuffer
	assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", down}, &out, &errOut, nil),
		"a Redis that does not answer at start stops the start")
	assert.Contains(t, errOut.String(), "does not answer")

	// Mid-flight outages: a Redis of the test's own, stopped under a running replica.
	srv := startRedis(t)
	closed := start(t, "closed", "-redis-url", srv.url)
	open := start(t, "open", "-redis-url", srv.url, "-ratelimit-fail-open")
	tok := token(t, "acme", "pro", time.Hour)
	code, _, _ := call(t, closed.url, tok, hello)
	require.Equal(t, http.StatusOK, code)
	srv.stop()
	code, h, body := call(t, closed.url, tok, hello)
	assert.Equal(t, http.StatusServiceUnavailable, code, "fail closed by default: %s", body)
	assert.NotEmpty(t, h.Get("Retry-After"))
	code, _, body = call(t, open.url, tok, hello)
	assert.Equal(t, http.StatusOK, code, "-ratelimit-fail-open admits while Redis is down: %s", body)
	assert.Contains(t, metricsOf(t, open.admin), `gateway_redis_limit_errors_total{limit="rate",mode="failed_open"}`, "and counts it")
	srv.restart()
	require.Eventually(t, func() bool { c, _, _ := call(t, closed.url, tok, hello); return c == http.StatusOK },
		10*time.Second, 50*time.Millisecond, "the fail-closed replica recovers when Redis returns")
}

func metricsOf(t *testing.T, admin string) string {
	t.Helper()
	resp, err := client.Get(admin + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestIntegrationTwoReplicasShareOneRateLimitOnARedisCluster(t *testing.T) {
	c := redistest.Cluster(t)
	addrs := strings.Join(c.Options().Addrs, ",")
	p := prefix(t)
	a := start(t, p, "-redis-url", "", "-redis-cluster", addrs)
	b := start(t, p, "-redis-url", "", "-redis-cluster", addrs)
	free := token(t, "cluster-co", "free", time.Hour)
	ok := 0
	for i := range 10 {
		url := a.url
		if i%2 == 1 {
			url = b.url
		}
		if code, _, _ := call(t, url, free, hello); code == http.StatusOK {
			ok++
		}
	}
	assert.Equal(t, 5, ok, "on a cluster too, two replicas share one burst of 5")
	slot := func(key string) int64 {
		n, err := c.ClusterKeySlot(t.Context(), key).Result()
		require.NoError(t, err)
		return n
	}
	assert.Equal(t, slot("{cluster-co}"), slot(p+":rate:free:{cluster-co}"),
		"the rate key carries the tenant as its hash tag, so its script runs on one node (the quota's keys are checked in package quota)")
}

func TestIntegrationRefusedRequestsAreNotChargedTokens(t *testing.T) {
	// A tight rate (burst 2) and a token quota that fits four requests: the
	// requests the rate limit refuses must give their reservation back.
	file := t.TempDir() + "/tiers.yaml"
	require.NoError(t, os.WriteFile(file, []byte(`tiers:
  tight:
    rate_per_second: 0.001
    burst: 2
    max_in_flight: 8
    max_prompt_bytes: 65536
    models: ["*"]
    max_request_timeout: 30s
    tokens_per_minute: 2100
`), 0o644))
	in := start(t, prefix(t), "-tiers", file)
	tok := token(t, "refused-co", "tight", time.Hour)
	body := `{"model":"auto","max_tokens":500,"messages":[{"role":"user","content":"hello"}]}`
	codes := map[int]int{}
	for range 10 {
		code, _, _ := call(t, in.url, tok, body)
		codes[code]++
	}
	assert.Equal(t, map[int]int{200: 2, 429: 8}, codes, "the burst of 2 passes, the rest are rate limited")
	code, _, resp := call(t, in.url, tok, `{"model":"auto","max_tokens":1900,"messages":[{"role":"user","content":"hello"}]}`)
	assert.Equal(t, "rate_limited", errorCode(t, resp),
		"still rate limited, not out of tokens: the eight refused requests reserved ~4,100 tokens and gave every one back (%d)", code)
}

func TestTenantNamesWithBracesWork(t *testing.T) {
	in := start(t, prefix(t))
	code, _, body := call(t, in.url, token(t, "{odd}tenant%", "pro", time.Hour), hello)
	assert.Equal(t, http.StatusOK, code, "any visible ASCII is a valid tenant, braces included: %s", body)
}

func TestModelsNeedAToken(t *testing.T) {
	in := start(t, prefix(t))
	resp, err := client.Get(in.url + "/v1/models")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "the model list is not public")
	req, _ := http.NewRequest(http.MethodGet, in.url+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, "acme", "pro", time.Hour))
	resp, err = client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}
