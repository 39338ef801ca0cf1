package bridge

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests use gates (channels) to hold a blocking call open, and synctest's
// fake clock for every timeout: no sleeps to wait for another goroutine.

var errExport = errors.New("export failed")

// late collects the outcomes WithOnLate reports.
type late struct {
	mu  sync.Mutex
	got []Outcome
}

func (l *late) record(o Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, o)
}

func (l *late) outcomes() []Outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Outcome(nil), l.got...)
}

func newBridge(t *testing.T, capacity int, opts ...Option) *Bridge {
	t.Helper()
	b, err := New(capacity, opts...)
	require.NoError(t, err)
	require.NotNil(t, b, "New returned nil")
	return b
}

// closeBridge drains the bridge at the end of a test, so no work outlives it.
func closeBridge(t *testing.T, b *Bridge) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	assert.NoError(t, b.Close(ctx), "Close should wait for the running calls")
	assert.Zero(t, b.Pending(), "Pending should be 0 once Close has returned: Close returned while calls were still running, or Pending missed a call that ended")
	outlast(b)
}

// outlast lets fake time run past calls that a broken Close left running.
// A bubble's clock stops once the test's goroutine exits, so they would
// otherwise abort the whole package with a deadlock panic instead of the
// test failing by name. It does nothing when nothing is running.
func outlast(b *Bridge) {
	if b.Pending() != 0 {
		time.Sleep(time.Hour)
	}
}

// waiting is the context of a caller prepared to wait as long as it takes.
// An hour of fake time stands in for "forever", so an outcome that never
// arrives fails the test by name instead of deadlocking the bubble.
func waiting(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
	t.Cleanup(cancel)
	return ctx
}

// doneContext is a context that ended before the call: the error it must
// produce, and the other cause's error it must not.
type doneContext struct {
	name      string
	ctx       func(t *testing.T) context.Context
	want, not error
}

var doneContexts = []doneContext{
	{"already cancelled", func(t *testing.T) context.Context {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		return ctx
	}, context.Canceled, context.DeadlineExceeded},
	{"deadline already passed", func(t *testing.T) context.Context {
		ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
		t.Cleanup(cancel)
		return ctx
	}, context.DeadlineExceeded, context.Canceled},
}

type callResult struct {
	v   string
	err error
	at  time.Duration
}

func callAsync(ctx context.Context, b *Bridge, start time.Time, fn func(context.Context) (string, error)) <-chan callResult {
	out := make(chan callResult, 1)
	go func() {
		v, err := Call(ctx, b, fn)
		out <- callResult{v, err, time.Since(start)}
	}()
	return out
}

// TestPermitStaysWithRunningWork is the scenario the bridge exists for.
func TestPermitStaysWithRunningWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		b := newBridge(t, 1, WithOnLate(lateOutcomes.record))
		start := time.Now()
		gate := make(chan struct{})

		ctx1, cancel1 := context.WithTimeout(t.Context(), time.Second)
		defer cancel1()
		first := callAsync(ctx1, b, start, func(context.Context) (string, error) {
			<-gate // a blocking library call that ignores its context
			return "exported", nil
		})
		r1 := <-first
		assert.ErrorIs(t, r1.err, context.DeadlineExceeded, "the first caller stops waiting at its deadline")
		assert.Equal(t, time.Second, r1.at)
		assert.Equal(t, 1, b.Pending(), "its call is still running after the caller left")

		var secondStarted atomic.Bool
		ctx2, cancel2 := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel2()
		r2 := <-callAsync(ctx2, b, start, func(context.Context) (string, error) {
			secondStarted.Store(true)
			return "second", nil
		})
		assert.ErrorIs(t, r2.err, context.DeadlineExceeded, "a second call waits for the permit and times out")
		assert.False(t, secondStarted.Load(),
			"the second call must not start while the first still runs: the permit belongs to the running work, not to the caller who left")

		time.Sleep(2 * time.Second)
		close(gate)
		closeBridge(t, b)
		assert.Equal(t, 0, b.Pending())
		got := lateOutcomes.outcomes()
		require.Len(t, got, 1, "the first call's outcome arrived after its caller left: it must be reported, not dropped")
		assert.NoError(t, got[0].Err)
		assert.Equal(t, 3500*time.Millisecond, got[0].Duration, "Duration runs from when fn started to when it returned")
	})
}

func TestCallReturnsTheResultWithTheCallersValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		type key struct{}
		var lateOutcomes late
		b := newBridge(t, 2, WithOnLate(lateOutcomes.record))
		ctx := context.WithValue(waiting(t), key{}, "tenant-7")
		v, err := Call(ctx, b, func(ctx context.Context) (string, error) {
			s, _ := ctx.Value(key{}).(string)
			return "report for " + s, nil
		})
		require.NoError(t, err)
		assert.Equal(t, "report for tenant-7", v, "fn sees the caller's context values (request ID, tenant)")
		closeBridge(t, b)
		assert.Empty(t, lateOutcomes.outcomes(), "a caller that waited got its result: nothing is late")
	})
}

func TestCallReturnsFnsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBridge(t, 1)
		_, err := Call(waiting(t), b, func(context.Context) (int, error) { return 0, errExport })
		assert.ErrorIs(t, err, errExport)
		closeBridge(t, b)
	})
}

func TestCallWithADoneContextNeverStartsFn(t *testing.T) {
	for _, c := range doneContexts {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var lateOutcomes late
				b := newBridge(t, 2, WithOnLate(lateOutcomes.record))
				ctx := c.ctx(t)
				var started atomic.Int32
				// A permit is free and ctx is done: a select may pick either,
				// so repeat until both orders have happened.
				for round := range 64 {
					_, err := Call(ctx, b, func(context.Context) (int, error) {
						started.Add(1)
						return round, nil
					})
					synctest.Wait() // had fn been started, it has run by now
					require.Zero(t, started.Load(),
						"round %d: ctx had ended before Call, yet fn started: work nobody waits for, holding a permit", round)
					require.ErrorIs(t, err, c.want, "round %d: Call should return ctx.Err()", round)
					require.NotErrorIs(t, err, c.not, "round %d", round)
				}
				assert.Zero(t, b.Pending())
				closeBridge(t, b)
				assert.Empty(t, lateOutcomes.outcomes(), "fn never ran, so nothing can be late")
			})
		})
	}
}

func TestWorkIsNotCancelledWithItsCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		b := newBridge(t, 1, WithOnLate(lateOutcomes.record))
		ctx, cancel := context.WithCancel(t.Context())
		var fnErr atomic.Value
		res := callAsync(ctx, b, time.Now(), func(ctx context.Context) (string, error) {
			time.Sleep(2 * time.Second)
			fnErr.Store(errors.Join(ctx.Err(), errors.New("checked"))) // what fn saw after its caller left
			return "done anyway", nil
		})
		time.Sleep(time.Second)
		cancel()
		assert.ErrorIs(t, (<-res).err, context.Canceled, "the caller gets its own cancellation back at once")
		closeBridge(t, b)
		seen, _ := fnErr.Load().(error)
		require.NotNil(t, seen)
		assert.NotErrorIs(t, seen, context.Canceled,
			"fn gets the caller's values but not its cancellation: work that will run anyway must not be half-cancelled")
		require.Len(t, lateOutcomes.outcomes(), 1)
	})
}

func TestWorkIsNotCutShortByTheCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		b := newBridge(t, 1, WithOnLate(lateOutcomes.record), WithWorkTimeout(5*time.Second))
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		var workDeadline time.Time
		_, err := Call(ctx, b, func(ctx context.Context) (string, error) {
			workDeadline, _ = ctx.Deadline()
			<-ctx.Done() // a call that honours its context runs until its own budget ends
			return "", ctx.Err()
		})
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller stops waiting at its own deadline")
		assert.Equal(t, time.Second, time.Since(start))
		closeBridge(t, b)
		assert.Equal(t, start.Add(5*time.Second), workDeadline,
			"fn's deadline is its own budget (WithWorkTimeout: 5 s), not the caller's (1 s): a caller leaving must not cut the work short")
		got := lateOutcomes.outcomes()
		require.Len(t, got, 1)
		assert.ErrorIs(t, got[0].Err, context.DeadlineExceeded, "the work ended at its own deadline")
		assert.Equal(t, 5*time.Second, got[0].Duration)
	})
}

func TestLateErrorIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		b := newBridge(t, 1, WithOnLate(lateOutcomes.record))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := Call(ctx, b, func(context.Context) (string, error) {
			time.Sleep(3 * time.Second)
			return "", errExport
		})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		closeBridge(t, b)
		got := lateOutcomes.outcomes()
		require.Len(t, got, 1)
		assert.ErrorIs(t, got[0].Err, errExport, "a failure nobody waited for is still an outcome to record")
		assert.Equal(t, 3*time.Second, got[0].Duration)
	})
}

func TestLateDurationExcludesTheWaitForAPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		b := newBridge(t, 1, WithOnLate(lateOutcomes.record))
		start := time.Now()
		first := callAsync(waiting(t), b, start, func(context.Context) (string, error) {
			time.Sleep(2 * time.Second) // holds the only permit until 2 s
			return "first", nil
		})
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), 4*time.Second)
		defer cancel()
		second := <-callAsync(ctx, b, start, func(context.Context) (string, error) {
			time.Sleep(3 * time.Second) // gets the permit at 2 s, returns at 5 s
			return "second", nil
		})
		require.ErrorIs(t, second.err, context.DeadlineExceeded, "the second caller leaves at its deadline (4 s)")
		assert.Equal(t, "first", (<-first).v)
		closeBridge(t, b)
		got := lateOutcomes.outcomes()
		require.Len(t, got, 1, "the second call finished after its caller left")
		assert.Equal(t, 3*time.Second, got[0].Duration,
			"Duration is how long fn ran (2 s to 5 s), not how long since its caller arrived (0 s to 5 s)")
	})
}

func TestPanicBecomesAnErrorAndReturnsThePermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBridge(t, 1)
		_, err := Call(waiting(t), b, func(context.Context) (string, error) { panic("driver bug") })
		assert.ErrorIs(t, err, ErrPanic, "a panic in fn must not crash the process; it becomes an error")
		assert.Equal(t, 0, b.Pending())
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		v, err := Call(ctx, b, func(context.Context) (string, error) { return "next", nil })
		require.NoError(t, err, "the panicking call must have returned its permit")
		assert.Equal(t, "next", v)
		closeBridge(t, b)
	})
}

func TestPanicAfterTheCallerLeftIsReportedLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		b := newBridge(t, 1, WithOnLate(lateOutcomes.record))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := Call(ctx, b, func(context.Context) (string, error) {
			time.Sleep(2 * time.Second)
			panic("late driver bug")
		})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		closeBridge(t, b)
		got := lateOutcomes.outcomes()
		require.Len(t, got, 1)
		assert.ErrorIs(t, got[0].Err, ErrPanic)
	})
}

func TestPendingCountsRunningWorkNotWaitingCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBridge(t, 1)
		gate := make(chan struct{})
		start := time.Now()
		first := callAsync(waiting(t), b, start, func(context.Context) (string, error) { <-gate; return "1", nil })
		synctest.Wait()
		second := callAsync(waiting(t), b, start, func(context.Context) (string, error) { return "2", nil })
		synctest.Wait()
		assert.Equal(t, 1, b.Pending(), "one call runs; the other waits for a permit and is not pending work")
		close(gate)
		assert.Equal(t, "1", (<-first).v)
		assert.Equal(t, "2", (<-second).v)
		assert.Equal(t, 0, b.Pending(), "Pending goes back to zero when the work returns")
		closeBridge(t, b)
	})
}

func TestCloseWaitsForRunningWork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBridge(t, 2)
		defer outlast(b)
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		res := callAsync(ctx, b, start, func(context.Context) (string, error) {
			time.Sleep(5 * time.Second)
			return "finished", nil
		})
		<-res // the caller left at 1 s; the work runs until 5 s

		short, cancelShort := context.WithTimeout(t.Context(), time.Second)
		defer cancelShort()
		assert.ErrorIs(t, b.Close(short), context.DeadlineExceeded, "Close with too short a budget says the work is still running")
		assert.Equal(t, 2*time.Second, time.Since(start))

		require.NoError(t, b.Close(waiting(t)), "Close again waits for the running work")
		assert.Equal(t, 5*time.Second, time.Since(start), "Close returns when the last call returns")
		assert.Equal(t, 0, b.Pending())
	})
}

