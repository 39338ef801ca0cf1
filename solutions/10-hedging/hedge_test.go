package hedging

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	errDown = errors.New("provider down")
	errBusy = errors.New("provider busy")
)

// forever is how long a "hanging" call waits when nobody cancels it: long
// enough that a Do which waits for it fails an elapsed-time assertion by
// name instead of deadlocking the bubble.
const forever = time.Hour

// wait is a call's work: d of (fake) time, or until its context ends.
func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fleet is a set of fake providers. It records every attempt — which
// target, when it started, what its context looked like, how it ended —
// and how many attempts hold a slot right now.
type fleet struct {
	start time.Time
	slots atomic.Int32

	mu       sync.Mutex
	attempts []attempt
}

type attempt struct {
	target      string
	at          time.Duration // since the fleet was made
	deadline    time.Duration // the attempt's ctx deadline since start; 0 if none
	ended       bool
	ctxErrAtEnd error
}

func newFleet() *fleet { return &fleet{start: time.Now()} }

// call runs behave(ctx, target) as one attempt holding one slot.
func (f *fleet) call(behave func(ctx context.Context, target string) error) func(context.Context, string) (string, error) {
	return func(ctx context.Context, target string) (string, error) {
		f.slots.Add(1)
		defer f.slots.Add(-1)
		a := attempt{target: target, at: time.Since(f.start)}
		if d, ok := ctx.Deadline(); ok {
			a.deadline = d.Sub(f.start)
		}
		f.mu.Lock()
		i := len(f.attempts)
		f.attempts = append(f.attempts, a)
		f.mu.Unlock()
		err := behave(ctx, target)
		f.mu.Lock()
		f.attempts[i].ended, f.attempts[i].ctxErrAtEnd = true, ctx.Err()
		f.mu.Unlock()
		if err != nil {
			return "", err
		}
		return "answer from " + target, nil
	}
}

func (f *fleet) log() []attempt {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.attempts)
}

// started lists "target@offset" for every attempt, in start order.
func (f *fleet) started() []string {
	var out []string
	for _, a := range f.log() {
		out = append(out, a.target+"@"+a.at.String())
	}
	return out
}

// takes returns a behaviour where each target takes a fixed time.
func takes(m map[string]time.Duration) func(context.Context, string) error {
	return func(ctx context.Context, target string) error { return wait(ctx, m[target]) }
}

func newHedger(t *testing.T, cfg Config) *Hedger {
	t.Helper()
	h, err := New(cfg)
	require.NoError(t, err, "New(%+v) should accept a valid config", cfg)
	require.NotNil(t, h)
	return h
}

func TestHedgeStartsOnTheNextTargetAfterTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHedger(t, Config{Delay: time.Second, MaxHedges: 1})
		f := newFleet()
		v, err := Do(t.Context(), h, []string{"alpha", "beta"}, f.call(takes(map[string]time.Duration{"alpha": 5 * time.Second, "beta": 500 * time.Millisecond})))
		require.NoError(t, err)
		assert.Equal(t, "answer from beta", v, "the hedge answered first: its answer wins")
		assert.Equal(t, []string{"alpha@0s", "beta@1s"}, f.started(), "one hedge, on the next target, exactly Delay after the first attempt")
		assert.Equal(t, 1500*time.Millisecond, time.Since(f.start), "the request ends when the hedge answers")

		f = newFleet()
		v, err = Do(t.Context(), h, []string{"alpha", "beta"}, f.call(takes(map[string]time.Duration{"alpha": 999 * time.Millisecond})))
		require.NoError(t, err)
		assert.Equal(t, "answer from alpha", v)
		assert.Equal(t, []string{"alpha@0s"}, f.started(), "an attempt faster than Delay is never hedged")
	})
}

func TestLoserIsCancelledAndItsSlotReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHedger(t, Config{Delay: time.Second, MaxHedges: 1})
		f := newFleet()
		v, err := Do(t.Context(), h, []string{"alpha", "beta"}, f.call(func(ctx context.Context, target string) error {
			if target == "beta" {
				return wait(ctx, 200*time.Millisecond)
			}
			err := wait(ctx, forever)
			time.Sleep(10 * time.Millisecond) // a cancelled call takes a moment to close its connection
			return err
		}))
		require.NoError(t, err)
		assert.Equal(t, "answer from beta", v)
		assert.NotEqual(t, 1200*time.Millisecond, time.Since(f.start),
			"Do returned the moment the hedge won, with the loser still running: it must wait for the attempts it started")
		assert.Equal(t, 1210*time.Millisecond, time.Since(f.start),
			"Do must cancel the losing attempt as soon as the hedge wins (then wait the 10 ms it takes to stop), not wait for it to finish on its own")
		assert.Zero(t, f.slots.Load(), "when Do returns, the loser has given its slot back: Do waits for every attempt it started")
		log := f.log()
		require.Len(t, log, 2)
		assert.True(t, log[0].ended, "the loser's call has returned before Do did: no goroutine outlives Do")
		assert.ErrorIs(t, log[0].ctxErrAtEnd, context.Canceled, "the loser ended because Do cancelled its context")
	})
}

func TestAtMostMaxHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHedger(t, Config{Delay: time.Second, MaxHedges: 2})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		f := newFleet()
		_, err := Do(ctx, h, []string{"alpha", "beta", "gamma", "delta"}, f.call(takes(map[string]time.Duration{"alpha": forever, "beta": forever, "gamma": forever, "delta": forever})))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, []string{"alpha@0s", "beta@1s", "gamma@2s"}, f.started(),
			"MaxHedges 2: a hedge Delay after each attempt, on the next target, and then no more")
		assert.Equal(t, 10*time.Second, time.Since(f.start))
		assert.Zero(t, f.slots.Load())
	})
}

func TestHedgeSharesTheCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHedger(t, Config{Delay: time.Second, MaxHedges: 1})
		f := newFleet()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := Do(ctx, h, []string{"alpha", "beta"}, f.call(takes(map[string]time.Duration{"alpha": forever, "beta": forever})))
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline ended the request")
		assert.NotErrorIs(t, err, context.Canceled)
		assert.Equal(t, 3*time.Second, time.Since(f.start), "a hedge gets no time of its own: the request ends at the caller's deadline")
		log := f.log()
		require.Len(t, log, 2)
		assert.Equal(t, 3*time.Second, log[0].deadline, "the first attempt runs under the caller's deadline")
		assert.Equal(t, 3*time.Second, log[1].deadline, "the hedge runs under the same deadline as the first attempt, not a fresh one and not none")
		assert.Zero(t, f.slots.Load())
	})
}

func TestCancelIsNotADeadline(t *testing.T) {
	t.Run("cancelled while both attempts run", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := newHedger(t, Config{Delay: time.Second, MaxHedges: 1})
			f := newFleet()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			time.AfterFunc(1500*time.Millisecond, cancel)
			_, err := Do(ctx, h, []string{"alpha", "beta"}, f.call(takes(map[string]time.Duration{"alpha": forever, "beta": forever})))
			assert.ErrorIs(t, err, context.Canceled, "the caller left: say so")
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "a caller who left is not a deadline")
			assert.Equal(t, 1500*time.Millisecond, time.Since(f.start), "Do returns as soon as the caller cancels")
			assert.Len(t, f.log(), 2)
			assert.Zero(t, f.slots.Load(), "both attempts were stopped and waited for")
		})
	})
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"already cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, context.Canceled},
		{"already expired", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHedger(t, Config{Delay: time.Second, MaxHedges: 1, MaxRetries: 1})
				f := newFleet()
				ctx, cancel := c.ctx()
				defer cancel()
				_, err := Do(ctx, h, []string{"alpha"}, f.call(takes(nil)))
				assert.ErrorIs(t, err, c.want)
				assert.Empty(t, f.log(), "a caller whose context is done gets no attempt at all")
			})
		})
	}
}

