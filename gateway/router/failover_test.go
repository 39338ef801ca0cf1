// The router's fail-over and capacity tests beyond lab 08's exercise
// (path_test.go holds those): health per (provider, model), routes whose
// targets share a provider, Retry-After, fallback on a refusal, recovery,
// per-tenant caps, and a caller who leaves. They run in fake time
// (testing/synctest) against scripted providers.
package router_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// upstream is a scripted provider with several models. A model's script
// answers each call; a model without one answers "<model> ok" at once.
type upstream struct {
	name    string
	mu      sync.Mutex
	scripts map[string]func(ctx context.Context) (llm.Completion, error)
	calls   map[string]int
	log     []string // "model@elapsed" per call
	start   time.Time
}

func newUpstream(name string) *upstream {
	return &upstream{name: name, scripts: map[string]func(context.Context) (llm.Completion, error){}, calls: map[string]int{}, start: time.Now()}
}

func (u *upstream) Name() string         { return u.name }
func (u *upstream) DefaultModel() string { return "default" }

func (u *upstream) script(model string, f func(ctx context.Context) (llm.Completion, error)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.scripts[model] = f
}

func (u *upstream) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	u.mu.Lock()
	u.calls[req.Model]++
	u.log = append(u.log, fmt.Sprintf("%s@%s", req.Model, time.Since(u.start)))
	f := u.scripts[req.Model]
	u.mu.Unlock()
	if f == nil {
		return answer(req.Model, req.Model+" ok"), nil
	}
	return f(ctx)
}

func (u *upstream) count(model string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[model]
}

func (u *upstream) history() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.log...)
}

// status is an upstream's HTTP error with its OpenAI code.
func status(code int, errCode string, retryAfter time.Duration) func(context.Context) (llm.Completion, error) {
	return func(context.Context) (llm.Completion, error) {
		body := fmt.Sprintf(`{"error":{"message":"scripted","type":"x","code":%q}}`, errCode)
		return llm.Completion{}, chatapi.NewUpstreamError("up", code, []byte(body), retryAfter)
	}
}

func config() router.Config {
	return router.Config{
		Slots:  router.Slots{MaxConcurrent: 8, MaxQueueWait: time.Second},
		Retry:  router.Retry{MaxAttempts: 3, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 2 * time.Second, TotalTimeout: 30 * time.Second},
		Health: router.Health{FailureThreshold: 2, RecoveryTimeout: 10 * time.Second},
	}
}

func newGateway(t *testing.T, cfg router.Config, providers ...llm.Provider) *router.Router {
	t.Helper()
	g, err := router.New(cfg, providers...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		assert.NoError(t, g.Close(ctx))
	})
	return g
}

func route(targets ...string) []router.Target {
	out := make([]router.Target, len(targets))
	for i, t := range targets {
		out[i] = router.Target{Provider: "up", Model: t}
	}
	return out
}

func ask(r []router.Target) router.Request {
	return router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false), Route: &router.Route{Targets: r}}
}

func TestOneFailingModelDoesNotTakeDownItsProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("big", status(http.StatusServiceUnavailable, "overloaded", 0))
		g := newGateway(t, config(), up)
		for range 2 { // threshold 2: big's breaker opens
			_, err := g.Generate(t.Context(), ask(route("big")))
			require.Error(t, err)
		}
		require.Equal(t, "open", targetState(g, "up", "big"))
		resp, err := g.Generate(t.Context(), ask(route("small")))
		require.NoError(t, err, "small is healthy on the same provider: it must not answer no_healthy_provider")
		assert.Equal(t, "small", resp.Model)
		assert.Equal(t, "closed", targetState(g, "up", "small"))
		assert.Equal(t, "closed", state(g, "up"), "the provider's default model is its own target too")
	})
}

func TestRouteWhoseTargetsShareAProviderFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("big", status(http.StatusInternalServerError, "", 0))
		g := newGateway(t, config(), up)
		resp, err := g.Generate(t.Context(), ask(route("big", "small")))
		require.NoError(t, err)
		assert.Equal(t, "small", resp.Model, "the retry goes to the next target, not back to the first")
		assert.Equal(t, 1, up.count("big"), "one attempt at the failing model")
		assert.Equal(t, 1, up.count("small"), "and one at the fallback")
		assert.Equal(t, 2, resp.Attempts)
	})
}

