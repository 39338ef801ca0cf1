package router_test

// Tests for the bugs two outsiders' banks (a fourth round, one written from
// the contract alone, one aimed at the tests' gaps) got past the suite:
// each passes on the reference and fails with its bug.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 01. Package doc: "a slot within MaxQueueWait (queue wait recorded) →
// total deadline starts"; run.deadline: "TotalTimeout from the first
// attempt". A request that queued 1.5 s still has its whole 2 s.
func TestTheTotalDeadlineStartsWhenTheSlotIsGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, 5*time.Second
		cfg.Retry.MaxAttempts, cfg.Retry.AttemptTimeout, cfg.Retry.TotalTimeout = 1, 5*time.Second, 2*time.Second
		p := &fake{name: "p", answer: func(ctx context.Context, call int) (llm.Completion, error) {
			if call == 1 { // the first request holds the only slot for 1.5 s
				time.Sleep(1500 * time.Millisecond)
				return answer("", "first"), nil
			}
			<-ctx.Done()
			return llm.Completion{}, ctx.Err()
		}}
		g := newRouter(t, cfg, p)
		defer closeGateway(t, g)
		first := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); first <- err }()
		synctest.Wait()
		start := time.Now()
		resp, err := g.Generate(t.Context(), request("b"))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1500*time.Millisecond, resp.QueueWait)
		assert.Equal(t, 3500*time.Millisecond, time.Since(start), "1.5 s queued, then the whole 2 s TotalTimeout")
		require.NoError(t, <-first)
	})
}

// 02. Config.RetryBudget: "must allow every attempt after a request's
// first ... each later one withdraws from the provider it goes to" — a
// fall-back on a refusal the route names (FallbackOn) included.
func TestAFallbackOnARefusalIsPaidForByTheRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("small-ctx", status(http.StatusBadRequest, "context_length_exceeded", 0))
		budget := &ledger{left: 0}
		cfg := config()
		cfg.RetryBudget = budget
		g := newGateway(t, cfg, up)
		req := ask(route("small-ctx", "long-ctx"))
		req.Route.FallbackOn = []string{"context_length_exceeded"}
		_, err := g.Generate(t.Context(), req)
		require.ErrorIs(t, err, router.ErrRetryBudgetExhausted, "the fall-back is a second attempt: an empty budget refuses it")
		assert.Zero(t, up.count("long-ctx"))
		assert.Equal(t, []string{"deposit up", "refused up"}, budget.history())
	})
}

// 03. continueOn: a continuation the budget refused was never asked —
// "not asked: nothing to say of its health" (errNeutral).
func TestABudgetRefusedContinuationSaysNothingOfItsTargetsHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &ledger{}
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		cfg := config() // FailureThreshold 2
		cfg.RetryBudget = budget
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}}, Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		for range cfg.Health.FailureThreshold {
			req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
			require.True(t, g.Resolve("chat", &req))
			_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
			require.ErrorIs(t, err, router.ErrAfterFirstByte)
		}
		assert.Empty(t, fallback.calls(), "the budget refused every continuation")
		state, _ := g.TargetState(router.Target{Provider: "fallback"})
		assert.Equal(t, breaker.Closed, state, "a target never asked has not failed")
	})
}

// 04. health: available is "half-open with its probe not out"; a probe
// that reported (here neutrally: refused before it was sent) is not out,
// so the target is one to fail over to at once (package doc: "the next
// target at once if this request has not tried it yet").
func TestATargetWhoseProbeReportedIsFailedOverToAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		bCalls := 0
		up.script("b", func(ctx context.Context) (llm.Completion, error) {
			bCalls++
			switch bCalls {
			case 1, 2:
				return status(http.StatusServiceUnavailable, "", 0)(ctx)
			case 3:
				return llm.Completion{}, fmt.Errorf("refused before sending: %w", llm.ErrNotSent)
			}
			return answer("b", "b ok"), nil
		})
		aCalls := 0
		up.script("a", func(ctx context.Context) (llm.Completion, error) {
			aCalls++
			if aCalls == 1 {
				return status(http.StatusTooManyRequests, "rate_limit_exceeded", 3*time.Second)(ctx)
			}
			return answer("a", "a ok"), nil
		})
		cfg := config() // FailureThreshold 2
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("b"))) // b fails twice: open
		require.Error(t, err)
		time.Sleep(cfg.Health.RecoveryTimeout)
		_, err = g.Generate(t.Context(), ask(route("b"))) // the half-open probe, neutral
		require.ErrorIs(t, err, llm.ErrNotSent)
		require.Equal(t, "half-open", targetState(g, "up", "b"))

		start := time.Now()
		resp, err := g.Generate(t.Context(), ask(route("a", "b")))
		require.NoError(t, err)
		assert.Equal(t, "b", resp.Model)
		assert.Zero(t, time.Since(start), "b's probe has reported: fail over to it at once, not after a's 3 s Retry-After")
		assert.Zero(t, resp.Backoff)
	})
}

