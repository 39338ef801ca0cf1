package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every test runs in a synctest bubble with scripted providers: latencies
// are fake time, gates are channels, and a gateway is always closed (which
// waits for every provider call) before the bubble ends.

// fake is a scripted provider.
type fake struct {
	name  string
	calls atomic.Int32
	// answer is called for each request; nil means answer "<name> says hi" at once.
	answer func(ctx context.Context, call int) (Completion, error)
}

func (f *fake) Name() string { return f.name }

func (f *fake) Generate(ctx context.Context, _ Request) (Completion, error) {
	n := int(f.calls.Add(1))
	if f.answer == nil {
		return Completion{Text: f.name + " says hi", Model: f.name + "-model"}, nil
	}
	return f.answer(ctx, n)
}

var errUpstream = errors.New("upstream 503")

func failing(name string) *fake {
	return &fake{name: name, answer: func(context.Context, int) (Completion, error) { return Completion{}, errUpstream }}
}

func healthy(name string) *fake { return &fake{name: name} }

// hanging ignores its context and returns only when the gate opens.
func hanging(name string, gate <-chan struct{}) *fake {
	return &fake{name: name, answer: func(context.Context, int) (Completion, error) {
		<-gate
		return Completion{Text: "too late"}, nil
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

func (r *recorder) Rejected(_, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected = append(r.rejected, reason)
}

func (r *recorder) Attempt(provider string, attempt int, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts = append(r.attempts, fmt.Sprintf("%s#%d:%v", provider, attempt, err == nil))
}

func (r *recorder) BreakerChanged(provider, from, to string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.breakers = append(r.breakers, provider+":"+from+"→"+to)
}

func (r *recorder) Late(time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.late++
}

// config is a small, fast gateway: generous quotas unless a test narrows them.
func config(obs Observer) Config {
	return Config{
		RatePerSecond: 1000, Burst: 1000, MaxConcurrent: 4, MaxQueueWait: 5 * time.Second,
		MaxAttempts: 3, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second,
		AttemptTimeout: 2 * time.Second, TotalTimeout: 10 * time.Second,
		FailureThreshold: 3, RecoveryTimeout: 30 * time.Second,
		Observer: obs,
	}
}

func newGateway(t *testing.T, cfg Config, providers ...Provider) *Gateway {
	t.Helper()
	g, err := New(cfg, providers...)
	require.NoError(t, err)
	require.NotNil(t, g, "New returned nil")
	return g
}

// closeGateway shuts the gateway down, waiting for every provider call.
func closeGateway(t *testing.T, g *Gateway) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	assert.NoError(t, g.Close(ctx))
}

func ask(tenant string) Request { return Request{Tenant: tenant, Prompt: "hello"} }

func TestGenerateReturnsTheProvidersAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateway(t, config(nil), healthy("alpha"), healthy("beta"))
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), ask("acme"))
		require.NoError(t, err)
		assert.Equal(t, "alpha", resp.Provider, "the first provider in priority order answers")
		assert.Equal(t, "alpha says hi", resp.Text)
		assert.Equal(t, "alpha-model", resp.Model)
		assert.Equal(t, 1, resp.Attempts)
	})
}

func TestRateLimitedBeforeTakingASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(nil)
		cfg.RatePerSecond, cfg.Burst, cfg.MaxConcurrent = 0.01, 1, 1
		gate := make(chan struct{})
		slow := &fake{name: "slow", answer: func(ctx context.Context, _ int) (Completion, error) {
			<-gate
			return Completion{Text: "ok"}, nil
		}}
		g := newGateway(t, cfg, slow)
		defer closeGateway(t, g)
		done := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask("acme")); done <- err }()
		synctest.Wait() // acme's only token is spent and its request holds the only slot

		start := time.Now()
		_, err := g.Generate(t.Context(), ask("acme"))
		assert.ErrorIs(t, err, ErrRateLimited, "a tenant over its rate is refused at once, not queued for a slot first")
		var rl *RateLimitError
		require.ErrorAs(t, err, &rl)
		assert.Positive(t, rl.RetryAfter, "a rate-limited response says when to retry")
		assert.Zero(t, time.Since(start))
		close(gate)
		assert.NoError(t, <-done)
	})
}

func TestOverloadedWhenNoSlotWithinQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := config(rec)
		cfg.MaxConcurrent, cfg.MaxQueueWait = 1, 2*time.Second
		gate := make(chan struct{})
		g := newGateway(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (Completion, error) { <-gate; return Completion{}, nil }})
		defer closeGateway(t, g)
		done := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask("a")); done <- err }()
		synctest.Wait()
		start := time.Now()
		_, err := g.Generate(t.Context(), ask("b"))
		assert.ErrorIs(t, err, ErrOverloaded)
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
		cfg := config(rec)
		cfg.MaxConcurrent = 1
		gate := make(chan struct{})
		first := true
		var mu sync.Mutex
		p := &fake{name: "instant", answer: func(context.Context, int) (Completion, error) {
			mu.Lock()
			wait := first
			first = false
			mu.Unlock()
			if wait {
				<-gate // the first request holds the slot for 1.5 s
			}
			return Completion{Text: "now"}, nil
		}}
		g := newGateway(t, cfg, p)
		defer closeGateway(t, g)
		go func() { _, _ = g.Generate(t.Context(), ask("a")) }()
		synctest.Wait()
		defer time.AfterFunc(1500*time.Millisecond, func() { close(gate) }).Stop()
		resp, err := g.Generate(t.Context(), ask("b"))
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
		g := newGateway(t, config(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), Request{Tenant: "acme", Prompt: "hi", Provider: "alpha"})
		assert.ErrorIs(t, err, errUpstream, "the pinned provider's own error comes back")
		assert.Equal(t, int32(1), alpha.calls.Load(), "a pinned provider gets exactly one attempt")
		assert.Zero(t, beta.calls.Load(), "and no silent fallback to a provider the caller did not ask for")
		assert.Equal(t, 1, resp.Attempts)
	})
}

func TestUnknownPinnedProviderIsRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateway(t, config(nil), healthy("alpha"))
		defer closeGateway(t, g)
		_, err := g.Generate(t.Context(), Request{Tenant: "acme", Prompt: "hi", Provider: "gamma"})
		assert.ErrorIs(t, err, ErrUnknownProvider)
		_, err = g.Generate(t.Context(), Request{Tenant: "acme"})
		assert.ErrorIs(t, err, ErrInvalidRequest, "a request without a prompt is malformed")
	})
}

func TestFallsBackToTheNextProviderOnFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alpha, beta := failing("alpha"), healthy("beta")
		g := newGateway(t, config(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), ask("acme"))
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
		g := newGateway(t, config(rec), alpha, beta)
		defer closeGateway(t, g)
		for range 3 { // alpha fails once per request; threshold 3
			_, err := g.Generate(t.Context(), ask("acme"))
			require.NoError(t, err)
		}
		require.Equal(t, "open", g.BreakerState("alpha"))
		before := alpha.calls.Load()
		resp, err := g.Generate(t.Context(), ask("acme"))
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
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (Completion, error) {
			if down.Load() {
				return Completion{}, errUpstream
			}
			return Completion{Text: "alpha is back"}, nil
		}}
		g := newGateway(t, config(nil), alpha, healthy("beta"))
		defer closeGateway(t, g)
		for range 3 {
			_, _ = g.Generate(t.Context(), ask("acme"))
		}
		require.Equal(t, "open", g.BreakerState("alpha"))
		down.Store(false)
		time.Sleep(30 * time.Second) // RecoveryTimeout
		resp, err := g.Generate(t.Context(), ask("acme"))
		require.NoError(t, err)
		assert.Equal(t, "alpha", resp.Provider, "after the recovery timeout one probe goes to alpha, and it succeeds")
		assert.Equal(t, "closed", g.BreakerState("alpha"))
	})
}

func TestDeadlineSpansAllAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(nil)
		cfg.MaxAttempts, cfg.AttemptTimeout, cfg.TotalTimeout = 10, 3*time.Second, 5*time.Second
		cfg.BaseBackoff, cfg.MaxBackoff = 0, 0
		stuck := func(name string) *fake {
			return &fake{name: name, answer: func(ctx context.Context, _ int) (Completion, error) {
				<-ctx.Done()
				return Completion{}, ctx.Err()
			}}
		}
		g := newGateway(t, cfg, stuck("alpha"), stuck("beta"))
		defer closeGateway(t, g)
		start := time.Now()
		resp, err := g.Generate(t.Context(), ask("acme"))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start), "TotalTimeout bounds the whole request: attempts of 3 s each stop at 5 s, not 30 s")
		assert.Equal(t, 2, resp.Attempts)
	})
}

func TestPermanentErrorIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := errors.New("400 context_length_exceeded")
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (Completion, error) { return Completion{}, Permanent(bad) }}
		beta := healthy("beta")
		g := newGateway(t, config(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), ask("acme"))
		assert.ErrorIs(t, err, bad, "the provider's reason is passed on")
		assert.Equal(t, 1, resp.Attempts)
		assert.Zero(t, beta.calls.Load(), "the same prompt would fail everywhere: no retry, no fallback")
	})
}

func TestSlotIsReleasedWhateverHappens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(nil)
		cfg.MaxConcurrent, cfg.MaxQueueWait = 1, 0
		cfg.FailureThreshold = 100 // keep the breaker out of this test
		var mode atomic.Int32
		p := &fake{name: "flaky", answer: func(ctx context.Context, _ int) (Completion, error) {
			switch mode.Load() {
			case 0:
				return Completion{}, Permanent(errUpstream)
			case 1:
				panic("provider bug")
			case 2:
				<-ctx.Done()
				return Completion{}, ctx.Err()
			}
			return Completion{Text: "fine"}, nil
		}}
		g := newGateway(t, cfg, p)
		defer closeGateway(t, g)

		_, err := g.Generate(t.Context(), ask("a")) // an error
		require.Error(t, err)
		mode.Store(1)
		err = func() (err error) { // a panic inside the provider
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("the provider's panic reached the caller: %v", p)
				}
			}()
			_, err = g.Generate(t.Context(), ask("a"))
			return err
		}()
		require.Error(t, err)
		require.NotContains(t, err.Error(), "reached the caller", "a provider panic becomes an error; it must not crash the request")
		mode.Store(2)
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(500*time.Millisecond, cancel).Stop()
		_, err = g.Generate(ctx, ask("a")) // the caller cancels mid-attempt
		require.ErrorIs(t, err, context.Canceled)

		assert.Equal(t, 0, g.InFlight(), "every path gives the slot back")
		mode.Store(3)
		resp, err := g.Generate(t.Context(), ask("a"))
		require.NoError(t, err, "with MaxConcurrent 1 and no queue wait, a leaked slot would refuse this request")
		assert.Equal(t, "fine", resp.Text)
	})
}

func TestProviderIgnoringItsContextDoesNotHoldTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := config(rec)
		cfg.AttemptTimeout, cfg.TotalTimeout = time.Second, 10*time.Second
		gate := make(chan struct{})
		release := sync.OnceFunc(func() { close(gate) })
		// The deaf provider answers after a minute in any case, so an
		// implementation that waits for it fails the assertion below
		// instead of hanging the test.
		defer time.AfterFunc(time.Minute, release).Stop()
		g := newGateway(t, cfg, hanging("deaf", gate), healthy("beta"))
		start := time.Now()
		resp, err := g.Generate(t.Context(), ask("acme"))
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
		cfg := config(nil)
		cfg.BaseBackoff, cfg.MaxBackoff = 5*time.Second, 5*time.Second
		cfg.Rand = rand.New(topOfRange{}) // the backoff is ~5 s: the cancel at 100 ms lands inside it
		alpha := failing("alpha")
		g := newGateway(t, cfg, alpha)
		defer closeGateway(t, g)
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
		start := time.Now()
		_, err := g.Generate(ctx, ask("acme"))
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "a caller who left stops the backoff at once")
		assert.Equal(t, int32(1), alpha.calls.Load())
	})
}