func TestFailoverDoesNotWaitOutTheFailedTargetsRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("big", status(http.StatusTooManyRequests, "rate_limit_exceeded", 20*time.Second))
		g := newGateway(t, config(), up)
		start := time.Now()
		resp, err := g.Generate(t.Context(), ask(route("big", "small")))
		require.NoError(t, err)
		assert.Equal(t, "small", resp.Model)
		assert.Equal(t, time.Duration(0), time.Since(start), "another healthy target exists: fail over at once, not after big's 20 s Retry-After")
		assert.Zero(t, resp.Backoff)
	})
}

func TestSameTargetIsRetriedOnlyAfterItsRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		var n atomic.Int32
		up.script("only", func(ctx context.Context) (llm.Completion, error) {
			if n.Add(1) == 1 {
				return status(http.StatusTooManyRequests, "rate_limit_exceeded", 3*time.Second)(ctx)
			}
			return answer("only", "ok"), nil
		})
		g := newGateway(t, config(), up)
		start := time.Now()
		resp, err := g.Generate(t.Context(), ask(route("only")))
		require.NoError(t, err)
		assert.Equal(t, 3*time.Second, time.Since(start), "the only way on is the target that asked for 3 s: wait exactly that (the backoff cap is 100 ms)")
		assert.Equal(t, 3*time.Second, resp.Backoff)
		assert.Equal(t, 2, resp.Attempts)
	})
}

func TestContextLengthFallsBackOnlyWhereTheRouteSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("small-ctx", status(http.StatusBadRequest, "context_length_exceeded", 0))
		g := newGateway(t, config(), up)

		req := ask(route("small-ctx", "long-ctx"))
		req.Route.FallbackOn = []string{"context_length_exceeded"}
		resp, err := g.Generate(t.Context(), req)
		require.NoError(t, err, "a prompt too long for one model may fit the next")
		assert.Equal(t, "long-ctx", resp.Model)

		_, err = g.Generate(t.Context(), ask(route("small-ctx", "long-ctx")))
		var ue *chatapi.UpstreamError
		require.ErrorAs(t, err, &ue, "without fallback_on the refusal is the caller's answer")
		assert.Equal(t, "context_length_exceeded", ue.Code)
		assert.Equal(t, 1, up.count("long-ctx"), "and the next target was not tried")
	})
}

func TestOtherRefusalsDoNotFallBackOrRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("a", status(http.StatusBadRequest, "invalid_value", 0))
		g := newGateway(t, config(), up)
		req := ask(route("a", "b"))
		req.Route.FallbackOn = []string{"context_length_exceeded", "413"}
		resp, err := g.Generate(t.Context(), req)
		var ue *chatapi.UpstreamError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, 1, resp.Attempts, "a 400 the route does not fall back on fails the same everywhere")
		assert.Zero(t, up.count("b"))
	})
}

func TestRefusalsDoNotOpenTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("m", status(http.StatusBadRequest, "invalid_value", 0))
		g := newGateway(t, config(), up)
		for range 10 {
			_, err := g.Generate(t.Context(), ask(route("m")))
			require.Error(t, err)
		}
		assert.Equal(t, "closed", targetState(g, "up", "m"),
			"one client's bad requests prove the upstream is up; they must not open its breaker for everyone")
	})
}

func TestEveryBreakerOpenAnswersAtOnceWithRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("a", status(http.StatusServiceUnavailable, "", 0))
		up.script("b", status(http.StatusServiceUnavailable, "", 0))
		cfg := config()
		cfg.Health.FailureThreshold = 1
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("a", "b"))) // both open
		require.Error(t, err)
		time.Sleep(4 * time.Second)
		before := up.count("a") + up.count("b")
		start := time.Now()
		resp, err := g.Generate(t.Context(), ask(route("a", "b")))
		require.ErrorIs(t, err, router.ErrNoHealthyProvider)
		assert.Zero(t, time.Since(start), "nothing to try: answer now, no backoff and no retry")
		assert.Equal(t, before, up.count("a")+up.count("b"), "no upstream call")
		assert.Equal(t, 1, resp.Attempts, "one pick that found every breaker open")
		var ra llm.RetryAfterer
		require.ErrorAs(t, err, &ra)
		assert.InDelta(t, float64(6*time.Second), float64(ra.RetryAfter()), float64(time.Second),
			"Retry-After is when the first breaker lets a probe through")
	})
}