// 05. leg.prior: "what attempts before this one were charged: added to the
// usage it tells"; Response.Raw "its usage telling the whole request's
// cost" — for a stream that fell back before its first byte too.
func TestAStreamThatFellBackTellsWhatTheFailedAttemptWasCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("a", func(ctx context.Context) (llm.Completion, error) {
			c, err := status(http.StatusServiceUnavailable, "", 0)(ctx)
			c.Charged = &llm.Usage{PromptTokens: 10, TotalTokens: 10}
			return c, err
		})
		up.script("b", func(context.Context) (llm.Completion, error) {
			u := chatapi.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}
			return llm.Completion{Raw: chatapi.NewFrame("b").Completion("ok", nil, "stop", &u), Model: "b", Usage: &u}, nil
		})
		g := newGateway(t, config(), up)
		chat, err := chatapi.Parse([]byte(`{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat, Route: &router.Route{Targets: route("a", "b")}}
		var last *chatapi.Usage
		resp, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			p, err := chatapi.ReadPiece(c.Raw)
			require.NoError(t, err)
			if p.Usage != nil {
				last = p.Usage
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, 2, resp.Attempts)
		require.NotNil(t, last)
		assert.Equal(t, chatapi.Usage{PromptTokens: 20, CompletionTokens: 2, TotalTokens: 22}, *last,
			"b's usage plus the 10 tokens the failed attempt at a was charged")
	})
}

// 06. Response.Usage: "what the upstreams that wrote the answer reported,
// summed over a continued stream's calls".
func TestAContinuedStreamsResponseUsageSumsEveryCallsReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &raws{name: "primary", events: []string{
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}],"usage":{"prompt_tokens":50,"completion_tokens":1,"total_tokens":51}}`}, end: resets}
		cont := &raws{name: "cont", events: []string{
			`{"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`}, end: finishes}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "cont"}}, Continue: []router.Target{{Provider: "cont"}}}}
		g := newGateway(t, cfg, primary, cont)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", true)}
		require.True(t, g.Resolve("chat", &req))
		resp, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.NoError(t, err)
		require.NotNil(t, resp.Usage)
		assert.Equal(t, llm.Usage{PromptTokens: 59, CompletionTokens: 3, TotalTokens: 62}, *resp.Usage,
			"the cut call's report (50+1) and the continuation's (9+2)")
	})
}

// 07. isFailure: "a caller that left (lab 04's default) is not the
// upstream's fault".
func TestACallerWhoLeavesDoesNotCountAgainstTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("slow", func(ctx context.Context) (llm.Completion, error) {
			<-ctx.Done()
			return llm.Completion{}, ctx.Err()
		})
		cfg := config()
		cfg.Health.FailureThreshold = 1
		g := newGateway(t, cfg, up)
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
		_, err := g.Generate(ctx, ask(route("slow")))
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, "closed", targetState(g, "up", "slow"), "the caller left; the upstream did not fail")
	})
}

// 08. probeUntilUp "probes t until a probe succeeds, its breaker closes (a
// request's own probe got through), ..."; probe.go: "while a target's
// breaker is open, the router probes its upstream".
func TestBackgroundProbesStopOnceARequestsProbeClosedTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.RecoveryTimeout = 2500 * time.Millisecond
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = time.Second, time.Second
		up := &probed{upstream: newUpstream("up"), down: &atomic.Bool{}}
		up.down.Store(true) // its probe keeps failing; its requests recover
		calls := 0
		up.script("primary", func(ctx context.Context) (llm.Completion, error) {
			calls++
			if calls <= 2 {
				return status(http.StatusServiceUnavailable, "", 0)(ctx)
			}
			return answer("primary", "ok"), nil
		})
		g := newGateway(t, cfg, up)
		for range 2 { // FailureThreshold 2: open at 0 s
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(cfg.Health.RecoveryTimeout) // background probes at 1 s and 2 s failed
		resp, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
		require.NoError(t, err)
		require.Equal(t, "primary", resp.Model, "the request's half-open probe succeeded")
		require.Equal(t, "closed", targetState(g, "up", "primary"))
		n := len(up.probeTimes())
		time.Sleep(time.Minute)
		assert.Equal(t, n, len(up.probeTimes()), "the breaker is closed: no more background probes")
	})
}

// 09. Observer.Attempt: "one provider call ended (err nil on success)" —
// a call cut after its first byte failed, whoever finished the answer.
func TestABrokenAttemptAContinuationFinishedIsObservedAsFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		obs := &outcomesOf{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		_, _, err := relay(t, g, router.Request{})
		require.NoError(t, err)
		if a := obs.of("primary"); assert.Len(t, a, 1) {
			assert.Error(t, a[0], "the primary's call broke: gateway_provider_failures_total must count it")
		}
		if a := obs.of("fallback"); assert.Len(t, a, 1) {
			assert.NoError(t, a[0])
		}
	})
}

// 10. streak.verdict: a refusal (4xx) is what "the breaker counts a
// success", so it starts a new run; Config.IsolateTenantFailures: provoked
// failures count "only once two tenants have had them since the target's
// last success".
func TestARefusalEndsARunOfProvokedFailuresLikeASuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := twoTenants(t, true)
		require.Error(t, send(g, "bob", "slow"))
		require.Error(t, send(g, "bob", "status=400"))
		for range 5 {
			require.Error(t, send(g, "acme", "slow"))
		}
		assert.Equal(t, "closed", state(g, "up"), "the run since bob's 400 is acme's alone")
	})
}

// Router.Stream: "A failure after the answer's finish reason
// ends it whole." A continuation that sent its finish_reason and then
// dropped before [DONE] has finished the answer.
func TestAContinuationThatFinishedAndThenDroppedEndsWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := errors.New("read: connection reset by peer")
		primary := &scripted{name: "primary", words: []string{"Hello", " wor"}, failAfter: reset}
		fallback := &scripted{name: "fallback", cont: []string{"ld."}, finish: true, failAfter: reset}
		g := scriptedRouter(t, primary, fallback)
		c, _, err := stream(t, g)
		require.NoError(t, err, "the continuation's finish_reason reached the caller: the answer is whole")
		assert.Equal(t, "Hello world.", c.text)
		assert.Equal(t, 1, c.finishes)
		assert.Equal(t, []string{"Hello wor"}, fallback.prefills)
	})
}
