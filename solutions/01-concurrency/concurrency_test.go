package concurrency

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every test runs inside a synctest bubble: time.Sleep advances a fake clock
// the moment every goroutine in the bubble is blocked, so "1 s of work" costs
// no wall time and elapsed times are exact.

// inFlight records how many calls run at once and the most there ever were,
// and lets a test outlast calls that an implementation left running.
type inFlight struct {
	mu       sync.Mutex
	now, max int
	returned []chan struct{}
}

// enter records a call starting. Call the func it returns when the call returns.
func (f *inFlight) enter() (leave func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now++
	f.max = max(f.max, f.now)
	done := make(chan struct{})
	f.returned = append(f.returned, done)
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.now--
		close(done)
	}
}

func (f *inFlight) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *inFlight) peak() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max
}

// outlast waits, in fake time, until every call that entered has returned.
// A bubble's clock stops once the test's own goroutine exits, so a call
// still running then would abort the whole package with a deadlock panic;
// outlasting it lets the test fail on its own assertion instead.
func (f *inFlight) outlast() {
	for i := 0; ; i++ {
		f.mu.Lock()
		if i == len(f.returned) {
			f.mu.Unlock()
			return
		}
		done := f.returned[i]
		f.mu.Unlock()
		<-done
	}
}

// errNeverCancelled is what awaitCancel returns when nobody cancelled ctx.
var errNeverCancelled = errors.New("ctx was never cancelled (gave up after an hour)")

// awaitCancel blocks until ctx ends and returns ctx.Err(): a call that
// honours its context and otherwise runs long. The hour bound keeps a bug
// that never cancels from hanging the bubble.
func awaitCancel(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Hour):
		return errNeverCancelled
	}
}

// calls records which items fn was called with, in call order.
type calls struct {
	mu    sync.Mutex
	items []int
}

func (c *calls) add(i int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.items = append(c.items, i)
}

func (c *calls) sorted() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(slices.Values(c.items))
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestFanOutCallsEveryItemOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got calls
		err := FanOut(t.Context(), seq(20), 4, func(_ context.Context, i int) error {
			got.add(i)
			return nil
		})
		require.NoError(t, err, "FanOut should return nil when every call succeeds")
		assert.Equal(t, seq(20), got.sorted(), "fn should be called exactly once for every item")
	})
}

func TestFanOutWithNoItemsReturnsNil(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		err := FanOut(t.Context(), []int{}, 4, func(context.Context, int) error {
			t.Error("fn called with no items")
			return nil
		})
		assert.NoError(t, err, "an empty batch has nothing to fail")
	})
}

func TestFanOutNeverExceedsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var flight inFlight
		start := time.Now()
		err := FanOut(t.Context(), seq(10), 3, func(context.Context, int) error {
			defer flight.enter()()
			time.Sleep(time.Second)
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, 3, flight.peak(),
			"with limit 3 exactly 3 calls should run at once: more is an unbounded fan-out, fewer wastes the limit")
		assert.Equal(t, 4*time.Second, time.Since(start),
			"10 one-second calls, 3 at a time, take 4 rounds: a slot must be reused as soon as a call returns")
	})
}

func TestFanOutFirstErrorCancelsSiblings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		var cancelled atomic.Int32
		start := time.Now()
		err := FanOut(t.Context(), seq(4), 4, func(ctx context.Context, i int) error {
			if i == 0 {
				time.Sleep(time.Second)
				return boom
			}
			select {
			case <-ctx.Done():
				cancelled.Add(1)
				return ctx.Err()
			case <-time.After(time.Hour):
				return nil
			}
		})
		require.ErrorIs(t, err, boom, "FanOut should return the first error, not a sibling's cancellation error")
		assert.Equal(t, int32(3), cancelled.Load(), "the first error should cancel the context every sibling received")
		assert.Equal(t, time.Second, time.Since(start), "siblings should stop when the first error cancels them, not run for their full hour")
	})
}