func TestTrafficReturnsToThePrimaryWithinARecoveryTimeoutOfTheOutagesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		var down atomic.Bool
		down.Store(true)
		up.script("primary", func(ctx context.Context) (llm.Completion, error) {
			if down.Load() {
				return status(http.StatusServiceUnavailable, "", 0)(ctx)
			}
			return answer("primary", "ok"), nil
		})
		g := newGateway(t, config(), up)
		served := func() string {
			resp, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
			return resp.Model
		}
		// Steady traffic, one request a second. The outage ends at 29.5 s,
		// just after a probe failed (breaker opened at 0 s, probes at 10 s,
		// 20 s, 30 s...).
		defer time.AfterFunc(29500*time.Millisecond, func() { down.Store(false) }).Stop()
		var back time.Duration
		for i := range 60 {
			if served() == "primary" {
				back = time.Duration(i) * time.Second
				break
			}
			time.Sleep(time.Second)
		}
		require.NotZero(t, back, "traffic never came back to the primary")
		assert.LessOrEqual(t, back-29500*time.Millisecond, config().Health.RecoveryTimeout+time.Second,
			"back within one recovery timeout (plus the one-second request spacing) of the outage's end")
	})
}

func TestCallerWhoLeavesStopsTheUpstreamCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		stopped := make(chan time.Duration, 1)
		start := time.Now()
		up.script("slow", func(ctx context.Context) (llm.Completion, error) {
			<-ctx.Done()
			stopped <- time.Since(start)
			return llm.Completion{}, ctx.Err()
		})
		g := newGateway(t, config(), up)
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
		_, err := g.Generate(ctx, ask(route("slow")))
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 100*time.Millisecond, <-stopped,
			"the upstream call is told to stop when its caller leaves, not at the 2 s attempt timeout")
	})
}

// streamer streams words, the first after first, the rest gap apart.
type streamer struct {
	name       string
	first, gap time.Duration
	words      []string
}

func (s streamer) Name() string         { return s.name }
func (s streamer) HonoursContext() bool { return true } // so it streams on the request's goroutine
func (s streamer) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (s streamer) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	wait := s.first
	for _, w := range s.words {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return llm.Completion{}, ctx.Err()
		}
		if err := emit(chunk(w)); err != nil {
			return llm.Completion{}, err
		}
		wait = s.gap
	}
	return llm.Completion{Model: s.name}, nil
}

func TestAChunkThatWasSentIsNeverCutForBeingLate(t *testing.T) {
	limits := router.StreamLimits{FirstToken: time.Second, Idle: time.Second}
	for i := range 200 {
		synctest.Test(t, func(t *testing.T) {
			// Every chunk lands exactly on its watchdog deadline: the chunk
			// and the timer race, and either may win. If the timer wins the
			// chunk is never sent; if the chunk wins the watchdog starts
			// over. What must never happen is a chunk sent and then the
			// stream cut in the same instant, for silence that did not happen.
			p := streamer{name: "edge", first: time.Second, gap: time.Second, words: []string{"a", "b", "c"}}
			cfg := config()
			cfg.Retry.MaxAttempts = 1
			g := newGateway(t, cfg, p)
			var lastSent time.Time
			_, err := g.Stream(t.Context(), router.Request{Tenant: "t", Chat: chatapi.NewRequest("hi", false)}, limits, func(llm.Chunk) error {
				lastSent = time.Now()
				return nil
			})
			if errors.Is(err, router.ErrStreamIdle) {
				assert.Equal(t, limits.Idle, time.Since(lastSent),
					"run %d: the stream was cut as idle %s after a chunk went out; the idle limit is %s", i, time.Since(lastSent), limits.Idle)
			}
		})
	}
}

func TestStreamFallsBackBeforeTheFirstChunkOnASharedProviderRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("big", status(http.StatusServiceUnavailable, "", 0))
		g := newGateway(t, config(), up)
		var got []string
		resp, err := g.Stream(t.Context(), ask(route("big", "small")), router.StreamLimits{FirstToken: time.Second, Idle: time.Second},
			func(c llm.Chunk) error { got = append(got, content(t, c)); return nil })
		require.NoError(t, err)
		assert.Equal(t, "small", resp.Model)
		assert.Equal(t, []string{"small ok"}, got)
		assert.Equal(t, []string{"big@0s", "small@0s"}, up.history(), "streams fail over exactly like Generate: the next target, at once")
	})
}

