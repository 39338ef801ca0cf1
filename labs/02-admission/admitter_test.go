package admission

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limiterFunc adapts a function to the Limiter interface.
type limiterFunc func(ctx context.Context, key string) (Decision, error)

func (f limiterFunc) Allow(ctx context.Context, key string) (Decision, error) { return f(ctx, key) }

var allowAll = limiterFunc(func(context.Context, string) (Decision, error) {
	return Decision{Allowed: true}, nil
})

func newAdmitter(t *testing.T, cfg Config) *Admitter {
	t.Helper()
	a, err := New(cfg)
	require.NoError(t, err)
	require.NotNil(t, a, "New returned nil")
	return a
}

func admit(t *testing.T, a *Admitter, key string) *Ticket {
	t.Helper()
	tk, err := a.Admit(t.Context(), key)
	require.NoError(t, err)
	require.NotNil(t, tk, "Admit returned a nil ticket without an error")
	return tk
}

// admitAsync runs Admit in a goroutine; the result arrives on the channel.
type admitResult struct {
	ticket *Ticket
	err    error
	at     time.Duration // fake time since the test started
}

func admitAsync(ctx context.Context, a *Admitter, key string, start time.Time) <-chan admitResult {
	out := make(chan admitResult, 1)
	go func() {
		tk, err := a.Admit(ctx, key)
		out <- admitResult{tk, err, time.Since(start)}
	}()
	return out
}

func TestSemaphoreBoundsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSemaphore(2)
		require.NotNil(t, s)
		require.NoError(t, s.Acquire(t.Context()))
		require.NoError(t, s.Acquire(t.Context()))
		assert.Equal(t, 2, s.InFlight())

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		assert.ErrorIs(t, s.Acquire(ctx), context.DeadlineExceeded, "a third Acquire on 2 slots waits until its ctx ends")
		assert.Equal(t, 2, s.InFlight(), "a failed Acquire holds nothing")

		s.Release()
		assert.Equal(t, 1, s.InFlight())
		assert.NoError(t, s.Acquire(t.Context()), "a released slot can be taken again")
	})
}

func TestSemaphoreWakesAWaiterOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSemaphore(1)
		require.NotNil(t, s)
		require.NoError(t, s.Acquire(t.Context()))
		got := make(chan error, 1)
		go func() { got <- s.Acquire(t.Context()) }()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("Acquire returned (%v) while the only slot was held", err)
		default:
		}
		s.Release()
		synctest.Wait()
		select {
		case err := <-got:
			assert.NoError(t, err)
		default:
			t.Fatal("Release did not hand the slot to the waiting Acquire")
		}
		assert.Equal(t, 1, s.InFlight())
	})
}

func TestSemaphoreReleaseNeverAddsCapacity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSemaphore(1)
		require.NotNil(t, s)
		require.NoError(t, s.Acquire(t.Context()))
		s.Release()
		func() {
			defer func() { _ = recover() }() // panicking on a stray Release is fine; growing is not
			s.Release()
		}()
		require.NoError(t, s.Acquire(t.Context()))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		assert.ErrorIs(t, s.Acquire(ctx), context.DeadlineExceeded,
			"a Release without an Acquire must not add a slot: a semaphore of 1 admitted 2")
	})
}

func TestSemaphoreCancelledWaiterNeverStrandsASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSemaphore(1)
		require.NotNil(t, s)
		// The waiter's context ends and the slot is handed to it in the same
		// instant. Whichever wins, the waiter either holds the slot (nil) or
		// holds nothing (ctx.Err()): the slot must never belong to nobody.
		// With one P the woken waiter cannot run between cancel and Release,
		// so the two really do land together.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		for round := range 20 {
			require.NoError(t, s.Acquire(t.Context()), "round %d: Acquire on a free semaphore of 1", round)
			ctx, cancel := context.WithCancel(t.Context())
			got := make(chan error, 1)
			go func() { got <- s.Acquire(ctx) }()
			synctest.Wait() // queued
			cancel()
			s.Release()
			if err := <-got; err == nil {
				require.Equal(t, 1, s.InFlight(), "round %d: Acquire succeeded, so the waiter holds the slot", round)
				s.Release()
			} else {
				require.ErrorIs(t, err, context.Canceled, "round %d", round)
				require.NotErrorIs(t, err, context.DeadlineExceeded, "round %d: the caller cancelled; no deadline passed", round)
			}
			require.Zero(t, s.InFlight(),
				"round %d: a waiter that left as the slot was handed to it stranded the slot: nobody holds it and nobody can take it", round)
		}
	})
}

func TestAdmitRateLimitsBeforeTakingASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var a *Admitter
		inFlightAtCheck := -1
		a = newAdmitter(t, Config{
			Limiter: limiterFunc(func(context.Context, string) (Decision, error) {
				inFlightAtCheck = a.InFlight()
				return Decision{RetryAfter: time.Second}, nil
			}),
			MaxConcurrent: 1, MaxQueueWait: time.Minute,
		})
		start := time.Now()
		_, err := a.Admit(t.Context(), "tenant")
		require.ErrorIs(t, err, ErrRateLimited)
		assert.Equal(t, 0, inFlightAtCheck, "the rate limit must be checked before a slot is taken: a request refused for quota held a slot")
		assert.Zero(t, a.InFlight())
		assert.Zero(t, time.Since(start), "a rate-limited request is refused at once")
	})
}

func TestAdmitRateLimitedRequestDoesNotQueueForASlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb, err := NewTokenBucket(0.001, 1)
		require.NoError(t, err)
		a := newAdmitter(t, Config{Limiter: tb, MaxConcurrent: 1, MaxQueueWait: time.Minute})
		held := admit(t, a, "busy-tenant") // the only slot is taken
		defer held.Release()
		require.Equal(t, 1, allowed(t, tb, "spent-tenant", 1)) // this tenant's one token is used up

		start := time.Now()
		_, err = a.Admit(t.Context(), "spent-tenant")
		assert.ErrorIs(t, err, ErrRateLimited, "an over-quota tenant is told so, not made to queue and then told it is overloaded")
		assert.Zero(t, time.Since(start), "it must not wait for a slot first")
	})
}

func TestAdmitRateLimitErrorCarriesRetryAfter(t *testing.T) {
	a := newAdmitter(t, Config{
		Limiter: limiterFunc(func(context.Context, string) (Decision, error) {
			return Decision{RetryAfter: 1500 * time.Millisecond}, nil
		}),
		MaxConcurrent: 1,
	})
	_, err := a.Admit(t.Context(), "k")
	require.ErrorIs(t, err, ErrRateLimited)
	var rl *RateLimitError
	require.ErrorAs(t, err, &rl, "the error should be a *RateLimitError so the HTTP layer can set Retry-After")
	assert.Equal(t, 1500*time.Millisecond, rl.RetryAfter)
}

func TestAdmitLimiterErrorFailsWithoutTakingASlot(t *testing.T) {
	boom := errors.New("limiter backend down")
	a := newAdmitter(t, Config{
		Limiter:       limiterFunc(func(context.Context, string) (Decision, error) { return Decision{}, boom }),
		MaxConcurrent: 1,
	})
	_, err := a.Admit(t.Context(), "k")
	assert.ErrorIs(t, err, boom, "the limiter's error should be wrapped, not replaced")
	assert.NotErrorIs(t, err, ErrRateLimited, "a limiter that could not decide did not rate limit anyone")
	assert.Zero(t, a.InFlight(), "a failed Admit must leave no slot taken")
	tk, err := a.Admit(t.Context(), "k")
	assert.Error(t, err)
	assert.Nil(t, tk)
	assert.Zero(t, a.InFlight(), "repeated failures must not leak slots either")
}

func TestAdmitWithContextAlreadyDoneTakesNothing(t *testing.T) {
	for _, c := range []struct {
		name        string
		ctx         func(t *testing.T) context.Context
		want, other error
	}{
		{"cancelled", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}, context.Canceled, context.DeadlineExceeded},
		{"deadline passed", func(t *testing.T) context.Context {
			ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded, context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			asked := 0
			a := newAdmitter(t, Config{
				Limiter: limiterFunc(func(context.Context, string) (Decision, error) {
					asked++
					return Decision{Allowed: true}, nil
				}),
				MaxConcurrent: 1, MaxQueueWait: time.Minute,
			})
			tk, err := a.Admit(c.ctx(t), "k")
			if tk != nil {
				tk.Release()
			}
			require.ErrorIs(t, err, c.want, "a caller whose context has already ended gets its ctx.Err(), even with a slot free")
			assert.NotErrorIs(t, err, c.other)
			assert.NotErrorIs(t, err, ErrOverloaded, "a slot was free: nothing was overloaded")
			assert.Zero(t, asked, "the limiter must not be asked for a caller that has left: it would spend the tenant's token")
			assert.Zero(t, a.InFlight())
		})
	}
}