func TestCallAfterCloseIsRejected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBridge(t, 1)
		require.NoError(t, b.Close(waiting(t)))
		called := false
		_, err := Call(waiting(t), b, func(context.Context) (int, error) { called = true; return 1, nil })
		assert.ErrorIs(t, err, ErrClosed)
		assert.False(t, called, "fn must not run after Close")
		assert.NoError(t, b.Close(waiting(t)), "Close twice is safe")
	})
}

func TestCloseRejectsCallersWaitingForAPermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBridge(t, 1)
		gate := make(chan struct{})
		start := time.Now()
		running := callAsync(waiting(t), b, start, func(context.Context) (string, error) { <-gate; return "ran", nil })
		synctest.Wait()
		queued := callAsync(waiting(t), b, start, func(context.Context) (string, error) { return "never", nil })
		synctest.Wait()
		closed := make(chan error, 1)
		closeCtx := waiting(t)
		go func() { closed <- b.Close(closeCtx) }()
		w := <-queued
		assert.ErrorIs(t, w.err, ErrClosed, "a caller still waiting for a permit is turned away by Close")
		close(gate)
		assert.Equal(t, "ran", (<-running).v, "running work finishes normally")
		assert.NoError(t, <-closed)
	})
}

func TestCloseWithADoneContextStillCloses(t *testing.T) {
	for _, c := range doneContexts {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBridge(t, 2)
				start := time.Now()
				gate := make(chan struct{})
				running := callAsync(waiting(t), b, start, func(context.Context) (string, error) { <-gate; return "ran", nil })
				synctest.Wait()

				err := b.Close(c.ctx(t))
				assert.ErrorIs(t, err, c.want, "a call is still running and Close's ctx had already ended: Close should say so")
				assert.NotErrorIs(t, err, c.not)
				assert.Equal(t, time.Duration(0), time.Since(start), "with no time left to wait, Close returns at once")

				var called atomic.Bool
				_, err = Call(waiting(t), b, func(context.Context) (int, error) { called.Store(true); return 1, nil })
				assert.ErrorIs(t, err, ErrClosed, "Close closes even when it has no time left to wait: new calls are rejected")
				assert.False(t, called.Load(), "fn must not run after Close")

				close(gate)
				assert.Equal(t, "ran", (<-running).v, "the running call finishes normally")
				assert.NoError(t, b.Close(waiting(t)), "Close again: nothing is running now")
			})
		})
	}
}

func TestCloseOfAnIdleBridgeSucceedsWhateverItsContext(t *testing.T) {
	for _, c := range doneContexts {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newBridge(t, 1)
				_, err := Call(waiting(t), b, func(context.Context) (int, error) { return 1, nil })
				require.NoError(t, err, "one call, run to its end, before the bridge is closed")
				synctest.Wait() // and its worker's bookkeeping after it, however the bridge orders the two
				ctx := c.ctx(t)
				// Nothing runs and ctx is done: a select may pick either, so
				// repeat (Close is safe to call again) until both orders happen.
				for round := range 64 {
					require.NoError(t, b.Close(ctx),
						"round %d: nothing is running, so Close has nothing to wait for: a ctx that has ended is no failure", round)
				}
			})
		})
	}
}

func TestCloseWaitsForLateOutcomesToBeReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		reported := make(chan struct{})
		b := newBridge(t, 1, WithOnLate(func(o Outcome) {
			time.Sleep(time.Second) // writing the log line takes a while
			lateOutcomes.record(o)
			close(reported)
		}))
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := Call(ctx, b, func(context.Context) (string, error) { time.Sleep(2 * time.Second); return "done", nil })
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller leaves at 1 s; its call runs until 2 s")

		require.NoError(t, b.Close(waiting(t)), "Close should wait for the running call")
		closedAt, reportedBeforeClose := time.Since(start), len(lateOutcomes.outcomes())
		select { // outlast a report that Close did not wait for
		case <-reported:
		case <-time.After(time.Hour):
		}
		assert.Equal(t, 1, reportedBeforeClose,
			"Close returned before the late outcome was reported: after Close returns, no callback may still be running")
		assert.Equal(t, 3*time.Second, closedAt, "fn returns at 2 s and its report takes until 3 s: Close returns then")
	})
}

