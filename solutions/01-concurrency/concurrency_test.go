package concurrency

import (
	"context"
	"errors"
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

// inFlight records how many calls run at once and the most there ever were.
type inFlight struct {
	mu       sync.Mutex
	now, max int
}

func (f *inFlight) enter() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now++
	f.max = max(f.max, f.now)
}

func (f *inFlight) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now--
}

func (f *inFlight) peak() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.max
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
			flight.enter()
			defer flight.leave()
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
		err := FanOut(t.Context(), seq(2), 2, func(ctx context.Context, i int) error {
			if i == 0 {
				time.Sleep(time.Second)
				return first
			}
			<-ctx.Done()
			time.Sleep(time.Second) // the sibling takes a while to give up, then fails its own way
			return later
		})
		require.ErrorIs(t, err, first, "the error that happened first is the cause; later ones are fallout")
		assert.NotErrorIs(t, err, later)
	})
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
		var running atomic.Int32
		start := time.Now()
		err := FanOut(t.Context(), seq(3), 3, func(ctx context.Context, i int) error {
			running.Add(1)
			defer running.Add(-1)
			if i == 0 {
				time.Sleep(time.Millisecond) // by now all three calls have started
				return boom
			}
			<-ctx.Done()
			time.Sleep(time.Second) // cleanup after cancellation takes time
			return ctx.Err()
		})
		require.ErrorIs(t, err, boom)
		assert.Zero(t, running.Load(),
			"FanOut returned while started calls were still running: they leak, and may write to memory the caller reuses")
		assert.Equal(t, time.Second+time.Millisecond, time.Since(start), "FanOut should return as soon as the last started call returns")
	})
}

func TestFanOutRejectsInvalidLimit(t *testing.T) {
	for _, limit := range []int{0, -1} {
		err := FanOut(t.Context(), seq(3), limit, func(context.Context, int) error {
			t.Errorf("fn called with limit %d", limit)
			return nil
		})
		assert.ErrorIs(t, err, ErrInvalidLimit, "limit %d should be refused with ErrInvalidLimit before any call", limit)
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
			flight.enter()
			defer flight.leave()
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