func TestTicketCarriesTheRateLimitDecision(t *testing.T) {
	want := Decision{Allowed: true, Remaining: 7}
	a := newAdmitter(t, Config{
		Limiter:       limiterFunc(func(context.Context, string) (Decision, error) { return want, nil }),
		MaxConcurrent: 1,
	})
	tk := admit(t, a, "k")
	defer tk.Release()
	assert.Equal(t, want, tk.RateLimit, "Ticket.RateLimit is the limiter's decision: the HTTP layer sets X-RateLimit-Remaining from it")
}

func TestAdmitWithoutALimiterOnlyBoundsConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{MaxConcurrent: 2, MaxQueueWait: time.Second})
		require.NoError(t, err, "Config.Limiter nil means no rate limit, not a bad config")
		require.NotNil(t, a)
		var tickets []*Ticket
		defer func() {
			for _, tk := range tickets {
				tk.Release()
			}
		}()
		for i := range 2 {
			var tk *Ticket
			require.NotPanics(t, func() { tk, err = a.Admit(t.Context(), "k") }, "Admit with a nil Limiter must not call it")
			require.NoError(t, err, "request %d of 2 slots, no limiter", i+1)
			require.NotNil(t, tk)
			tickets = append(tickets, tk)
		}
		assert.Zero(t, tickets[0].RateLimit, "no limiter, no decision")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		tk, err := a.Admit(ctx, "k")
		if tk != nil {
			tk.Release()
		}
		assert.ErrorIs(t, err, ErrOverloaded, "the slots still bound concurrency")
	})
}

func TestTicketReleaseIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmitter(t, Config{Limiter: allowAll, MaxConcurrent: 2})
		t1 := admit(t, a, "k")
		t2 := admit(t, a, "k")
		t1.Release()
		t1.Release() // a defer and an explicit release, say
		require.Equal(t, 1, a.InFlight(), "releasing one ticket twice must give back one slot, not two")
		t3 := admit(t, a, "k")
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // bounds a wait that MaxQueueWait 0 forbids
		defer cancel()
		tk, err := a.Admit(ctx, "k")
		if tk != nil {
			tk.Release()
		}
		assert.ErrorIs(t, err, ErrOverloaded, "capacity is still 2: two tickets are out")
		t2.Release()
		t3.Release()
		assert.Zero(t, a.InFlight())
	})
}

func TestAdmitWaitsUpToMaxQueueWaitAndMeasuresIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmitter(t, Config{Limiter: allowAll, MaxConcurrent: 1, MaxQueueWait: 2 * time.Second})
		start := time.Now()
		first := admit(t, a, "k")
		assert.Zero(t, first.QueueWait, "a free slot means no queue wait")

		res := admitAsync(t.Context(), a, "k", start)
		time.Sleep(1500 * time.Millisecond)
		first.Release()
		r := <-res
		require.NoError(t, r.err, "a slot freed within MaxQueueWait should admit the waiting request")
		require.NotNil(t, r.ticket)
		defer r.ticket.Release()
		assert.Equal(t, 1500*time.Millisecond, r.at, "the waiter is admitted the moment the slot frees")
		assert.Equal(t, 1500*time.Millisecond, r.ticket.QueueWait, "QueueWait must be the time spent waiting for the slot")
	})
}

func TestAdmitGivesUpAfterMaxQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmitter(t, Config{Limiter: allowAll, MaxConcurrent: 1, MaxQueueWait: 2 * time.Second})
		start := time.Now()
		held := admit(t, a, "k")
		res := admitAsync(t.Context(), a, "k", start)
		time.Sleep(10 * time.Second) // the holder runs long, then finishes
		held.Release()
		r := <-res
		if r.ticket != nil {
			r.ticket.Release()
		}
		assert.ErrorIs(t, r.err, ErrOverloaded, "no slot within MaxQueueWait means ErrOverloaded")
		assert.NotErrorIs(t, r.err, context.DeadlineExceeded,
			"the caller's deadline did not pass: an overload that also reads as a deadline is answered 504 instead of 503")
		assert.Equal(t, 2*time.Second, r.at, "the wait for a slot must be bounded by MaxQueueWait")
		assert.Zero(t, a.InFlight())
	})
}

func TestAdmitZeroQueueWaitRefusesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmitter(t, Config{Limiter: allowAll, MaxConcurrent: 1})
		held := admit(t, a, "k")
		defer held.Release()
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // bounds the wait if it happens
		defer cancel()
		tk, err := a.Admit(ctx, "k")
		if tk != nil {
			tk.Release()
		}
		assert.Zero(t, time.Since(start), "MaxQueueWait 0 means don't wait")
		assert.ErrorIs(t, err, ErrOverloaded)
	})
}