func TestFanOutReturnsTheFirstErrorNotALaterOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first, later := errors.New("first"), errors.New("later")
		var flight inFlight
		defer flight.outlast()
		start := time.Now()
		err := FanOut(t.Context(), seq(2), 2, func(ctx context.Context, i int) error {
			defer flight.enter()()
			if i == 0 {
				time.Sleep(time.Second)
				return first
			}
			_ = awaitCancel(ctx)
			time.Sleep(time.Second) // the sibling takes a while to give up, then fails its own way
			return later
		})
		require.ErrorIs(t, err, first, "the error that happened first is the cause; later ones are fallout")
		assert.NotErrorIs(t, err, later)
		assert.Equal(t, 2*time.Second, time.Since(start), "FanOut returns when the sibling returns, 1 s after the first error")
	})
}

func TestFanOutReturnsTheCauseNotAnEarlierItemsFallout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("shard 2 is down")
		start := time.Now()
		err := FanOut(t.Context(), seq(3), 3, func(ctx context.Context, i int) error {
			if i == 2 {
				time.Sleep(time.Second)
				return boom
			}
			return awaitCancel(ctx) // items 0 and 1 fail only because item 2 cancelled them
		})
		require.ErrorIs(t, err, boom,
			"FanOut should return the error that happened first (item 2's), not an earlier item's context.Canceled it caused")
		assert.NotErrorIs(t, err, context.Canceled)
		assert.Equal(t, time.Second, time.Since(start))
	})
}

func TestFanOutTreatsACallsOwnContextErrorAsAFailure(t *testing.T) {
	for _, c := range []struct {
		name      string
		own       func(context.Context) (context.Context, context.CancelFunc)
		want, not error
	}{
		{"its own deadline passed", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(ctx, time.Second)
		}, context.DeadlineExceeded, context.Canceled},
		{"its own context was cancelled", func(ctx context.Context) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(ctx)
			time.AfterFunc(time.Second, cancel)
			return ctx, cancel
		}, context.Canceled, context.DeadlineExceeded},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var cancelled atomic.Int32
				start := time.Now()
				err := FanOut(t.Context(), seq(3), 3, func(ctx context.Context, i int) error {
					if i == 0 { // a shard call with a budget of its own, inside the caller's
						callCtx, cancel := c.own(ctx)
						defer cancel()
						<-callCtx.Done()
						return fmt.Errorf("shard 0: %w", callCtx.Err())
					}
					err := awaitCancel(ctx)
					if err != errNeverCancelled {
						cancelled.Add(1)
					}
					return err
				})
				require.ErrorIs(t, err, c.want,
					"item 0 failed with a context error of its own while the caller's ctx was alive: that is the batch's first error")
				assert.NotErrorIs(t, err, c.not)
				assert.Equal(t, int32(2), cancelled.Load(), "that failure should cancel both siblings")
				assert.Equal(t, time.Second, time.Since(start))
			})
		})
	}
}

func TestFanOutStopsStartingNewItemsAfterError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		var got calls
		err := FanOut(t.Context(), seq(6), 1, func(_ context.Context, i int) error {
			got.add(i)
			if i == 1 {
				return boom
			}
			return nil
		})
		require.ErrorIs(t, err, boom)
		assert.Equal(t, []int{0, 1}, got.sorted(), "after the first error no new call may start")
	})
}

func TestFanOutStopsWhenCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var got calls
		err := FanOut(ctx, seq(6), 1, func(_ context.Context, i int) error {
			got.add(i)
			if i == 1 {
				cancel() // the caller gives up while item 1 runs
			}
			return nil
		})
		require.ErrorIs(t, err, context.Canceled, "a caller that cancelled should get ctx.Err() back")
		assert.Equal(t, []int{0, 1}, got.sorted(), "once the caller's ctx ends no new call may start")
	})
}

func TestFanOutWaitsForEveryStartedCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		var flight inFlight
		defer flight.outlast()
		start := time.Now()
		err := FanOut(t.Context(), seq(3), 3, func(ctx context.Context, i int) error {
			defer flight.enter()()
			if i == 0 {
				time.Sleep(time.Millisecond) // by now all three calls have started
				return boom
			}
			err := awaitCancel(ctx)
			time.Sleep(time.Second) // cleanup after cancellation takes time
			return err
		})
		require.ErrorIs(t, err, boom)
		assert.Zero(t, flight.running(),
			"FanOut returned while started calls were still running: they leak, and may write to memory the caller reuses")
		assert.Equal(t, time.Second+time.Millisecond, time.Since(start), "FanOut should return as soon as the last started call returns")
	})
}

