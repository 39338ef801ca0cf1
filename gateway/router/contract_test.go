package router_test

// Tests from a second round of outsiders' bug banks (issue 34): Retry-After
// across targets, outages and deadlines, route policies at their edges,
// what a probe, a Close and a continuation must keep.

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// Two targets both answer 429 with Retry-After 3 s: the fail-over to the
// second is immediate, but the third attempt goes back to a target this
// request has tried, so it waits out the Retry-After.
func TestBackToATriedTargetHonoursItsRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		limited := status(http.StatusTooManyRequests, "rate_limit_exceeded", 3*time.Second)
		first := true
		up.script("a", func(ctx context.Context) (llm.Completion, error) {
			if first {
				first = false
				return limited(ctx)
			}
			return answer("a", "ok"), nil
		})
		up.script("b", limited)
		g := newGateway(t, config(), up)
		resp, err := g.Generate(t.Context(), ask(route("a", "b")))
		require.NoError(t, err)
		assert.Equal(t, []string{"a@0s", "b@0s", "a@3s"}, up.history(),
			"an untried target at once; a tried one only after its Retry-After")
		assert.Equal(t, 3, resp.Attempts)
	})
}

// A 4xx proves the upstream is up: it breaks a run of failures, so
// failure, refusal, failure does not open a breaker whose threshold is 2.
func TestARefusalBetweenFailuresCountsAsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		n := 0
		up.script("m", func(ctx context.Context) (llm.Completion, error) {
			n++
			if n == 2 {
				return status(http.StatusBadRequest, "invalid_value", 0)(ctx)
			}
			return status(http.StatusServiceUnavailable, "", 0)(ctx)
		})
		cfg := config()
		cfg.Retry.MaxAttempts = 1 // FailureThreshold 2
		g := newGateway(t, cfg, up)
		for range 3 {
			_, err := g.Generate(t.Context(), ask(route("m")))
			require.Error(t, err)
		}
		assert.Equal(t, "closed", targetState(g, "up", "m"), "the 400 in between reset the count: never two failures in a row")
	})
}

// Two breakers that opened at different times: Retry-After is the time to
// the sooner probe, not the later.
func TestRetryAfterIsTheSoonerOfTwoOutages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("a", status(http.StatusServiceUnavailable, "", 0))
		up.script("b", status(http.StatusServiceUnavailable, "", 0))
		cfg := config()
		cfg.Health.FailureThreshold, cfg.Retry.MaxAttempts = 1, 1 // RecoveryTimeout 10 s
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("a"))) // a opens at 0 s
		require.Error(t, err)
		time.Sleep(4 * time.Second)
		_, err = g.Generate(t.Context(), ask(route("b"))) // b opens at 4 s
		require.Error(t, err)
		_, err = g.Generate(t.Context(), ask(route("a", "b")))
		require.ErrorIs(t, err, router.ErrNoHealthyProvider)
		var ra llm.RetryAfterer
		require.ErrorAs(t, err, &ra)
		assert.Equal(t, 6*time.Second, ra.RetryAfter(), "a half-opens at 10 s, b at 14 s: come back in 6 s")
	})
}

// A Retry-After that ends exactly at the deadline leaves no time for the
// attempt after it: the route moves on at once instead of waiting.
func TestARetryAfterEndingExactlyAtTheDeadlineIsNotWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Retry.TotalTimeout = 2 * time.Second
		calls, err := retrying(t, false, 2*time.Second, failsThen(1, status(http.StatusServiceUnavailable, "", 2*time.Second)), cfg)
		require.NoError(t, err, "the secondary could answer at once")
		assert.Equal(t, []string{"primary@0s", "secondary@0s"}, calls)
	})
}

// FallbackOn may name an HTTP status as well as an error code.
func TestFallbackOnAStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("small", status(http.StatusRequestEntityTooLarge, "", 0))
		g := newGateway(t, config(), up)
		req := ask(route("small", "large"))
		req.Route.FallbackOn = []string{"413"}
		resp, err := g.Generate(t.Context(), req)
		require.NoError(t, err, "the route falls back on 413")
		assert.Equal(t, "large", resp.Model)
	})
}