func TestAdmitReturnsCallerCancellationNotOverloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmitter(t, Config{Limiter: allowAll, MaxConcurrent: 1, MaxQueueWait: 2 * time.Second})
		start := time.Now()
		held := admit(t, a, "k")
		defer held.Release()
		ctx, cancel := context.WithCancel(t.Context())
		res := admitAsync(ctx, a, "k", start)
		time.Sleep(500 * time.Millisecond)
		cancel() // the client disconnected while queued
		r := <-res
		if r.ticket != nil {
			r.ticket.Release()
		}
		assert.ErrorIs(t, r.err, context.Canceled, "a caller that left gets its own ctx.Err()")
		assert.NotErrorIs(t, r.err, ErrOverloaded, "a caller that left did not find the service overloaded")
		assert.Equal(t, 500*time.Millisecond, r.at, "the queued Admit must return as soon as its caller cancels")
	})
}

func TestAdmitReturnsCallerDeadlineNotOverloaded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmitter(t, Config{Limiter: allowAll, MaxConcurrent: 1, MaxQueueWait: 2 * time.Second})
		start := time.Now()
		held := admit(t, a, "k")
		defer held.Release()
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond) // the client's own deadline
		defer cancel()
		r := <-admitAsync(ctx, a, "k", start)
		if r.ticket != nil {
			r.ticket.Release()
		}
		assert.ErrorIs(t, r.err, context.DeadlineExceeded, "a caller whose deadline passed while queued gets its own ctx.Err()")
		assert.NotErrorIs(t, r.err, ErrOverloaded, "its deadline, not MaxQueueWait, ended the wait: that is not overload")
		assert.NotErrorIs(t, r.err, context.Canceled)
		assert.Equal(t, 500*time.Millisecond, r.at, "the queued Admit returns at the caller's deadline")
		assert.Equal(t, 1, a.InFlight(), "and holds nothing: only the first ticket is out")
	})
}

func TestCloseRejectsNewAndQueuedAdmits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newAdmitter(t, Config{Limiter: allowAll, MaxConcurrent: 1, MaxQueueWait: time.Minute})
		start := time.Now()
		held := admit(t, a, "k")
		res := admitAsync(t.Context(), a, "k", start)
		time.Sleep(time.Second)
		a.Close()
		r := <-res
		if r.ticket != nil {
			r.ticket.Release()
		}
		assert.ErrorIs(t, r.err, ErrClosed, "a request still queued when Close is called gets ErrClosed")
		assert.Equal(t, time.Second, r.at, "and gets it at once, not after MaxQueueWait")

		_, err := a.Admit(t.Context(), "k")
		assert.ErrorIs(t, err, ErrClosed, "Admit after Close gets ErrClosed")
		assert.Equal(t, 1, a.InFlight(), "a ticket out before Close stays valid")
		held.Release()
		assert.Zero(t, a.InFlight())
		assert.NotPanics(t, a.Close, "Close is idempotent: a second Close (a signal handler and a defer, say) must be safe")
		_, err = a.Admit(t.Context(), "k")
		assert.ErrorIs(t, err, ErrClosed, "and the Admitter stays closed")
	})
}

func TestAdmitChecksClosedFirst(t *testing.T) {
	asked := false
	a := newAdmitter(t, Config{
		Limiter: limiterFunc(func(context.Context, string) (Decision, error) {
			asked = true
			return Decision{RetryAfter: time.Second}, nil
		}),
		MaxConcurrent: 1,
	})
	a.Close()
	_, err := a.Admit(t.Context(), "k")
	assert.ErrorIs(t, err, ErrClosed, "a closed Admitter says it is closed, whatever the tenant's quota")
	assert.False(t, asked, "after Close the limiter should not even be asked (it may spend a token)")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = a.Admit(ctx, "k")
	assert.ErrorIs(t, err, ErrClosed, "closed is checked first, before the caller's context")
	assert.NotErrorIs(t, err, context.Canceled)
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"no slots", Config{Limiter: allowAll, MaxConcurrent: 0}},
		{"negative slots", Config{Limiter: allowAll, MaxConcurrent: -1}},
		{"negative queue wait", Config{Limiter: allowAll, MaxConcurrent: 1, MaxQueueWait: -time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, err := New(c.cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, a)
		})
	}
}
