package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chatWith is a chat request asking for at most maxTokens of answer.
func chatWith(model string, maxTokens int) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"hello"}]}`, model, maxTokens)
}

// callWithin is call for a caller that hangs up after within.
func callWithin(t *testing.T, url, tok, body string, within time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

// TestIntegrationACallerWhoHangsUpPaysTheUpstreamsBill: a tenant that
// reads two deltas of a stream and closes the socket is charged what the
// upstream billed, not the reservation its bytes priced (about 90 tokens
// here, for a bill of 1,796). It was charged the reservation: a fraction of
// the bill, on every stream it chose to abandon.
func TestIntegrationACallerWhoHangsUpPaysTheUpstreamsBill(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := chatapi.NewFrame("m")
		send := func(data []byte) {
			_, _ = fmt.Fprintf(w, "data: %s\n\n", data)
			w.(http.Flusher).Flush()
		}
		send(f.Chunk(chatapi.Delta{Role: "assistant"}, ""))
		for i := range 6 {
			select {
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
				return // the gateway hung up: the caller's leaving reached the upstream
			}
			word := fmt.Sprintf("w%d ", i)
			send(f.Chunk(chatapi.Delta{Content: &word}, ""))
		}
		send(f.Chunk(chatapi.Delta{}, "stop"))
		send(f.UsageChunk(chatapi.Usage{PromptTokens: 1790, CompletionTokens: 6, TotalTokens: 1796})) // more than the bytes show (a system prompt of the upstream's own, a tokenizer of its own)
		send(chatapi.DoneData)
	}))
	defer up.Close()
	t.Setenv("UP_KEY", "sk-test")
	in := start(t, prefix(t), "-tiers", tiersFile(t, 8, 2000), "-upstream", "name=up,url="+up.URL+"/v1,model=m,key-env=UP_KEY,local=true")
	tok := token(t, "leaver", "tight", time.Hour)

	ctx, hangUp := context.WithCancel(t.Context())
	defer hangUp()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.url+"/v1/chat/completions",
		strings.NewReader(`{"model":"up","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"要約してください：量子もつれ、ベル不等式、局所実在論"}]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	events := 0
	for _, err := range chatapi.Events(resp.Body) {
		require.NoError(t, err)
		if events++; events == 2 {
			break // two deltas read (the role is held until the first)
		}
	}
	hangUp()
	_ = resp.Body.Close()

	require.Eventually(t, func() bool {
		return strings.Contains(metricsOf(t, in.admin), `gateway_calls_read_on_total{outcome="billed"} 1`)
	}, 10*time.Second, 10*time.Millisecond, "the call is read on until the upstream reports its usage")
	code, _, body := call(t, in.url, tok, chatWith("auto", 600))
	assert.Equal(t, http.StatusTooManyRequests, code, "1,796 of 2,000 tokens are charged — the bill, not the reservation of about 90 — so 600 more do not fit: %s", body)
	assert.Equal(t, "tokens_per_minute", errorCode(t, body))
}

// TestIntegrationACallerWhoHangsUpPaysNoMoreThanTheBill: the other side
// of the same rule — a caller who hangs up on a whole answer the upstream
// then bills modestly is charged that, once the call has been read on,
// not the reservation of a long answer it never got.
func TestIntegrationACallerWhoHangsUpPaysNoMoreThanTheBill(t *testing.T) {
	in := start(t, prefix(t), "-tiers", tiersFile(t, 8, 2000), "-provider", "name=slow,latency=500ms")
	tok := token(t, "leaver", "tight", time.Hour)
	err := callWithin(t, in.url, tok, chatWith("slow", 1500), 100*time.Millisecond)
	require.Error(t, err, "the caller gave up before the answer")
	code, _, body := call(t, in.url, tok, chatWith("auto", 600))
	assert.Equal(t, http.StatusTooManyRequests, code, "while the call is read on, its 1,500 are reserved: %s", body)
	require.Eventually(t, func() bool {
		return strings.Contains(metricsOf(t, in.admin), `gateway_calls_read_on_total{outcome="billed"} 1`)
	}, 10*time.Second, 10*time.Millisecond, "the call is read on to its end")
	code, _, body = call(t, in.url, tok, chatWith("auto", 600))
	assert.Equal(t, http.StatusOK, code, "the simulated upstream billed a short answer: the rest of the reservation is back: %s", body)
}