// A Close whose ctx ran out leaves requests in flight; a second Close
// waits for them again.
func TestASecondCloseWaitsForWhatTheFirstLeft(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.AttemptTimeout = 10 * time.Second
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			time.Sleep(3 * time.Second)
			return answer("", "done"), nil
		}})
		start := time.Now()
		done := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); done <- err }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		require.Error(t, g.Close(ctx), "the first Close gives up after 1 s")
		assert.NoError(t, g.Close(t.Context()), "the second waits for the request in flight")
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.NoError(t, <-done)
	})
}

// slowProbe answers a probe after 500 ms (or when its context ends).
type slowProbe struct{ *upstream }

func (p slowProbe) Probe(ctx context.Context, _ string) error {
	select {
	case <-time.After(500 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A probe has AttemptTimeout (2 s), however short ProbeInterval is.
func TestAProbeSlowerThanItsIntervalStillRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.RecoveryTimeout = time.Hour
		cfg.Health.ProbeInterval = 250 * time.Millisecond
		up := slowProbe{newUpstream("up")}
		up.script("primary", status(http.StatusServiceUnavailable, "", 0))
		g := newGateway(t, cfg, up)
		for range 2 { // FailureThreshold 2
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(5 * time.Second)
		s, _ := g.TargetState(router.Target{Provider: "up", Model: "primary"})
		assert.Equal(t, breaker.Closed, s, "a 500 ms probe fits its 2 s AttemptTimeout and succeeds")
	})
}

// The request's deadline is the caller's when it is sooner than
// TotalTimeout: a Retry-After past it is not waited for.
func TestARetryAfterPastTheCallersDeadlineIsNotWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("primary", failsThen(1, status(http.StatusServiceUnavailable, "", 2*time.Second)))
		g := newGateway(t, config(), up) // TotalTimeout 30 s
		req := ask(route("primary", "secondary"))
		req.Route.WaitRetryAfter = 5 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		resp, err := g.Generate(ctx, req)
		require.NoError(t, err, "waiting 2 s would pass the caller's 1 s deadline: the secondary answers at once")
		assert.Equal(t, "secondary", resp.Model)
		assert.Equal(t, []string{"primary@0s", "secondary@0s"}, up.history())
	})
}

// Two failed, charged attempts before the answer: the caller is told both.
func TestTheAnswerAddsWhatEveryFailedAttemptWasCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		charged := func(u llm.Usage) func(context.Context) (llm.Completion, error) {
			return func(ctx context.Context) (llm.Completion, error) {
				c, err := status(http.StatusServiceUnavailable, "", 0)(ctx)
				c.Charged = &u
				return c, err
			}
		}
		up.script("a", charged(llm.Usage{PromptTokens: 10, TotalTokens: 10}))
		up.script("b", charged(llm.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}))
		up.script("c", func(context.Context) (llm.Completion, error) {
			u := chatapi.Usage{PromptTokens: 10, CompletionTokens: 20, TotalTokens: 30}
			return llm.Completion{Raw: chatapi.NewFrame("c").Completion("ok", nil, "stop", &u), Model: "c", Usage: &u}, nil
		})
		g := newGateway(t, config(), up)
		resp, err := g.Generate(t.Context(), ask(route("a", "b", "c")))
		require.NoError(t, err)
		assert.Equal(t, 3, resp.Attempts)
		assert.JSONEq(t, `{"prompt_tokens":30,"completion_tokens":25,"total_tokens":55}`, gjson.GetBytes(resp.Raw, "usage").Raw,
			"the answer's own usage plus both failed attempts' charges")
		assert.Equal(t, 30, resp.Usage.TotalTokens, "Response.Usage stays what the answering upstream reported")
	})
}

// passMeter is a Meter that lets every call through.
type passMeter struct{}

func (passMeter) Call(ctx context.Context, req llm.Request, emit func(llm.Chunk) error, call llm.Call) (llm.Completion, error) {
	return call(ctx, req, emit)
}

// meterSeen is a writer that records whether each call carried a Meter.
type meterSeen struct {
	*writer
	mu   sync.Mutex
	seen []bool
}

func (m *meterSeen) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	m.mu.Lock()
	m.seen = append(m.seen, req.Meter != nil)
	m.mu.Unlock()
	return m.writer.Stream(ctx, req, emit)
}