func TestNonIdempotentIsNeverHedgedOrRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHedger(t, Config{Delay: time.Second, MaxHedges: 2, MaxRetries: 2})
		ctx := NonIdempotent(t.Context())
		f := newFleet()
		v, err := Do(ctx, h, []string{"alpha", "beta"}, f.call(takes(map[string]time.Duration{"alpha": 5 * time.Second})))
		require.NoError(t, err)
		assert.Equal(t, "answer from alpha", v)
		assert.Equal(t, []string{"alpha@0s"}, f.started(), "a request marked non-idempotent runs once, however slow: a hedge could run the write twice")

		f = newFleet()
		_, err = Do(ctx, h, []string{"alpha", "beta"}, f.call(func(context.Context, string) error { return errDown }))
		assert.ErrorIs(t, err, errDown)
		assert.Equal(t, []string{"alpha@0s"}, f.started(), "and a failed non-idempotent request is not retried either")

		f = newFleet()
		_, err = Do(t.Context(), h, []string{"alpha", "beta"}, f.call(takes(map[string]time.Duration{"alpha": 5 * time.Second})))
		require.NoError(t, err)
		assert.Len(t, f.log(), 2, "the same request without the mark is hedged (the mark is what stops it)")
	})
}

func TestAFailureWaitsForTheAttemptStillRunning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHedger(t, Config{Delay: time.Second, MaxHedges: 1})
		f := newFleet()
		v, err := Do(t.Context(), h, []string{"alpha", "beta"}, f.call(func(ctx context.Context, target string) error {
			if target == "alpha" {
				if err := wait(ctx, 1500*time.Millisecond); err != nil {
					return err
				}
				return errDown // the first attempt fails after the hedge started…
			}
			return wait(ctx, time.Second) // …and the hedge succeeds after it
		}))
		require.NoError(t, err, "the first outcome was an error, but the hedge was still running: wait for it, the first SUCCESS wins")
		assert.Equal(t, "answer from beta", v)
		assert.Equal(t, 2*time.Second, time.Since(f.start))

		f = newFleet()
		_, err = Do(t.Context(), h, []string{"alpha", "beta"}, f.call(func(ctx context.Context, target string) error {
			if target == "alpha" {
				_ = wait(ctx, 1500*time.Millisecond)
				return errDown
			}
			_ = wait(ctx, time.Second)
			return errBusy
		}))
		assert.ErrorIs(t, err, errBusy, "when every attempt fails, the error is the last one's")
		assert.Equal(t, 2*time.Second, time.Since(f.start))
	})
}

func TestRetriesGoToTheNextTargetAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHedger(t, Config{MaxRetries: 2})
		f := newFleet()
		v, err := Do(t.Context(), h, []string{"alpha", "beta", "gamma"}, f.call(func(ctx context.Context, target string) error {
			if err := wait(ctx, 100*time.Millisecond); err != nil {
				return err
			}
			if target == "gamma" {
				return nil
			}
			return errDown
		}))
		require.NoError(t, err)
		assert.Equal(t, "answer from gamma", v)
		assert.Equal(t, []string{"alpha@0s", "beta@100ms", "gamma@200ms"}, f.started(), "each failure is retried at once on the next target")

		f = newFleet()
		_, err = Do(t.Context(), h, []string{"alpha"}, f.call(func(context.Context, string) error { return errDown }))
		assert.ErrorIs(t, err, errDown)
		assert.Len(t, f.log(), 3, "MaxRetries 2: three attempts in all, on the one target there is")
	})
}

func TestHedgesSpendTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(t, BudgetConfig{TTL: time.Minute, PercentCanRetry: 1})
		h := newHedger(t, Config{Delay: time.Second, MaxHedges: 1, Budget: b})
		slow := takes(map[string]time.Duration{"alpha": 5 * time.Second, "beta": 100 * time.Millisecond})

		f := newFleet()
		_, err := Do(t.Context(), h, []string{"alpha", "beta"}, f.call(slow))
		require.NoError(t, err)
		assert.Equal(t, []string{"alpha@0s"}, f.started(), "beta's budget is empty: no hedge, and the request waits for alpha")
		assert.Equal(t, 1, b.Balance("alpha"), "the request was deposited to its first target's budget")

		b.Deposit("beta") // one request of beta's own: one extra attempt for beta at 100%
		f = newFleet()
		v, err := Do(t.Context(), h, []string{"alpha", "beta"}, f.call(slow))
		require.NoError(t, err)
		assert.Equal(t, "answer from beta", v, "with budget to spend, the slow request is hedged")
		assert.Equal(t, 0, b.Balance("beta"), "a hedge is an extra attempt: it is withdrawn from the budget of the target it goes to")

		f = newFleet()
		_, err = Do(t.Context(), h, []string{"alpha", "beta"}, f.call(slow))
		require.NoError(t, err)
		assert.Equal(t, []string{"alpha@0s"}, f.started(), "the hedge spent beta's budget: the next slow request is not hedged")
	})
}

func TestBudgetExhaustionReturnsTheLastErrorAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(t, BudgetConfig{TTL: time.Minute, PercentCanRetry: 0.5})
		h := newHedger(t, Config{MaxRetries: 5, Budget: b})
		down := func(context.Context, string) error { return errDown }

		f := newFleet()
		_, err := Do(t.Context(), h, []string{"alpha"}, f.call(down))
		assert.ErrorIs(t, err, ErrBudgetExhausted, "half a retry in the budget is no retry: say the budget ran out")
		assert.ErrorIs(t, err, errDown, "and what the last attempt saw")
		assert.Len(t, f.log(), 1)
		assert.Zero(t, time.Since(f.start), "exhaustion returns at once: no waiting for budget to come back")

		f = newFleet()
		_, err = Do(t.Context(), h, []string{"alpha"}, f.call(down))
		assert.ErrorIs(t, err, ErrBudgetExhausted)
		assert.ErrorIs(t, err, errDown)
		assert.Len(t, f.log(), 2, "two requests × 50%% = one retry, then exhausted")
	})
}

func TestOutageAttemptsAreCappedByTheBudget(t *testing.T) {
	// 10 requests a second for 10 s to a provider that is down, each allowed
	// 3 retries. The budget: 10% of requests, plus 2 per second, over a 10 s
	// window — so at most 100 + 0.1×100 + 2×10 = 130 attempts reach it.
	outage := func(t *testing.T, b *Budget) (calls int) {
		h := newHedger(t, Config{MaxRetries: 3, Budget: b})
		f := newFleet()
		for range 100 {
			_, err := Do(t.Context(), h, []string{"alpha"}, f.call(func(context.Context, string) error { return errDown }))
			require.ErrorIs(t, err, errDown)
			time.Sleep(100 * time.Millisecond)
		}
		return len(f.log())
	}
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(t, BudgetConfig{TTL: 10 * time.Second, MinRetriesPerSec: 2, PercentCanRetry: 0.1})
		assert.Equal(t, 130, outage(t, b),
			"attempts on a dead provider = requests × (1 + PercentCanRetry) + MinRetriesPerSec × seconds, exactly: every retry is withdrawn from the budget")
		assert.Equal(t, 400, outage(t, nil), "without a budget every request makes all 4 attempts: 4× the load on a provider that is down")
	})
}