func TestFanOutWaitsForStartedCallsWhenTheCallerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		var flight inFlight
		var got calls
		start := time.Now()
		err := FanOut(ctx, seq(4), 2, func(ctx context.Context, i int) error {
			defer flight.enter()()
			got.add(i)
			err := awaitCancel(ctx)
			time.Sleep(500 * time.Millisecond) // closing the upstream connection takes a while
			return err
		})
		returned, running := time.Since(start), flight.running()
		flight.outlast()
		require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline passed: FanOut should report it")
		assert.NotErrorIs(t, err, context.Canceled, "nobody cancelled: the deadline passed")
		assert.Zero(t, running,
			"FanOut returned while calls it started were still running: the caller's deadline ends the batch, not the duty to wait")
		assert.Equal(t, 1500*time.Millisecond, returned, "deadline at 1 s, the started calls' cleanup until 1.5 s")
		assert.Equal(t, []int{0, 1}, got.sorted(), "only the first two items (limit 2) started before the deadline")
	})
}

func TestFanOutWithADoneContextStartsNothing(t *testing.T) {
	for _, c := range doneContexts {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := c.ctx(t)
				// When a slot is free and ctx is done, a select may pick either:
				// repeat so that both orders happen.
				for round := range 64 {
					var got calls
					err := FanOut(ctx, seq(3), 4, func(_ context.Context, i int) error {
						got.add(i)
						return nil
					})
					require.Empty(t, got.sorted(), "round %d: ctx had ended before FanOut was called, yet calls started (free slots are no reason to start)", round)
					require.ErrorIs(t, err, c.want, "round %d: FanOut should return ctx.Err()", round)
					require.NotErrorIs(t, err, c.not, "round %d", round)
				}
			})
		})
	}
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

func TestFanOutRejectsInvalidLimit(t *testing.T) {
	for _, limit := range []int{0, -1} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			err := FanOut(t.Context(), seq(3), limit, func(context.Context, int) error {
				t.Errorf("fn called with limit %d", limit)
				return nil
			})
			assert.ErrorIs(t, err, ErrInvalidLimit, "limit %d should be refused with ErrInvalidLimit before any call", limit)
		})
	}
}

func TestCollectAllKeepsInputOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		items := []int{3, 1, 2} // item i takes i seconds, so they finish 1, 2, 3
		results := CollectAll(t.Context(), items, 3, func(_ context.Context, i int) (int, error) {
			time.Sleep(time.Duration(i) * time.Second)
			return i * 10, nil
		})
		require.Len(t, results, len(items), "CollectAll should return one Result per item")
		for k, r := range results {
			require.NoError(t, r.Err)
			assert.Equal(t, items[k]*10, r.Value, "results[%d] should belong to items[%d], whatever order the calls finished in", k, k)
		}
	})
}

func TestCollectAllFailureCancelsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		results := CollectAll(t.Context(), seq(3), 3, func(ctx context.Context, i int) (string, error) {
			if i == 0 {
				return "", boom
			}
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(time.Second):
				return "ok", nil
			}
		})
		require.Len(t, results, 3)
		assert.ErrorIs(t, results[0].Err, boom, "the failure should be kept in its own Result")
		for _, r := range results[1:] {
			assert.NoError(t, r.Err, "one failure must not cancel the other calls in CollectAll")
			assert.Equal(t, "ok", r.Value)
		}
	})
}

func TestCollectAllNeverExceedsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var flight inFlight
		start := time.Now()
		results := CollectAll(t.Context(), seq(8), 2, func(_ context.Context, i int) (int, error) {
			defer flight.enter()()
			time.Sleep(time.Second)
			return i, nil
		})
		require.Len(t, results, 8)
		assert.Equal(t, 2, flight.peak(), "with limit 2 exactly 2 calls should run at once")
		assert.Equal(t, 4*time.Second, time.Since(start), "8 one-second calls, 2 at a time, take 4 rounds")
	})
}

