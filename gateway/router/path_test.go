package router_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
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

// These are lab 08's exercise tests, run against the router: the product
// keeps every promise the capstone makes. Every test runs in a synctest bubble with scripted providers: latencies
// are fake time, gates are channels, and a gateway is always closed (which
// waits for every provider call) before the bubble ends.

// fake is a scripted provider.
type fake struct {
	name  string
	calls atomic.Int32
	// answer is called for each request; nil means answer "<name> says hi" at once.
	answer func(ctx context.Context, call int) (llm.Completion, error)
}

func (f *fake) Name() string { return f.name }

func (f *fake) Generate(ctx context.Context, _ llm.Request) (llm.Completion, error) {
	n := int(f.calls.Add(1))
	if f.answer == nil {
		return answer(f.name+"-model", f.name+" says hi"), nil
	}
	return f.answer(ctx, n)
}

var errUpstream = errors.New("upstream 503")

func failing(name string) *fake {
	return &fake{name: name, answer: func(context.Context, int) (llm.Completion, error) { return llm.Completion{}, errUpstream }}
}

func healthy(name string) *fake { return &fake{name: name} }

// hanging ignores its context and returns only when the gate opens.
func hanging(name string, gate <-chan struct{}) *fake {
	return &fake{name: name, answer: func(context.Context, int) (llm.Completion, error) {
		<-gate
		return answer("", "too late"), nil
	}}
}

// recorder is an Observer that keeps what it is told.
type recorder struct {
	mu         sync.Mutex
	queueWaits []time.Duration
	rejected   []string
	attempts   []string
	breakers   []string
	late       int
}

func (r *recorder) Admitted(_ string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.queueWaits = append(r.queueWaits, d)
}

func (r *recorder) Rejected(_ string, reason router.RejectReason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected = append(r.rejected, string(reason))
}

func (r *recorder) Attempt(target router.Target, attempt int, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, fmt.Sprintf("%s#%d:%v", target.Provider, attempt, err == nil))
}

func (r *recorder) BreakerChanged(target router.Target, from, to breaker.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.breakers = append(r.breakers, target.Provider+":"+from.String()+"→"+to.String())
}

func (r *recorder) Late(time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.late++
}

func (r *recorder) RetryRefused(string)                             {}
func (r *recorder) Continued(router.Target, router.ContinueOutcome) {}
func (r *recorder) Probed(router.Target, error)                     {}

// answer is a whole answer in the wire format, as an upstream sends it.
func answer(model, text string) llm.Completion {
	return llm.Completion{Raw: chatapi.NewFrame(model).Completion(text, nil, "stop", nil), Model: model}
}

// text is the answer's text, read back from its wire format.
func text(t *testing.T, resp router.Response) string {
	t.Helper()
	a, ok, err := chatapi.ReadAnswer("test", resp.Raw)
	require.True(t, ok, "the answer is a JSON object: %q", resp.Raw)
	require.NoError(t, err)
	return a.Text
}

// refusal is an upstream's 4xx: the request's own fault, never retried.
func refusal(code string) error {
	return chatapi.NewUpstreamError("up", 400, []byte(`{"error":{"message":"refused","type":"invalid_request_error","code":"`+code+`"}}`), 0)
}

func pin(provider string) router.Request {
	r := request("acme")
	r.Provider = provider
	return r
}

// state is the breaker state of provider's default target, as a string.
func state(g *router.Router, provider string) string { return targetState(g, provider, "") }

// targetState is the breaker state of one (provider, model) target.
func targetState(g *router.Router, provider, model string) string {
	s, ok := g.TargetState(router.Target{Provider: provider, Model: model})
	if !ok {
		return "unknown provider"
	}
	return s.String()
}

// small is a small, fast gateway: generous quotas unless a test narrows them.
func small(obs router.Observer) router.Config {
	return router.Config{
		Slots:  router.Slots{MaxConcurrent: 4, MaxQueueWait: 5 * time.Second},
		Retry:  router.Retry{MaxAttempts: 3, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 2 * time.Second, TotalTimeout: 10 * time.Second},
		Health: router.Health{FailureThreshold: 3, RecoveryTimeout: 30 * time.Second},

		Observer: obs,
	}
}