// TestIntegrationEveryAttemptPaysForItself: three attempts that each
// timed out sent the prompt upstream three times; each is charged its
// reservation. (The request used to be charged nothing.)
func TestIntegrationEveryAttemptPaysForItself(t *testing.T) {
	in := start(t, prefix(t), "-tiers", tiersFile(t, 8, 2000), "-provider", "name=slow,latency=2s", "-route", "retry=slow:slow-1",
		"-attempt-timeout", "200ms", "-max-attempts", "3", "-base-backoff", "1ms", "-max-backoff", "1ms", "-failure-threshold", "100")
	tok := token(t, "retrier", "tight", time.Hour)
	code, _, body := call(t, in.url, tok, chatWith("retry", 580)) // about 600 a call
	require.Equal(t, http.StatusGatewayTimeout, code, "every attempt timed out: %s", body)
	code, _, body = call(t, in.url, tok, chatWith("retry", 580))
	assert.Equal(t, http.StatusTooManyRequests, code, "three attempts of about 600 each are charged: 600 more do not fit: %s", body)
	assert.Equal(t, "tokens_per_minute", errorCode(t, body))
}

// TestIntegrationARetryTheQuotaCannotHoldIsNeverSent: a retry reserves
// for itself; one the quota cannot hold ends the request with 429 before
// the upstream sees it.
func TestIntegrationARetryTheQuotaCannotHoldIsNeverSent(t *testing.T) {
	in := start(t, prefix(t), "-tiers", tiersFile(t, 8, 2000), "-provider", "name=slow,latency=2s", "-route", "retry=slow:slow-1",
		"-attempt-timeout", "200ms", "-max-attempts", "3", "-base-backoff", "1ms", "-max-backoff", "1ms", "-failure-threshold", "100")
	tok := token(t, "greedy", "tight", time.Hour)
	code, h, body := call(t, in.url, tok, chatWith("retry", 1200)) // about 1,215 a call: the second does not fit
	assert.Equal(t, http.StatusTooManyRequests, code, "the first attempt timed out, the second could not be paid for: %s", body)
	assert.Equal(t, "tokens_per_minute", errorCode(t, body))
	assert.NotEmpty(t, h.Get("Retry-After"))
	assert.Contains(t, metricsOf(t, in.admin), `gateway_provider_attempts_total{model="slow-1",outcome="timeout",provider="slow"} 1`,
		"one attempt reached the upstream; the retry never did")
}

// TestIntegrationOneTenantCannotTakeEverySlotOfAReplica: the per-replica
// cap stays beside the shared lease, so a tenant within its tier's
// in-flight cap still leaves slots for the others.
func TestIntegrationOneTenantCannotTakeEverySlotOfAReplica(t *testing.T) {
	in := start(t, prefix(t), "-tiers", tiersFile(t, 3, 0), "-max-concurrent", "4", "-provider", "name=slow,latency=1s")
	hog := token(t, "hog", "tight", time.Hour)
	codes := make(chan int, 3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { c, _, _ := call(t, in.url, hog, chatWith("slow", 10)); codes <- c })
	}
	require.Eventually(t, func() bool { return strings.Contains(metricsOf(t, in.admin), "gateway_requests_in_flight 2") },
		10*time.Second, 10*time.Millisecond, "two of the hog's requests hold two of the four slots")
	code, _, body := call(t, in.url, token(t, "neighbour", "tight", time.Hour), chatWith("slow", 10))
	assert.Equal(t, http.StatusOK, code, "another tenant is served: %s", body)
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	assert.Equal(t, map[int]int{200: 2, 429: 1}, got, "the hog's third request, within its tier's cap of 3, is over the replica's cap of 2")
}

func TestATokenDebtOutsideItsRangeDoesNotStart(t *testing.T) {
	t.Setenv("JWT_SECRET", secret)
	for _, minutes := range []string{"0", "61"} {
		var out, errOut testkit.LogBuffer
		assert.Equal(t, 2, run(t.Context(), []string{"-token-debt-minutes", minutes, "-redis-url", "redis://127.0.0.1:1"}, &out, &errOut, nil))
		assert.Contains(t, errOut.String(), "-token-debt-minutes "+minutes+": want 1 to 60")
	}
}