func TestWorkTimeoutStartsWhenTheWorkStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBridge(t, 1, WithWorkTimeout(2*time.Second))
		start := time.Now()
		gate := make(chan struct{})
		first := callAsync(waiting(t), b, start, func(context.Context) (string, error) { <-gate; return "1", nil })
		synctest.Wait()
		var deadline time.Time
		second := callAsync(waiting(t), b, start, func(ctx context.Context) (string, error) {
			deadline, _ = ctx.Deadline()
			<-ctx.Done()
			return "", ctx.Err()
		})
		time.Sleep(3 * time.Second)
		close(gate) // the second call gets the permit at 3 s
		<-first
		r := <-second
		assert.ErrorIs(t, r.err, context.DeadlineExceeded, "WithWorkTimeout bounds the work")
		assert.Equal(t, start.Add(5*time.Second), deadline, "the work's budget starts when fn starts (3 s), not when the caller arrived (0 s)")
		assert.Equal(t, 5*time.Second, r.at)
		closeBridge(t, b)
	})
}

func TestOutcomeIDsAreUnique(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		b := newBridge(t, 4, WithOnLate(lateOutcomes.record))
		// Two waves of four abandoned calls; the second starts after the
		// first has finished, so IDs must stay unique over time, not only
		// among calls that run together.
		for range 2 {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					_, _ = Call(ctx, b, func(context.Context) (int, error) { time.Sleep(2 * time.Second); return 0, nil })
				})
			}
			wg.Wait()
			cancel()
			time.Sleep(2 * time.Second) // the wave's calls finish
		}
		closeBridge(t, b)
		ids := map[uint64]bool{}
		for _, o := range lateOutcomes.outcomes() {
			ids[o.ID] = true
		}
		assert.Len(t, ids, 8, "every late outcome carries its own operation ID, for the life of the Bridge")
	})
}

// When a permit frees at the same instant the waiting caller's deadline
// fires, either may win. Whoever wins, the permit must not be lost.
// Repeating the race makes both orders happen.
func TestPermitIsNeverLostWhenTheCallerGivesUpAsItIsGranted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBridge(t, 1)
		for i := range 200 {
			holder := callAsync(waiting(t), b, time.Now(), func(context.Context) (string, error) {
				time.Sleep(time.Second)
				return "held", nil
			})
			synctest.Wait()
			ctx, cancel := context.WithTimeout(t.Context(), time.Second) // ends as the permit frees
			_, _ = Call(ctx, b, func(context.Context) (int, error) { return 0, nil })
			cancel()
			<-holder
			synctest.Wait()
			require.Equal(t, 0, b.Pending(), "round %d", i)
			probe, cancelProbe := context.WithTimeout(t.Context(), time.Millisecond)
			_, err := Call(probe, b, func(context.Context) (int, error) { return 0, nil })
			cancelProbe()
			require.NoError(t, err, "round %d: with nothing running a call must get the permit at once: a permit was lost between acquiring it and handing it to the work", i)
		}
		closeBridge(t, b)
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []struct {
		name     string
		capacity int
		opts     []Option
	}{
		{"zero capacity", 0, nil},
		{"negative capacity", -1, nil},
		{"negative work timeout", 1, []Option{WithWorkTimeout(-time.Second)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := New(c.capacity, c.opts...)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, b)
		})
	}
}

// When fn returns at the same instant its caller's deadline fires, either
// may be first. Whoever is, the outcome must reach exactly one of them: the
// caller or onLate. Repeating the race makes both orders happen.
func TestOutcomeIsNeverLostWhenTheCallerLeavesAsItFinishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lateOutcomes late
		b := newBridge(t, 1, WithOnLate(lateOutcomes.record))
		delivered := 0
		for round := range 200 {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			v, err := Call(ctx, b, func(context.Context) (int, error) {
				time.Sleep(time.Second) // returns as the caller's deadline fires
				return round, nil
			})
			cancel()
			synctest.Wait() // a late outcome, if there is one, has been reported by now
			if err == nil {
				require.Equal(t, round, v, "round %d", round)
				delivered++
			} else {
				require.ErrorIs(t, err, context.DeadlineExceeded, "round %d: a caller that did not get the result gets ctx.Err()", round)
			}
			require.Equal(t, round+1, delivered+len(lateOutcomes.outcomes()),
				"round %d: each outcome must reach exactly one of the caller and onLate; this one reached neither or both", round)
		}
		closeBridge(t, b)
	})
}