func newRouter(t *testing.T, cfg router.Config, providers ...llm.Provider) *router.Router {
	t.Helper()
	g, err := router.New(cfg, providers...)
	require.NoError(t, err)
	require.NotNil(t, g, "New returned nil")
	return g
}

// closeGateway shuts the gateway down, waiting for every provider call.
func closeGateway(t *testing.T, g *router.Router) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	assert.NoError(t, g.Close(ctx))
}

func request(tenant string) router.Request {
	return router.Request{Tenant: tenant, Chat: chatapi.NewRequest("hello", false)}
}

func TestGenerateReturnsTheProvidersAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRouter(t, small(nil), healthy("alpha"), healthy("beta"))
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Equal(t, "alpha", resp.Provider, "the first provider in priority order answers")
		assert.Equal(t, "alpha says hi", text(t, resp))
		assert.Equal(t, "alpha-model", resp.Model)
		assert.Equal(t, 1, resp.Attempts)
	})
}

func TestOverloadedWhenNoSlotWithinQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := small(rec)
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, 2*time.Second
		gate := make(chan struct{})
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) { <-gate; return llm.Completion{}, nil }})
		defer closeGateway(t, g)
		done := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); done <- err }()
		synctest.Wait()
		start := time.Now()
		_, err := g.Generate(t.Context(), request("b"))
		assert.ErrorIs(t, err, router.ErrOverloaded)
		assert.Equal(t, 2*time.Second, time.Since(start), "the wait for a slot is bounded by MaxQueueWait")
		close(gate)
		<-done
		assert.Contains(t, rec.rejected, "overloaded", "rejections are observed by reason")
	})
}

// The source material's hands-on task: queue wait is its own number, and it
// is reported even when the provider answers at once.
func TestQueueWaitIsReportedSeparatelyFromLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := small(rec)
		cfg.Slots.MaxConcurrent = 1
		gate := make(chan struct{})
		first := true
		var mu sync.Mutex
		p := &fake{name: "instant", answer: func(context.Context, int) (llm.Completion, error) {
			mu.Lock()
			wait := first
			first = false
			mu.Unlock()
			if wait {
				<-gate // the first request holds the slot for 1.5 s
			}
			return answer("", "now"), nil
		}}
		g := newRouter(t, cfg, p)
		defer closeGateway(t, g)
		go func() { _, _ = g.Generate(t.Context(), request("a")) }()
		synctest.Wait()
		defer time.AfterFunc(1500*time.Millisecond, func() { close(gate) }).Stop()
		resp, err := g.Generate(t.Context(), request("b"))
		require.NoError(t, err)
		assert.Equal(t, 1500*time.Millisecond, resp.QueueWait, "the second request waited 1.5 s for a slot")
		assert.Zero(t, resp.Latency, "the provider answered at once: the wait must not be folded into Latency")
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Contains(t, rec.queueWaits, 1500*time.Millisecond, "the observer hears the queue wait (the queue-wait histogram)")
	})
}

func TestPinnedProviderGetsOneAttemptAndNoFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alpha, beta := failing("alpha"), healthy("beta")
		g := newRouter(t, small(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), pin("alpha"))
		assert.ErrorIs(t, err, errUpstream, "the pinned provider's own error comes back")
		assert.Equal(t, int32(1), alpha.calls.Load(), "a pinned provider gets exactly one attempt")
		assert.Zero(t, beta.calls.Load(), "and no silent fallback to a provider the caller did not ask for")
		assert.Equal(t, 1, resp.Attempts)
	})
}

func TestUnknownPinnedProviderIsRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRouter(t, small(nil), healthy("alpha"))
		defer closeGateway(t, g)
		_, err := g.Generate(t.Context(), pin("gamma"))
		assert.ErrorIs(t, err, router.ErrUnknownProvider)
		_, err = g.Generate(t.Context(), router.Request{Tenant: "acme"})
		assert.ErrorIs(t, err, router.ErrInvalidRequest, "a request without a prompt is malformed")
	})
}

func TestFallsBackToTheNextProviderOnFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alpha, beta := failing("alpha"), healthy("beta")
		g := newRouter(t, small(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Equal(t, "beta", resp.Provider, "after alpha fails, the retry goes to the next healthy provider")
		assert.Equal(t, 2, resp.Attempts)
		assert.Equal(t, int32(1), alpha.calls.Load())
	})
}

func TestOpenBreakerIsNotTried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		alpha, beta := failing("alpha"), healthy("beta")
		g := newRouter(t, small(rec), alpha, beta)
		defer closeGateway(t, g)
		for range 3 { // alpha fails once per request; threshold 3
			_, err := g.Generate(t.Context(), request("acme"))
			require.NoError(t, err)
		}
		require.Equal(t, "open", state(g, "alpha"))
		before := alpha.calls.Load()
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Equal(t, before, alpha.calls.Load(), "an open breaker's provider must not be called")
		assert.Equal(t, 1, resp.Attempts, "traffic goes straight to the healthy provider")
		assert.Contains(t, rec.breakers, "alpha:closed→open", "breaker transitions are observed")
	})
}

func TestTrafficComesBackAfterRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var down atomic.Bool
		down.Store(true)
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (llm.Completion, error) {
			if down.Load() {
				return llm.Completion{}, errUpstream
			}
			return answer("", "alpha is back"), nil
		}}
		g := newRouter(t, small(nil), alpha, healthy("beta"))
		defer closeGateway(t, g)
		for range 3 {
			_, _ = g.Generate(t.Context(), request("acme"))
		}
		require.Equal(t, "open", state(g, "alpha"))
		down.Store(false)
		time.Sleep(30 * time.Second) // RecoveryTimeout
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Equal(t, "alpha", resp.Provider, "after the recovery timeout one probe goes to alpha, and it succeeds")
		assert.Equal(t, "closed", state(g, "alpha"))
	})
}

func TestDeadlineSpansAllAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.MaxAttempts, cfg.Retry.AttemptTimeout, cfg.Retry.TotalTimeout = 10, 3*time.Second, 5*time.Second
		cfg.Retry.BaseBackoff, cfg.Retry.MaxBackoff = 0, 0
		stuck := func(name string) *fake {
			return &fake{name: name, answer: func(ctx context.Context, _ int) (llm.Completion, error) {
				<-ctx.Done()
				return llm.Completion{}, ctx.Err()
			}}
		}
		g := newRouter(t, cfg, stuck("alpha"), stuck("beta"))
		defer closeGateway(t, g)
		start := time.Now()
		resp, err := g.Generate(t.Context(), request("acme"))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start), "TotalTimeout bounds the whole request: attempts of 3 s each stop at 5 s, not 30 s")
		assert.Equal(t, 2, resp.Attempts)
	})
}

func TestUpstreamRefusalIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := refusal("context_length_exceeded")
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (llm.Completion, error) { return llm.Completion{}, bad }}
		beta := healthy("beta")
		g := newRouter(t, small(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), request("acme"))
		assert.ErrorIs(t, err, bad, "the provider's reason is passed on")
		assert.Equal(t, 1, resp.Attempts)
		assert.Zero(t, beta.calls.Load(), "the same prompt would fail everywhere: no retry, no fallback")
	})
}

func TestSlotIsReleasedWhateverHappens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, 0
		cfg.Health.FailureThreshold = 100 // keep the breaker out of this test
		var mode atomic.Int32
		p := &fake{name: "flaky", answer: func(ctx context.Context, _ int) (llm.Completion, error) {
			switch mode.Load() {
			case 0:
				return llm.Completion{}, refusal("invalid_value")
			case 1:
				panic("provider bug")
			case 2:
				<-ctx.Done()
				return llm.Completion{}, ctx.Err()
			}
			return answer("", "fine"), nil
		}}
		g := newRouter(t, cfg, p)
		defer closeGateway(t, g)

		_, err := g.Generate(t.Context(), request("a")) // an error
		require.Error(t, err)
		mode.Store(1)
		err = func() (err error) { // a panic inside the provider
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("the provider's panic reached the caller: %v", p)
				}
			}()
			_, err = g.Generate(t.Context(), request("a"))
			return err
		}()
		require.Error(t, err)
		require.NotContains(t, err.Error(), "reached the caller", "a provider panic becomes an error; it must not crash the request")
		mode.Store(2)
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(500*time.Millisecond, cancel).Stop()
		_, err = g.Generate(ctx, request("a")) // the caller cancels mid-attempt
		require.ErrorIs(t, err, context.Canceled)

		assert.Equal(t, 0, g.InFlight(), "every path gives the slot back")
		mode.Store(3)
		resp, err := g.Generate(t.Context(), request("a"))
		require.NoError(t, err, "with MaxConcurrent 1 and no queue wait, a leaked slot would refuse this request")
		assert.Equal(t, "fine", text(t, resp))
	})
}