func TestATierThatCouldTakeEverySlotDoesNotStart(t *testing.T) {
	t.Setenv("JWT_SECRET", secret)
	var out, errOut testkit.LogBuffer
	assert.Equal(t, 2, run(t.Context(), []string{"-tiers", tiersFile(t, 32, 0), "-max-concurrent", "32", "-redis-url", "redis://127.0.0.1:1"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "tier tight: max_in_flight 32 is not below -max-concurrent 32")
}

// TestIntegrationARequestRefusedForWantOfASlotKeepsItsRateToken: a tenant
// whose only token went to a request the replica had no slot for (others
// held them all) is served once a slot frees, not refused for its rate.
func TestIntegrationARequestRefusedForWantOfASlotKeepsItsRateToken(t *testing.T) {
	file := t.TempDir() + "/tiers.yaml"
	require.NoError(t, os.WriteFile(file, []byte(`tiers:
  slow:
    rate_per_second: 0.001
    burst: 1
    max_in_flight: 1
    max_prompt_bytes: 65536
    models: ["*"]
    max_request_timeout: 30s
    tokens_per_minute: 0
`), 0o644))
	in := start(t, prefix(t), "-tiers", file, "-max-concurrent", "2", "-max-queue-wait", "0", "-provider", "name=slow,latency=1s")
	var wg sync.WaitGroup
	for _, tenant := range []string{"first", "second"} {
		tok := token(t, tenant, "slow", time.Hour)
		wg.Go(func() { code, _, _ := call(t, in.url, tok, chatWith("slow", 10)); assert.Equal(t, http.StatusOK, code) })
	}
	require.Eventually(t, func() bool { return strings.Contains(metricsOf(t, in.admin), "gateway_requests_in_flight 2") },
		10*time.Second, 10*time.Millisecond, "two tenants hold both slots")
	victim := token(t, "victim", "slow", time.Hour)
	code, _, body := call(t, in.url, victim, chatWith("slow", 10))
	require.Equal(t, http.StatusServiceUnavailable, code, "no slot, and no queue: %s", body)
	wg.Wait()
	code, _, body = call(t, in.url, victim, chatWith("slow", 10))
	assert.Equal(t, http.StatusOK, code, "the victim's one token (burst 1, one an hour) came back with its refusal: %s", body)
}

// TestIntegrationAStalledRedisIsGivenItsDocumentedBudgetNotTheReadTimeout:
// the shared limits wait 100 ms (the rate) and 50 ms (tokens, leases) for
// Redis, then fail closed. A stall of a few hundred milliseconds is longer
// than those budgets and shorter than the client's 500 ms read timeout, so
// the request is refused — not served late, as it was while go-redis
// ignored the contexts' deadlines and waited out the stall.
func TestIntegrationAStalledRedisIsGivenItsDocumentedBudgetNotTheReadTimeout(t *testing.T) {
	srv := redistest.Own(t)
	in := start(t, prefix(t), "-redis-url", srv.URL(), "-tiers", tiersFile(t, 8, 2000))
	tok := token(t, "patient", "tight", time.Hour)
	code, _, body := call(t, in.url, tok, chatWith("auto", 10))
	require.Equal(t, http.StatusOK, code, "the scripts are loaded before the stall: %s", body)
	srv.Stall(400 * time.Millisecond)
	code, _, body = call(t, in.url, tok, chatWith("auto", 10))
	assert.Equal(t, http.StatusServiceUnavailable, code, "the stall outlasts the 100 ms the rate may take: %s", body)
	assert.Equal(t, "rate_limiter_unavailable", errorCode(t, body))
}

// TestIntegrationOneTenantsSlowRequestsDoNotOpenTheBreakerForEveryone:
// timeouts of one tenant alone never count towards the breaker; once a
// second tenant's requests time out too, they do.
func TestIntegrationOneTenantsSlowRequestsDoNotOpenTheBreakerForEveryone(t *testing.T) {
	in := start(t, prefix(t), "-tiers", tiersFile(t, 8, 0), "-provider", "name=slow,latency=2s",
		"-attempt-timeout", "200ms", "-max-attempts", "1", "-failure-threshold", "2")
	breaker := func() string {
		for _, line := range strings.Split(metricsOf(t, in.admin), "\n") {
			if strings.HasPrefix(line, `gateway_breaker_state{model="slow-1",provider="slow"}`) {
				return strings.Fields(line)[1]
			}
		}
		return "missing"
	}
	slowpoke := token(t, "slowpoke", "tight", time.Hour)
	for range 3 {
		code, _, body := call(t, in.url, slowpoke, chatWith("slow", 10))
		require.Equal(t, http.StatusGatewayTimeout, code, body)
	}
	assert.Equal(t, "0", breaker(), "three timeouts, all one tenant's: closed")
	code, _, body := call(t, in.url, token(t, "other", "tight", time.Hour), chatWith("slow", 10))
	require.Equal(t, http.StatusGatewayTimeout, code, body)
	code, _, body = call(t, in.url, slowpoke, chatWith("slow", 10))
	require.Equal(t, http.StatusGatewayTimeout, code, body)
	assert.Equal(t, "2", breaker(), "(open) a second tenant's requests time out too: the two timeouts since count, the target is down for everyone")
}
