package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewRejectsBadConfig(t *testing.T) {
	_, err := New(nil)
	assert.ErrorIs(t, err, ErrInvalidConfig, "New(nil)")

	okAIMD := AIMDConfig{Min: 1, Max: 10, Initial: 5}
	alg, err := NewAIMD(okAIMD)
	require.NoError(t, err, "a valid AIMD config; zero Increase and Backoff take the defaults")
	require.NotNil(t, alg)
	for _, tc := range []struct {
		name string
		edit func(*AIMDConfig)
	}{
		{"Min 0: a limit of 0 admits nothing, so no sample could ever raise it", func(c *AIMDConfig) { c.Min = 0 }},
		{"Max below Min", func(c *AIMDConfig) { c.Max = 0 }},
		{"Initial below Min", func(c *AIMDConfig) { c.Min, c.Initial = 3, 2 }},
		{"Initial above Max", func(c *AIMDConfig) { c.Initial = 11 }},
		{"negative Increase", func(c *AIMDConfig) { c.Increase = -1 }},
		{"Backoff 1 never backs off", func(c *AIMDConfig) { c.Backoff = 1 }},
		{"Backoff above 1 grows on a drop", func(c *AIMDConfig) { c.Backoff = 1.5 }},
		{"negative Backoff", func(c *AIMDConfig) { c.Backoff = -0.5 }},
	} {
		t.Run("AIMD/"+tc.name, func(t *testing.T) {
			cfg := okAIMD
			tc.edit(&cfg)
			_, err := NewAIMD(cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
		})
	}

	okGradient := GradientConfig{Min: 1, Max: 10, Initial: 5}
	g, err := NewGradient(okGradient)
	require.NoError(t, err, "a valid Gradient config; zero values other than Min, Max and Initial take the defaults")
	require.NotNil(t, g)
	for _, tc := range []struct {
		name string
		edit func(*GradientConfig)
	}{
		{"Min 0", func(c *GradientConfig) { c.Min = 0 }},
		{"Max below Min", func(c *GradientConfig) { c.Max = 0 }},
		{"Initial outside [Min, Max]", func(c *GradientConfig) { c.Initial = 11 }},
		{"Tolerance below 1 shrinks at the provider's best latency", func(c *GradientConfig) { c.Tolerance = 0.9 }},
		{"negative Queue", func(c *GradientConfig) { c.Queue = -1 }},
		{"Smoothing above 1", func(c *GradientConfig) { c.Smoothing = 1.5 }},
		{"negative Smoothing", func(c *GradientConfig) { c.Smoothing = -0.1 }},
		{"negative Window", func(c *GradientConfig) { c.Window = -1 }},
		{"negative LongWindow", func(c *GradientConfig) { c.LongWindow = -time.Second }},
		{"Backoff 1", func(c *GradientConfig) { c.Backoff = 1 }},
	} {
		t.Run("Gradient/"+tc.name, func(t *testing.T) {
			cfg := okGradient
			tc.edit(&cfg)
			_, err := NewGradient(cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
		})
	}
}

func TestAcquireBoundsInFlightAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 10, Initial: 3})
		require.Equal(t, 3, l.Limit(), "the limit starts at Initial")
		acquire(t, l, 3)
		assert.Equal(t, 3, l.InFlight())

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		tok, err := l.Acquire(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "a fourth Acquire at limit 3 waits until its ctx ends")
		assert.Nil(t, tok)
		assert.Equal(t, 3, l.InFlight(), "a failed Acquire holds nothing")
	})
}

func TestDoneHandsThePermitToTheLongestWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 1, Initial: 1})
		held := acquire(t, l, 1)[0]
		start := time.Now()
		first := acquireAsync(t.Context(), l, start)
		synctest.Wait()
		second := acquireAsync(t.Context(), l, start)
		synctest.Wait()
		select {
		case r := <-first:
			t.Fatalf("Acquire returned (%v) while the only permit was held", r.err)
		default:
		}

		time.Sleep(time.Second)
		held.Done(Success)
		synctest.Wait()
		select {
		case r := <-first:
			require.NoError(t, r.err)
			assert.Equal(t, time.Second, r.at, "the waiter is admitted the moment the permit comes back")
			r.tok.Done(Success)
		default:
			t.Fatal("Done did not hand the permit to the first waiter (first come, first served)")
		}
		synctest.Wait()
		r := <-second
		require.NoError(t, r.err)
		r.tok.Done(Success)
		assert.Zero(t, l.InFlight())
	})
}

func TestAcquireReturnsTheCallersOwnErrorWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 1, Initial: 1})
		held := acquire(t, l, 1)[0]
		defer held.Done(Ignored)
		start := time.Now()

		cctx, cancelNow := context.WithCancel(t.Context())
		cancelled := acquireAsync(cctx, l, start)
		dctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		deadline := acquireAsync(dctx, l, start)

		time.Sleep(time.Second)
		cancelNow()
		r := <-cancelled
		require.ErrorIs(t, r.err, context.Canceled, "a caller that cancels while queued gets context.Canceled")
		assert.NotErrorIs(t, r.err, context.DeadlineExceeded, "it cancelled; no deadline passed")
		assert.Equal(t, time.Second, r.at, "at the instant it cancelled")

		r = <-deadline
		require.ErrorIs(t, r.err, context.DeadlineExceeded, "a caller whose deadline passes while queued gets context.DeadlineExceeded")
		assert.NotErrorIs(t, r.err, context.Canceled)
		assert.Equal(t, 3*time.Second, r.at, "at its deadline")
		assert.Equal(t, 1, l.InFlight(), "callers that left hold nothing")

		held.Done(Success)
		assert.Zero(t, l.InFlight(), "no permit was handed to a caller that had left")
	})
}

func TestAcquireWithContextAlreadyDoneTakesNothing(t *testing.T) {
	l := newAIMD(t, AIMDConfig{Min: 1, Max: 10, Initial: 5})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	tok, err := l.Acquire(ctx)
	assert.ErrorIs(t, err, context.Canceled, "a caller that already left is refused even with permits free")
	assert.Nil(t, tok)
	assert.Zero(t, l.InFlight(), "and holds nothing")
}

func TestCancelledWaiterNeverStrandsAPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 1, Initial: 1})
		// The waiter's ctx ends in the same instant the permit is handed to
		// it. Either it holds the permit or nothing; never does the permit
		// belong to nobody. With one P the woken waiter cannot run between
		// cancel and Done, so the two really do land together.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		for round := range 20 {
			held := acquire(t, l, 1)[0]
			ctx, cancel := context.WithCancel(t.Context())
			got := acquireAsync(ctx, l, time.Now())
			synctest.Wait() // queued
			cancel()
			held.Done(Ignored)
			if r := <-got; r.err == nil {
				require.Equal(t, 1, l.InFlight(), "round %d: Acquire succeeded, so the waiter holds the permit", round)
				r.tok.Done(Ignored)
			} else {
				require.ErrorIs(t, r.err, context.Canceled, "round %d", round)
			}
			require.Zero(t, l.InFlight(),
				"round %d: a waiter that left as the permit was handed to it stranded the permit: nobody holds it and nobody can take it", round)
		}
	})
}

func TestDoneIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 10, Initial: 2})
		toks := acquire(t, l, 2)
		time.Sleep(100 * time.Millisecond)
		toks[0].Done(Success)
		toks[0].Done(Success)
		assert.Equal(t, 1, l.InFlight(), "a second Done on one token returned a second permit")
		assert.Equal(t, 2, l.Limit(), "a second Done on one token counted its sample twice: two successes at limit 2 grew the limit")
		toks[1].Done(Success)
		assert.Equal(t, 3, l.Limit(), "the second token's success completes the round trip")
	})
}