func TestProviderIgnoringItsContextDoesNotHoldTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := small(rec)
		cfg.Retry.AttemptTimeout, cfg.Retry.TotalTimeout = time.Second, 10*time.Second
		gate := make(chan struct{})
		release := sync.OnceFunc(func() { close(gate) })
		// The deaf provider answers after a minute in any case, so an
		// implementation that waits for it fails the assertion below
		// instead of hanging the test.
		defer time.AfterFunc(time.Minute, release).Stop()
		g := newRouter(t, cfg, hanging("deaf", gate), healthy("beta"))
		start := time.Now()
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Equal(t, "beta", resp.Provider)
		assert.Equal(t, time.Second, time.Since(start), "the attempt ends at its 1 s timeout even though the provider ignores its context")
		release()
		closeGateway(t, g)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, 1, rec.late, "the abandoned call's outcome is observed when it finally returns")
	})
}

// topOfRange is a jitter source pinned to the top of its range, so a
// backoff takes (almost exactly) its cap.
type topOfRange struct{}

func (topOfRange) Uint64() uint64 { return math.MaxUint64 }

func TestCallerCancellationStopsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.BaseBackoff, cfg.Retry.MaxBackoff = 5*time.Second, 5*time.Second
		cfg.Rand = rand.New(topOfRange{}) // the backoff is ~5 s: the cancel at 100 ms lands inside it
		alpha := failing("alpha")
		g := newRouter(t, cfg, alpha)
		defer closeGateway(t, g)
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
		start := time.Now()
		_, err := g.Generate(ctx, request("acme"))
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "a caller who left stops the backoff at once")
		assert.Equal(t, int32(1), alpha.calls.Load())
	})
}

func TestCloseRejectsNewRequestsAndWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			time.Sleep(3 * time.Second)
			return answer("", "finished"), nil
		}}
		cfg := small(nil)
		cfg.Retry.AttemptTimeout, cfg.Retry.TotalTimeout = 10*time.Second, 20*time.Second
		g := newRouter(t, cfg, p)
		start := time.Now()
		inflight := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); inflight <- err }()
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- g.Close(t.Context()) }()
		synctest.Wait()
		_, err := g.Generate(t.Context(), request("b"))
		assert.ErrorIs(t, err, router.ErrClosed, "a request after Close is refused")
		assert.NoError(t, <-inflight, "the in-flight request finishes")
		assert.NoError(t, <-closed)
		assert.Equal(t, 3*time.Second, time.Since(start), "Close returns when the last request does")
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := small(nil)
	for _, c := range []struct {
		name      string
		mutate    func(*router.Config)
		providers []llm.Provider
	}{
		{"no providers", func(*router.Config) {}, nil},
		{"duplicate names", func(*router.Config) {}, []llm.Provider{healthy("a"), healthy("a")}},
		{"no attempts", func(c *router.Config) { c.Retry.MaxAttempts = 0 }, []llm.Provider{healthy("a")}},
		{"no total timeout", func(c *router.Config) { c.Retry.TotalTimeout = 0 }, []llm.Provider{healthy("a")}},
		{"no concurrency", func(c *router.Config) { c.Slots.MaxConcurrent = 0 }, []llm.Provider{healthy("a")}},
		{"no failure threshold", func(c *router.Config) { c.Health.FailureThreshold = 0 }, []llm.Provider{healthy("a")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.mutate(&cfg)
			g, err := router.New(cfg, c.providers...)
			assert.ErrorIs(t, err, router.ErrInvalidConfig)
			assert.Nil(t, g)
		})
	}
}