// A continuation is an upstream call of the request: it carries its Meter.
func TestAContinuationCarriesTheRequestsMeter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &meterSeen{writer: &writer{name: "primary", fault: cut, after: 10}}
		fallback := &meterSeen{writer: &writer{name: "fallback"}}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true), Meter: passMeter{}}
		require.True(t, g.Resolve("chat", &req))
		_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.NoError(t, err)
		assert.Equal(t, []bool{true}, primary.seen)
		assert.Equal(t, []bool{true}, fallback.seen, "the continuation is charged to the same request")
	})
}

// Response.Upstream counts every attempt's time inside a provider.
func TestUpstreamTimeCoversEveryAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (llm.Completion, error) {
			time.Sleep(100 * time.Millisecond)
			return llm.Completion{}, errUpstream
		}}
		beta := &fake{name: "beta", answer: func(context.Context, int) (llm.Completion, error) {
			time.Sleep(200 * time.Millisecond)
			return answer("", "ok"), nil
		}}
		g := newRouter(t, small(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Equal(t, 300*time.Millisecond, resp.Upstream, "100 ms at alpha and 200 ms at beta")
		assert.Zero(t, resp.Backoff, "the fail-over was immediate")
	})
}

// plan.next treats a half-open breaker whose one probe is already
// in flight as a target to fail over to (State() != Open), but pick's
// Allow refuses it, and pick wraps round to the target that just failed —
// at once, without the backoff or the Retry-After it asked for.
// Package doc: "the next target at once if this request has not tried it
// yet, else a full-jitter backoff"; architecture.md: "Retry-After honoured
// on the same target".
func TestAFailedTargetIsNotRetriedAtOnceWhenTheOtherIsBusyProbing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		probeGate := make(chan struct{})
		release := sync.OnceFunc(func() { close(probeGate) })
		defer release()
		bCalls := 0
		up.script("b", func(ctx context.Context) (llm.Completion, error) {
			bCalls++
			if bCalls <= 2 {
				return status(http.StatusServiceUnavailable, "", 0)(ctx)
			}
			<-probeGate // the half-open probe hangs until released
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
		cfg := config()
		cfg.Retry.AttemptTimeout = 20 * time.Second // FailureThreshold 2
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("b"))) // b fails twice: open
		require.Error(t, err)
		time.Sleep(cfg.Health.RecoveryTimeout)
		probe := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask(route("b"))); probe <- err }() // b's probe, in flight
		synctest.Wait()
		require.Equal(t, "half-open", targetState(g, "up", "b"))

		start := time.Now()
		resp, err := g.Generate(t.Context(), ask(route("a", "b")))
		require.NoError(t, err)
		assert.Equal(t, "a", resp.Model)
		assert.GreaterOrEqual(t, time.Since(start), 3*time.Second,
			"b cannot take the request (its probe is in flight), so a is the only way on: after its 3 s Retry-After, not at once")
		assert.Equal(t, 2, aCalls, "a twice: the 429, then the answer")
		assert.GreaterOrEqual(t, resp.Backoff, 3*time.Second, "the 3 s Retry-After was waited out")
		release()
		require.NoError(t, <-probe)
	})
}

// with every target refusing calls but one of them
// half-open with its probe in flight, ErrNoHealthyProvider says
// Retry-After 0 (health.openFor is 0 for any state but Open), though no
// probe is let through until that one reports or ProbeTimeout passes.
// Router doc: "The error is an llm.RetryAfterer: the time until the first
// of them lets a probe through."
func TestRetryAfterIsNotZeroWhileTheOnlyTargetsProbeIsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		probeGate := make(chan struct{})
		release := sync.OnceFunc(func() { close(probeGate) })
		defer release()
		calls := 0
		up.script("b", func(ctx context.Context) (llm.Completion, error) {
			calls++
			if calls <= 2 {
				return status(http.StatusServiceUnavailable, "", 0)(ctx)
			}
			<-probeGate
			return answer("b", "b ok"), nil
		})
		cfg := config()
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("b")))
		require.Error(t, err)
		time.Sleep(cfg.Health.RecoveryTimeout)
		probe := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask(route("b"))); probe <- err }()
		synctest.Wait()
		_, err = g.Generate(t.Context(), ask(route("b")))
		var ra llm.RetryAfterer
		require.ErrorAs(t, err, &ra)
		assert.Positive(t, ra.RetryAfter(), "no probe gets through now: Retry-After 0 invites a retry that is refused again")
		release()
		require.NoError(t, <-probe)
	})
}