func TestCollectAllMarksUnstartedItemsWithCtxErr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var got calls
		results := CollectAll(ctx, seq(4), 1, func(_ context.Context, i int) (int, error) {
			got.add(i)
			if i == 1 {
				cancel()
			}
			return i + 100, nil
		})
		require.Len(t, results, 4)
		assert.Equal(t, []int{0, 1}, got.sorted(), "once the caller's ctx ends no new call may start")
		for i, want := range []int{100, 101} {
			assert.NoError(t, results[i].Err, "item %d started before the cancel and should keep its own outcome", i)
			assert.Equal(t, want, results[i].Value)
		}
		for i := 2; i < 4; i++ {
			assert.ErrorIs(t, results[i].Err, context.Canceled, "item %d never started and should carry ctx.Err()", i)
		}
	})
}

func TestCollectAllWaitsForEveryStartedCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running atomic.Int32
		results := CollectAll(t.Context(), seq(4), 4, func(_ context.Context, i int) (int, error) {
			running.Add(1)
			defer running.Add(-1)
			time.Sleep(time.Duration(i+1) * time.Second)
			return i, nil
		})
		assert.Zero(t, running.Load(), "CollectAll returned while calls were still running")
		require.Len(t, results, 4)
		for i, r := range results {
			assert.Equal(t, i, r.Value, "results[%d] should hold its call's value once CollectAll returns", i)
		}
	})
}

func TestCollectAllWhenTheCallersDeadlinePasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		var flight inFlight
		var got calls
		start := time.Now()
		// Item 0 answers at 0.5 s; the others would take an hour. Limit 2:
		// items 0 and 1 start at once, item 2 when item 0 is done, item 3 never.
		results := CollectAll(ctx, seq(4), 2, func(ctx context.Context, i int) (string, error) {
			defer flight.enter()()
			got.add(i)
			took := time.Hour
			if i == 0 {
				took = 500 * time.Millisecond
			}
			select {
			case <-ctx.Done():
				time.Sleep(500 * time.Millisecond) // closing the upstream connection takes a while
				return "", ctx.Err()
			case <-time.After(took):
				return "answer", nil
			}
		})
		returned, running := time.Since(start), flight.running()
		flight.outlast()
		require.Len(t, results, 4, "CollectAll should return one Result per item")
		assert.Zero(t, running, "CollectAll returned while calls it started were still running: they will write into results the caller is reading")
		assert.Equal(t, 1500*time.Millisecond, returned,
			"the running calls got the caller's ctx: its deadline (1 s) ends them, and CollectAll returns when their cleanup is done (1.5 s)")
		assert.Equal(t, []int{0, 1, 2}, got.sorted(), "items 0, 1 and 2 start before the deadline, item 3 never")
		require.NoError(t, results[0].Err, "item 0 finished before the deadline and keeps its answer")
		assert.Equal(t, "answer", results[0].Value)
		for i := 1; i < 4; i++ {
			require.ErrorIs(t, results[i].Err, context.DeadlineExceeded, "results[%d] should carry the caller's ctx.Err()", i)
			assert.NotErrorIs(t, results[i].Err, context.Canceled, "results[%d]: nobody cancelled, the deadline passed", i)
		}
	})
}

func TestCollectAllWithADoneContextStartsNothing(t *testing.T) {
	for _, c := range doneContexts {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := c.ctx(t)
				for round := range 64 {
					var got calls
					results := CollectAll(ctx, seq(3), 4, func(_ context.Context, i int) (int, error) {
						got.add(i)
						return i, nil
					})
					require.Empty(t, got.sorted(), "round %d: ctx had ended before CollectAll was called, yet calls started", round)
					require.Len(t, results, 3, "round %d: one Result per item", round)
					for i, r := range results {
						require.ErrorIs(t, r.Err, c.want, "round %d: results[%d] never started and should carry ctx.Err()", round, i)
						require.NotErrorIs(t, r.Err, c.not, "round %d: results[%d]", round, i)
					}
				}
			})
		})
	}
}

func TestCollectAllRejectsInvalidLimit(t *testing.T) {
	results := CollectAll(t.Context(), seq(3), 0, func(context.Context, int) (int, error) {
		t.Error("fn called with limit 0")
		return 0, nil
	})
	require.Len(t, results, 3, "every item should get a Result, even when the limit is invalid")
	for i, r := range results {
		assert.ErrorIs(t, r.Err, ErrInvalidLimit, "results[%d]", i)
	}
}