func TestCallersDeadlineEndsTheRequestAtThatDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck := &fake{name: "stuck", answer: func(ctx context.Context, _ int) (llm.Completion, error) {
			<-ctx.Done()
			return llm.Completion{}, ctx.Err()
		}}
		g := newRouter(t, small(nil), stuck)
		defer closeGateway(t, g)
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := g.Generate(ctx, request("acme"))
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's own deadline ran out")
		assert.NotErrorIs(t, err, context.Canceled, "a deadline is not a cancellation: the caller did not leave")
		assert.Equal(t, 700*time.Millisecond, time.Since(start), "the caller's deadline bounds the request, before AttemptTimeout and TotalTimeout")
	})
}

func TestQueuedRequestsAreRefusedWhenTheGatewayCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, time.Minute
		gate := make(chan struct{})
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			<-gate
			return answer("", "done"), nil
		}})
		running := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); running <- err }()
		synctest.Wait()
		queued := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("b")); queued <- err }()
		synctest.Wait() // b waits for the only slot
		closed := make(chan error, 1)
		go func() { closed <- g.Close(t.Context()) }()
		start := time.Now()
		err := <-queued
		assert.ErrorIs(t, err, router.ErrClosed, "a request still queued when Close starts is refused, not admitted later")
		assert.Zero(t, time.Since(start), "at once, not after the minute of MaxQueueWait")
		close(gate)
		assert.NoError(t, <-running, "the request already running finishes")
		assert.NoError(t, <-closed)
	})
}

func TestCloseWaitsForAbandonedProviderCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := small(rec)
		cfg.Retry.AttemptTimeout = time.Second
		gate := make(chan struct{})
		defer time.AfterFunc(5*time.Second, func() { close(gate) }).Stop()
		g := newRouter(t, cfg, hanging("deaf", gate), healthy("beta"))
		_, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err, "beta answers after deaf's attempt times out")
		start := time.Now()
		require.NoError(t, g.Close(t.Context()))
		assert.Equal(t, 4*time.Second, time.Since(start), "Close returns only when the abandoned call does (at 5 s), so nothing outlives the gateway")
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, 1, rec.late, "and its late outcome was observed before Close returned")
	})
}

func TestCloseTwiceIsSafe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newRouter(t, small(nil), healthy("alpha"))
		require.NoError(t, g.Close(t.Context()))
		var err error
		require.NotPanics(t, func() { err = g.Close(t.Context()) }, "Close is safe to call twice (deferred and explicit both run in real code)")
		assert.NoError(t, err, "a second Close has nothing left to wait for")
		_, err = g.Generate(t.Context(), request("acme"))
		assert.ErrorIs(t, err, router.ErrClosed)
	})
}

func TestRejectionsAreObservedByReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := small(rec)
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, time.Second
		gate := make(chan struct{})
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) { <-gate; return llm.Completion{}, nil }})
		go func() { _, _ = g.Generate(t.Context(), request("a")) }()
		synctest.Wait()
		_, _ = g.Generate(t.Context(), request("b")) // the only slot is taken for a second
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
		_, _ = g.Generate(ctx, request("c")) // c leaves while queued
		close(gate)
		closeGateway(t, g)
		_, _ = g.Generate(t.Context(), request("d"))
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, []string{"overloaded", "cancelled", "closed"}, rec.rejected,
			"each refusal is observed once, with its own reason")
	})
}

func TestEveryAttemptIsObservedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newRouter(t, small(rec), failing("alpha"), failing("beta"), healthy("gamma"))
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Equal(t, "gamma", resp.Provider)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, []string{"alpha#1:false", "beta#2:false", "gamma#3:true"}, rec.attempts,
			"every attempt is observed, in order, numbered from 1, with its provider and outcome")
	})
}

func TestBreakerRoundTripIsObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		var down atomic.Bool
		down.Store(true)
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (llm.Completion, error) {
			if down.Load() {
				return llm.Completion{}, errUpstream
			}
			return answer("", "back"), nil
		}}
		g := newRouter(t, small(rec), alpha, healthy("beta"))
		defer closeGateway(t, g)
		for range 3 {
			_, _ = g.Generate(t.Context(), request("acme"))
		}
		down.Store(false)
		time.Sleep(30 * time.Second)
		_, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, []string{"alpha:closed→open", "alpha:open→half-open", "alpha:half-open→closed"}, rec.breakers,
			"the dashboard sees the whole round trip, once each")
	})
}

func TestUpstreamRefusalIsRecognisedThroughWrapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := refusal("invalid_value")
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (llm.Completion, error) {
			return llm.Completion{}, fmt.Errorf("alpha: %w", bad)
		}}
		beta := healthy("beta")
		g := newRouter(t, small(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), request("acme"))
		assert.ErrorIs(t, err, bad)
		assert.Equal(t, 1, resp.Attempts, "a provider may wrap an upstream refusal; it is still the request's fault")
		assert.Zero(t, beta.calls.Load())
	})
}

func TestAttemptsStopAtMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.MaxAttempts = 2
		alpha, beta, gamma := failing("alpha"), failing("beta"), healthy("gamma")
		g := newRouter(t, cfg, alpha, beta, gamma)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), request("acme"))
		assert.ErrorIs(t, err, errUpstream, "the last attempt's error comes back")
		assert.Equal(t, 2, resp.Attempts)
		assert.Zero(t, gamma.calls.Load(), "MaxAttempts counts every attempt, the first included: gamma's turn never comes")
	})
}

func TestLatencyCoversEveryAttemptAndBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alpha := &fake{name: "alpha", answer: func(_ context.Context, call int) (llm.Completion, error) {
			if call == 1 {
				time.Sleep(100 * time.Millisecond)
				return llm.Completion{}, errUpstream
			}
			time.Sleep(200 * time.Millisecond)
			return answer("", "second time lucky"), nil
		}}
		cfg := small(nil)
		cfg.Retry.BaseBackoff, cfg.Retry.MaxBackoff = time.Second, time.Second
		cfg.Rand = rand.New(topOfRange{})
		g := newRouter(t, cfg, alpha)
		defer closeGateway(t, g)
		start := time.Now()
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Zero(t, resp.QueueWait)
		assert.Equal(t, time.Since(start), resp.Latency, "Latency is admission to answer: both attempts and the backoff between them")
		assert.Greater(t, resp.Latency, 1200*time.Millisecond, "the backoff of about 1 s is in it")
	})
}

func TestNoHealthyProviderCallsNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Health.FailureThreshold = 1
		alpha, beta := failing("alpha"), failing("beta")
		g := newRouter(t, cfg, alpha, beta)
		defer closeGateway(t, g)
		_, _ = g.Generate(t.Context(), request("acme")) // each fails once: both open
		require.Equal(t, "open", state(g, "alpha"))
		require.Equal(t, "open", state(g, "beta"))
		before := alpha.calls.Load() + beta.calls.Load()
		_, err := g.Generate(t.Context(), request("acme"))
		assert.ErrorIs(t, err, router.ErrNoHealthyProvider)
		assert.Equal(t, before, alpha.calls.Load()+beta.calls.Load(), "no provider is called while every breaker is open")
		_, err = g.Generate(t.Context(), pin("alpha"))
		assert.ErrorIs(t, err, router.ErrNoHealthyProvider, "a pinned provider whose breaker is open fails fast too")
		assert.Equal(t, before, alpha.calls.Load()+beta.calls.Load())
	})
}

// chunk is one streamed piece of text in the wire format.
func chunk(text string) llm.Chunk {
	return llm.Chunk{Raw: chatapi.NewFrame("m").Chunk(chatapi.Delta{Content: &text}, "")}
}

// content is a chunk's text, read back from its wire format.
func content(t *testing.T, c llm.Chunk) string {
	t.Helper()
	a, ok, err := chatapi.ReadAnswer("test", c.Raw)
	require.True(t, ok, "the chunk is a JSON object: %q", c.Raw)
	require.NoError(t, err)
	return a.Text
}