func TestCloseRejectsNewRequestsAndWaitsForInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fake{name: "slow", answer: func(context.Context, int) (Completion, error) {
			time.Sleep(3 * time.Second)
			return Completion{Text: "finished"}, nil
		}}
		cfg := config(nil)
		cfg.AttemptTimeout, cfg.TotalTimeout = 10*time.Second, 20*time.Second
		g := newGateway(t, cfg, p)
		start := time.Now()
		inflight := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask("a")); inflight <- err }()
		synctest.Wait()
		closed := make(chan error, 1)
		go func() { closed <- g.Close(t.Context()) }()
		synctest.Wait()
		_, err := g.Generate(t.Context(), ask("b"))
		assert.ErrorIs(t, err, ErrClosed, "a request after Close is refused")
		assert.NoError(t, <-inflight, "the in-flight request finishes")
		assert.NoError(t, <-closed)
		assert.Equal(t, 3*time.Second, time.Since(start), "Close returns when the last request does")
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	good := config(nil)
	for _, c := range []struct {
		name      string
		mutate    func(*Config)
		providers []Provider
	}{
		{"no providers", func(*Config) {}, nil},
		{"duplicate names", func(*Config) {}, []Provider{healthy("a"), healthy("a")}},
		{"no attempts", func(c *Config) { c.MaxAttempts = 0 }, []Provider{healthy("a")}},
		{"no total timeout", func(c *Config) { c.TotalTimeout = 0 }, []Provider{healthy("a")}},
		{"no concurrency", func(c *Config) { c.MaxConcurrent = 0 }, []Provider{healthy("a")}},
		{"no rate", func(c *Config) { c.RatePerSecond = 0 }, []Provider{healthy("a")}},
		{"no failure threshold", func(c *Config) { c.FailureThreshold = 0 }, []Provider{healthy("a")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			c.mutate(&cfg)
			g, err := New(cfg, c.providers...)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, g)
		})
	}
}

func TestCallersDeadlineEndsTheRequestAtThatDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stuck := &fake{name: "stuck", answer: func(ctx context.Context, _ int) (Completion, error) {
			<-ctx.Done()
			return Completion{}, ctx.Err()
		}}
		g := newGateway(t, config(nil), stuck)
		defer closeGateway(t, g)
		ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := g.Generate(ctx, ask("acme"))
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's own deadline ran out")
		assert.NotErrorIs(t, err, context.Canceled, "a deadline is not a cancellation: the caller did not leave")
		assert.Equal(t, 700*time.Millisecond, time.Since(start), "the caller's deadline bounds the request, before AttemptTimeout and TotalTimeout")
	})
}

func TestQueuedRequestsAreRefusedWhenTheGatewayCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(nil)
		cfg.MaxConcurrent, cfg.MaxQueueWait = 1, time.Minute
		gate := make(chan struct{})
		g := newGateway(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (Completion, error) {
			<-gate
			return Completion{Text: "done"}, nil
		}})
		running := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask("a")); running <- err }()
		synctest.Wait()
		queued := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask("b")); queued <- err }()
		synctest.Wait() // b waits for the only slot
		closed := make(chan error, 1)
		go func() { closed <- g.Close(t.Context()) }()
		start := time.Now()
		err := <-queued
		assert.ErrorIs(t, err, ErrClosed, "a request still queued when Close starts is refused, not admitted later")
		assert.Zero(t, time.Since(start), "at once, not after the minute of MaxQueueWait")
		close(gate)
		assert.NoError(t, <-running, "the request already running finishes")
		assert.NoError(t, <-closed)
	})
}

func TestCloseWaitsForAbandonedProviderCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := config(rec)
		cfg.AttemptTimeout = time.Second
		gate := make(chan struct{})
		defer time.AfterFunc(5*time.Second, func() { close(gate) }).Stop()
		g := newGateway(t, cfg, hanging("deaf", gate), healthy("beta"))
		_, err := g.Generate(t.Context(), ask("acme"))
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
		g := newGateway(t, config(nil), healthy("alpha"))
		require.NoError(t, g.Close(t.Context()))
		var err error
		require.NotPanics(t, func() { err = g.Close(t.Context()) }, "Close is safe to call twice (deferred and explicit both run in real code)")
		assert.NoError(t, err, "a second Close has nothing left to wait for")
		_, err = g.Generate(t.Context(), ask("acme"))
		assert.ErrorIs(t, err, ErrClosed)
	})
}