// panicky panics on every call, streamed or not, after sending one chunk
// when streaming.
type panicky struct{}

func (panicky) Name() string         { return "panicky" }
func (panicky) HonoursContext() bool { return true } // so it streams on the request's goroutine
func (panicky) Generate(context.Context, llm.Request) (llm.Completion, error) {
	panic("provider bug")
}
func (panicky) Stream(_ context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	_ = emit(chunk("half"))
	panic("provider bug mid-stream")
}

func TestAProviderPanicIsAnErrorAndOpensNoBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.FailureThreshold = 1
		g := newGateway(t, cfg, panicky{})
		for range 3 {
			_, err := g.Generate(t.Context(), router.Request{Tenant: "attacker", Chat: chatapi.NewRequest("crafted", false)})
			require.Error(t, err, "a panic becomes an error")
		}
		var got []string
		_, err := g.Stream(t.Context(), router.Request{Tenant: "attacker", Chat: chatapi.NewRequest("crafted", false)}, router.StreamLimits{FirstToken: time.Second, Idle: time.Second},
			func(c llm.Chunk) error { got = append(got, content(t, c)); return nil })
		require.Error(t, err, "a panic while streaming is an error too, not a crashed handler")
		assert.ErrorIs(t, err, router.ErrAfterFirstByte, "and the chunk it sent first still counts: no fall-back after it")
		assert.Equal(t, []string{"half"}, got)
		assert.Equal(t, "closed", state(g, "panicky"),
			"one caller's crafted input that crashes a provider must not open its breaker for every tenant")
	})
}

// deaf ignores its context and answers only when its gate opens.
type deaf struct{ gate chan struct{} }

func (deaf) Name() string { return "deaf" }
func (d deaf) Generate(context.Context, llm.Request) (llm.Completion, error) {
	<-d.gate
	return answer("deaf-1", "late"), nil
}

// honours answers at once and promises to return when its context ends.
type honours struct{}

func (honours) Name() string         { return "honours" }
func (honours) HonoursContext() bool { return true }
func (honours) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return answer("honours-1", "now"), nil
}

func TestAProviderThatHonoursItsContextNeedsNoBridgePermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := deaf{gate: make(chan struct{})}
		cfg := config()
		cfg.MaxProviderCalls, cfg.Retry.AttemptTimeout = 1, time.Second
		cfg.Retry.MaxAttempts = 1
		g := newGateway(t, cfg, d, honours{})
		time.AfterFunc(time.Minute, func() { close(d.gate) })
		_, err := g.Generate(t.Context(), router.Request{Tenant: "t", Provider: "deaf", Chat: chatapi.NewRequest("hi", false)})
		require.ErrorIs(t, err, context.DeadlineExceeded, "the deaf call is abandoned at its attempt timeout, keeping the bridge's only permit")
		start := time.Now()
		resp, err := g.Generate(t.Context(), router.Request{Tenant: "t", Provider: "honours", Chat: chatapi.NewRequest("hi", false)})
		require.NoError(t, err, "a provider that honours its context is called on the request's goroutine: no permit needed")
		assert.Equal(t, "now", text(t, resp))
		assert.Zero(t, time.Since(start), "at once, not after the deaf call gives its permit back")
	})
}

// refusing refuses every call before sending it, as a middleware would
// for a tenant out of tokens.
type refusing struct{ calls atomic.Int32 }

func (*refusing) Name() string { return "refusing" }
func (r *refusing) Generate(context.Context, llm.Request) (llm.Completion, error) {
	r.calls.Add(1)
	return llm.Completion{}, fmt.Errorf("out of tokens: %w", llm.ErrNotSent)
}

func TestACallRefusedBeforeItWasSentEndsTheRequestAndCountsForNoBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.FailureThreshold = 1
		r := &refusing{}
		other := newUpstream("other")
		g := newGateway(t, cfg, r, other)
		resp, err := g.Generate(t.Context(), router.Request{Tenant: "t", Chat: chatapi.NewRequest("hi", false)})
		require.ErrorIs(t, err, llm.ErrNotSent, "the refusal comes back as it was")
		assert.Equal(t, 1, resp.Attempts, "no retry")
		assert.Equal(t, int32(1), r.calls.Load())
		assert.Zero(t, other.count("default"), "and no other target: the request was refused, not the upstream")
		assert.Equal(t, "closed", state(g, "refusing"), "no breaker counts a call that was never sent")
	})
}