func TestEveryOutcomeReturnsThePermit(t *testing.T) {
	for _, o := range []Outcome{Success, Dropped, Ignored} {
		t.Run(o.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newAIMD(t, AIMDConfig{Min: 1, Max: 10, Initial: 1})
				tok := acquire(t, l, 1)[0]
				got := acquireAsync(t.Context(), l, time.Now())
				synctest.Wait()
				tok.Done(o)
				synctest.Wait()
				select {
				case r := <-got:
					require.NoError(t, r.err)
					r.tok.Done(Ignored)
				default:
					t.Fatalf("Done(%v) did not return the permit: the waiter is still queued (in flight %d, limit %d)", o, l.InFlight(), l.Limit())
				}
				assert.Zero(t, l.InFlight(), "Done(%v) must return the permit", o)
			})
		})
	}
}

func TestLimitIncreaseAdmitsEveryWaiterItMakesRoomFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 10, Initial: 1})
		held := acquire(t, l, 1)[0]
		start := time.Now()
		a := acquireAsync(t.Context(), l, start)
		b := acquireAsync(t.Context(), l, start)
		synctest.Wait()
		held.Done(Success) // one round trip at limit 1: the limit becomes 2
		require.Equal(t, 2, l.Limit())
		synctest.Wait()
		for i, ch := range []<-chan acquireResult{a, b} {
			select {
			case r := <-ch:
				require.NoError(t, r.err)
				defer r.tok.Done(Ignored)
			default:
				t.Fatalf("waiter %d still queued at limit 2 with %d in flight: a raised limit must admit waiters, not only the returned permit", i+1, l.InFlight())
			}
		}
		assert.Equal(t, 2, l.InFlight())
	})
}

func TestParallelUseStaysWithinBounds(t *testing.T) {
	seed := testkit.Rand(t).Uint64()
	for _, name := range []string{"AIMD", "Gradient"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const floor, ceiling = 2, 16
				var l *Limiter
				if name == "AIMD" {
					l = newAIMD(t, AIMDConfig{Min: floor, Max: ceiling, Initial: 8})
				} else {
					l = newGradient(t, GradientConfig{Min: floor, Max: ceiling, Initial: 8, Window: 3})
				}
				var held, peak atomic.Int64
				var wg sync.WaitGroup
				for g := range 24 {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(seed, uint64(g)))
						for range 150 {
							ctx, cancel := context.WithTimeout(t.Context(), time.Duration(r.IntN(200))*time.Millisecond)
							tok, err := l.Acquire(ctx)
							cancel()
							if err != nil {
								continue
							}
							n := held.Add(1)
							for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
							}
							if lim := l.Limit(); lim < floor || lim > ceiling {
								t.Errorf("limit %d outside [%d, %d]", lim, floor, ceiling)
							}
							time.Sleep(time.Duration(10+r.IntN(90)) * time.Millisecond)
							held.Add(-1)
							tok.Done([]Outcome{Success, Success, Success, Dropped, Ignored}[r.IntN(5)])
						}
					})
				}
				wg.Wait()
				assert.LessOrEqual(t, peak.Load(), int64(ceiling), "more requests held permits at once than the ceiling")
				assert.Zero(t, l.InFlight(), "every permit came back")
				assert.GreaterOrEqual(t, l.Limit(), floor)
				assert.LessOrEqual(t, l.Limit(), ceiling)
			})
		})
	}
}

func TestOutcomeOfTellsCancellationFromFailure(t *testing.T) {
	boom := errors.New("provider: 503")
	for _, tc := range []struct {
		name string
		err  error
		want Outcome
	}{
		{"no error", nil, Success},
		{"cancelled", context.Canceled, Ignored},
		{"cancelled, wrapped", fmt.Errorf("attempt 2: %w", context.Canceled), Ignored},
		{"deadline", context.DeadlineExceeded, Dropped},
		{"deadline, wrapped", fmt.Errorf("attempt timed out: %w", context.DeadlineExceeded), Dropped},
		{"provider error", boom, Dropped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, OutcomeOf(tc.err), "OutcomeOf(%v): a cancellation says nothing about the provider; a timeout or a failure is overload", tc.err)
		})
	}
}