func TestRetryAfterIsTheTimeUntilTheNextToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(nil)
		cfg.RatePerSecond, cfg.Burst = 2, 3 // a token every 500 ms
		g := newGateway(t, cfg, healthy("alpha"))
		defer closeGateway(t, g)
		for range 3 {
			_, err := g.Generate(t.Context(), ask("acme"))
			require.NoError(t, err)
		}
		time.Sleep(200 * time.Millisecond)
		_, err := g.Generate(t.Context(), ask("acme"))
		var rl *RateLimitError
		require.ErrorAs(t, err, &rl)
		assert.Equal(t, 300*time.Millisecond, rl.RetryAfter, "0.4 of a token is back after 200 ms: the next whole one in 300 ms")
	})
}

func TestRejectionsAreObservedByReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := config(rec)
		cfg.RatePerSecond, cfg.Burst, cfg.MaxConcurrent, cfg.MaxQueueWait = 0.001, 1, 1, time.Second
		gate := make(chan struct{})
		g := newGateway(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (Completion, error) { <-gate; return Completion{}, nil }})
		go func() { _, _ = g.Generate(t.Context(), ask("a")) }()
		synctest.Wait()
		_, _ = g.Generate(t.Context(), ask("a")) // a's one token is spent
		_, _ = g.Generate(t.Context(), ask("b")) // the only slot is taken for a second
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
		_, _ = g.Generate(ctx, ask("c")) // c leaves while queued
		close(gate)
		closeGateway(t, g)
		_, _ = g.Generate(t.Context(), ask("d"))
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, []string{"rate_limited", "overloaded", "cancelled", "closed"}, rec.rejected,
			"each refusal is observed once, with its own reason")
	})
}

func TestEveryAttemptIsObservedInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		g := newGateway(t, config(rec), failing("alpha"), failing("beta"), healthy("gamma"))
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), ask("acme"))
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
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (Completion, error) {
			if down.Load() {
				return Completion{}, errUpstream
			}
			return Completion{Text: "back"}, nil
		}}
		g := newGateway(t, config(rec), alpha, healthy("beta"))
		defer closeGateway(t, g)
		for range 3 {
			_, _ = g.Generate(t.Context(), ask("acme"))
		}
		down.Store(false)
		time.Sleep(30 * time.Second)
		_, err := g.Generate(t.Context(), ask("acme"))
		require.NoError(t, err)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, []string{"alpha:closed→open", "alpha:open→half-open", "alpha:half-open→closed"}, rec.breakers,
			"the dashboard sees the whole round trip, once each")
	})
}

func TestPermanentIsRecognisedThroughWrapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := errors.New("400 invalid_value")
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (Completion, error) {
			return Completion{}, fmt.Errorf("alpha: %w", Permanent(bad))
		}}
		beta := healthy("beta")
		g := newGateway(t, config(nil), alpha, beta)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), ask("acme"))
		assert.ErrorIs(t, err, bad)
		assert.Equal(t, 1, resp.Attempts, "a provider may wrap a Permanent error; it is still permanent")
		assert.Zero(t, beta.calls.Load())
	})
}

func TestAttemptsStopAtMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(nil)
		cfg.MaxAttempts = 2
		alpha, beta, gamma := failing("alpha"), failing("beta"), healthy("gamma")
		g := newGateway(t, cfg, alpha, beta, gamma)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), ask("acme"))
		assert.ErrorIs(t, err, errUpstream, "the last attempt's error comes back")
		assert.Equal(t, 2, resp.Attempts)
		assert.Zero(t, gamma.calls.Load(), "MaxAttempts counts every attempt, the first included: gamma's turn never comes")
	})
}

func TestLatencyCoversEveryAttemptAndBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alpha := &fake{name: "alpha", answer: func(_ context.Context, call int) (Completion, error) {
			if call == 1 {
				time.Sleep(100 * time.Millisecond)
				return Completion{}, errUpstream
			}
			time.Sleep(200 * time.Millisecond)
			return Completion{Text: "second time lucky"}, nil
		}}
		cfg := config(nil)
		cfg.BaseBackoff, cfg.MaxBackoff = time.Second, time.Second
		cfg.Rand = rand.New(topOfRange{})
		g := newGateway(t, cfg, alpha)
		defer closeGateway(t, g)
		start := time.Now()
		resp, err := g.Generate(t.Context(), ask("acme"))
		require.NoError(t, err)
		assert.Zero(t, resp.QueueWait)
		assert.Equal(t, time.Since(start), resp.Latency, "Latency is admission to answer: both attempts and the backoff between them")
		assert.Greater(t, resp.Latency, 1200*time.Millisecond, "the backoff of about 1 s is in it")
	})
}

func TestNoHealthyProviderCallsNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config(nil)
		cfg.FailureThreshold = 1
		alpha, beta := failing("alpha"), failing("beta")
		g := newGateway(t, cfg, alpha, beta)
		defer closeGateway(t, g)
		_, _ = g.Generate(t.Context(), ask("acme")) // each fails once: both open
		require.Equal(t, "open", g.BreakerState("alpha"))
		require.Equal(t, "open", g.BreakerState("beta"))
		before := alpha.calls.Load() + beta.calls.Load()
		_, err := g.Generate(t.Context(), ask("acme"))
		assert.ErrorIs(t, err, ErrNoHealthyProvider)
		assert.Equal(t, before, alpha.calls.Load()+beta.calls.Load(), "no provider is called while every breaker is open")
		_, err = g.Generate(t.Context(), Request{Tenant: "acme", Prompt: "hi", Provider: "alpha"})
		assert.ErrorIs(t, err, ErrNoHealthyProvider, "a pinned provider whose breaker is open fails fast too")
		assert.Equal(t, before, alpha.calls.Load()+beta.calls.Load())
	})
}

// exclusive is a jitter source that counts draws made while another was
// still running: a gateway that shares it unlocked across requests.
type exclusive struct {
	src          rand.Source
	in, overlaps atomic.Int32
	draws        atomic.Int32
}

func (e *exclusive) Uint64() uint64 {
	if e.in.Add(1) > 1 {
		e.overlaps.Add(1)
	}
	for range 20 {
		runtime.Gosched() // widen the window another draw could overlap
	}
	v := e.src.Uint64()
	e.in.Add(-1)
	e.draws.Add(1)
	return v
}

func TestASeededRandIsSafeToShareAcrossRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &exclusive{src: rand.NewPCG(1, 2)}
		cfg := config(nil)
		cfg.MaxConcurrent, cfg.FailureThreshold = 16, 100 // sixteen first attempts fail at once: not an outage
		cfg.Rand = rand.New(src)                          // one seeded source for every request: a *rand.Rand is not safe for concurrent use
		var failed atomic.Int32
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (Completion, error) {
			if failed.Add(1) <= 16 {
				return Completion{}, errUpstream // each request's first attempt, all at once: each backs off
			}
			return Completion{Text: "ok"}, nil
		}}
		g := newGateway(t, cfg, alpha)
		defer closeGateway(t, g)
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				_, err := g.Generate(t.Context(), ask(fmt.Sprintf("tenant-%d", i)))
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Positive(t, src.draws.Load(), "the backoffs drew their jitter from Config.Rand")
		assert.Zero(t, src.overlaps.Load(), "two requests drew from the shared source at once: lock it (run with -race to see the race)")
	})
}

func TestACallerWhoLeavesStopsTheUpstreamCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stopped atomic.Bool
		var stoppedAt time.Duration
		start := time.Now()
		quit := make(chan struct{}) // the end of the test, for a call nobody stopped
		alpha := &fake{name: "alpha", answer: func(ctx context.Context, _ int) (Completion, error) {
			select { // a provider that honours its context: a generation billed until it stops
			case <-ctx.Done():
				stoppedAt = time.Since(start)
				stopped.Store(true)
				return Completion{}, ctx.Err()
			case <-quit:
				return Completion{}, errors.New("never stopped")
			}
		}}
		g := newGateway(t, config(nil), alpha)
		defer closeGateway(t, g)
		defer close(quit) // first: so that Close does not wait for ever on a call nobody stopped
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(300*time.Millisecond, cancel) // the caller hangs up
		_, err := g.Generate(ctx, ask("acme"))
		require.ErrorIs(t, err, context.Canceled)
		synctest.Wait()
		require.True(t, stopped.Load(), "the provider's call is still running after its caller left")
		assert.Equal(t, 300*time.Millisecond, stoppedAt,
			"the provider was told to stop when the caller left, not at the attempt timeout (%s): it is given the attempt's context, not one detached from it", config(nil).AttemptTimeout)
	})
}