func TestHedgeDelayFollowsTheObservedPercentile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHedger(t, Config{Delay: 10 * time.Second, MaxHedges: 1, Percentile: 0.95, LatencyWindow: 20})
		targets := []string{"alpha", "beta"}
		hedgeAt := func(alpha time.Duration) time.Duration {
			f := newFleet()
			_, err := Do(t.Context(), h, targets, f.call(takes(map[string]time.Duration{"alpha": alpha, "beta": 10 * time.Millisecond})))
			require.NoError(t, err)
			log := f.log()
			if len(log) < 2 {
				return 0
			}
			return log[1].at
		}
		assert.Equal(t, 10*time.Second, hedgeAt(time.Minute), "until alpha's window is full, hedge at the fixed Delay")
		for i := 1; i <= 20; i++ {
			assert.Zero(t, hedgeAt(time.Duration(i)*10*time.Millisecond), "a request faster than the hedge delay is not hedged")
		}
		assert.Equal(t, 190*time.Millisecond, hedgeAt(time.Minute),
			"alpha's last 20 latencies are 10 ms … 200 ms: the nearest-rank p95 is the 19th, 190 ms; hedge there")
	})
}

// p99 is the nearest-rank 99th percentile.
func p99(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(math.Ceil(0.99*float64(len(s))))-1]
}

func TestHedgingCutsTheTailWhenOneTargetIsSlow(t *testing.T) {
	// A seeded workload: alpha answers in 20–99 ms, but 5% of the time it
	// takes 5 s; beta always answers in 20–99 ms. Every request goes to
	// alpha first. In fake time each request's latency is known exactly:
	// alpha's without hedging; with a hedge at 100 ms, alpha's when it is
	// fast, 100 ms + beta's when it is slow.
	const n, delay = 1000, 100 * time.Millisecond
	rng := testkit.Rand(t)
	alpha, beta := make([]time.Duration, n), make([]time.Duration, n)
	wantPlain, wantHedged := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		alpha[i] = time.Duration(20+rng.IntN(80)) * time.Millisecond
		if rng.IntN(100) < 5 {
			alpha[i] = 5 * time.Second
		}
		beta[i] = time.Duration(20+rng.IntN(80)) * time.Millisecond
		wantPlain[i], wantHedged[i] = alpha[i], alpha[i]
		if alpha[i] > delay {
			wantHedged[i] = min(alpha[i], delay+beta[i])
		}
	}
	run := func(t *testing.T, cfg Config) []time.Duration {
		h := newHedger(t, cfg)
		took := make([]time.Duration, n)
		for i := range n {
			start := time.Now()
			_, err := Do(t.Context(), h, []string{"alpha", "beta"}, func(ctx context.Context, target string) (int, error) {
				d := alpha[i]
				if target == "beta" {
					d = beta[i]
				}
				return i, wait(ctx, d)
			})
			require.NoError(t, err)
			took[i] = time.Since(start)
		}
		return took
	}
	synctest.Test(t, func(t *testing.T) {
		plain := run(t, Config{})
		hedged := run(t, Config{Delay: delay, MaxHedges: 1})
		assert.Equal(t, wantPlain, plain, "without hedging each request takes alpha's latency")
		assert.Equal(t, wantHedged, hedged, "with a hedge at 100 ms a slow request takes 100 ms + beta's latency; a fast one is not hedged")
		assert.Equal(t, p99(wantPlain), p99(plain))
		assert.Equal(t, p99(wantHedged), p99(hedged))
		assert.Less(t, p99(hedged), 200*time.Millisecond, "hedging cuts p99 from alpha's slow tail to under 200 ms")
		t.Logf("p99 of %d requests: %v without hedging, %v with a hedge at %v", n, p99(plain), p99(hedged), delay)
	})
}

func TestDoWithoutTargetsCallsNothing(t *testing.T) {
	h := newHedger(t, Config{})
	calls := 0
	_, err := Do(t.Context(), h, nil, func(context.Context, string) (int, error) { calls++; return 0, nil })
	assert.ErrorIs(t, err, ErrNoTargets)
	assert.Zero(t, calls)
}
