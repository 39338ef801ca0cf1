package admission

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Inside a synctest bubble time.Now() is a fake clock that only moves when
// every goroutine is blocked (time.Sleep), so refill arithmetic is exact.

func newBucket(t *testing.T, rate float64, burst int) *TokenBucket {
	t.Helper()
	tb, err := NewTokenBucket(rate, burst)
	require.NoError(t, err)
	require.NotNil(t, tb, "NewTokenBucket returned nil")
	return tb
}

// allowed counts how many of n requests for key are allowed right now.
func allowed(t *testing.T, l Limiter, key string, n int) int {
	t.Helper()
	got := 0
	for range n {
		d, err := l.Allow(t.Context(), key)
		require.NoError(t, err)
		if d.Allowed {
			got++
		}
	}
	return got
}

func TestTokenBucketStartsFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 1, 5)
		for want := 4; want >= 0; want-- {
			d, err := tb.Allow(t.Context(), "tenant")
			require.NoError(t, err)
			require.True(t, d.Allowed, "a new bucket starts full: the first 5 requests are allowed")
			assert.Equal(t, want, d.Remaining, "Remaining counts whole tokens left after this request")
			assert.Zero(t, d.RetryAfter, "an allowed request has RetryAfter 0")
		}
		d, err := tb.Allow(t.Context(), "tenant")
		require.NoError(t, err)
		assert.False(t, d.Allowed, "the 6th request within the same instant exceeds burst 5")
		assert.Zero(t, d.Remaining, "a refused request has Remaining 0")
	})
}

func TestTokenBucketRefusedRequestTakesNoToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 10, 1) // one token every 100ms
		require.Equal(t, 1, allowed(t, tb, "k", 1))
		// Hammer it while empty: refusals must not dig a hole.
		require.Zero(t, allowed(t, tb, "k", 50))
		time.Sleep(100 * time.Millisecond)
		assert.Equal(t, 1, allowed(t, tb, "k", 1),
			"100ms after the last allowed request one token is back, however many refusals happened meanwhile")
	})
}

func TestTokenBucketRefillsLazilyOverTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 10, 5)
		require.Equal(t, 5, allowed(t, tb, "k", 5))
		time.Sleep(300 * time.Millisecond)
		assert.Equal(t, 3, allowed(t, tb, "k", 10), "300ms at 10 tokens/s refills exactly 3 tokens")
		time.Sleep(50 * time.Millisecond)
		assert.Zero(t, allowed(t, tb, "k", 1), "half a token is not a token")
		time.Sleep(50 * time.Millisecond)
		assert.Equal(t, 1, allowed(t, tb, "k", 2), "two halves make one token")
	})
}

func TestTokenBucketNeverRefillsAboveBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 100, 3)
		require.Equal(t, 3, allowed(t, tb, "k", 3))
		time.Sleep(time.Hour) // 360,000 tokens' worth of time
		assert.Equal(t, 3, allowed(t, tb, "k", 10), "however long a tenant was idle, it gets at most burst at once")
	})
}

func TestTokenBucketKeepsOneBucketPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 1, 2)
		require.Equal(t, 2, allowed(t, tb, "noisy", 5))
		assert.Equal(t, 2, allowed(t, tb, "quiet", 5), "one tenant emptying its bucket must not touch another's")
	})
}

func TestTokenBucketRetryAfterIsTimeUntilNextToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 2, 1) // a token every 500ms
		require.Equal(t, 1, allowed(t, tb, "k", 1))
		d, err := tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		assert.Equal(t, 500*time.Millisecond, d.RetryAfter, "empty bucket at 2 tokens/s: the next token is 500ms away")

		time.Sleep(200 * time.Millisecond)
		d, err = tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		assert.Equal(t, 300*time.Millisecond, d.RetryAfter, "200ms later 0.4 of a token is there: 300ms to go, not another 500ms")

		time.Sleep(d.RetryAfter)
		d, err = tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		assert.True(t, d.Allowed, "retrying after exactly RetryAfter must succeed")
	})
}

func TestTokenBucketRetryAfterCountsOneTokenNotAFullBucket(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 2, 4) // a token every 500ms; an empty bucket is full after 2s
		require.Equal(t, 4, allowed(t, tb, "k", 4))
		time.Sleep(200 * time.Millisecond) // 0.4 of a token is back
		d, err := tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		assert.Equal(t, 300*time.Millisecond, d.RetryAfter,
			"burst 4 at 2 tokens/s with 0.4 of a token back: one token is 300ms away (the bucket is full only in 1.8s)")

		time.Sleep(d.RetryAfter - time.Nanosecond)
		d, err = tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		assert.False(t, d.Allowed, "1ns before RetryAfter the token is not back yet: admitting now exceeds the rate")
		time.Sleep(time.Nanosecond)
		d, err = tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		assert.True(t, d.Allowed, "at exactly RetryAfter the token is back")
	})
}

func TestTokenBucketRemainingCountsWholeTokensOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 10, 3)
		require.Equal(t, 3, allowed(t, tb, "k", 3))
		time.Sleep(290 * time.Millisecond) // 2.9 tokens back
		d, err := tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, 1, d.Remaining, "2.9 tokens minus this request leave 1.9: one whole token remains, not 2")
	})
}

func TestTokenBucketRefillsTheSameInSmallStepsAsInOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 8 tokens/s and steps of 1/64 s: each step refills exactly 1/8 of a
		// token (binary fractions, no float drift), so a token is back every
		// 125ms however often the bucket is asked in between.
		const step = time.Second / 64
		tb := newBucket(t, 8, 8)
		start := time.Now()
		require.Equal(t, 8, allowed(t, tb, "polled", 8))
		require.Equal(t, 8, allowed(t, tb, "idle", 8))
		var at []time.Duration
		for range 64 {
			time.Sleep(step)
			if allowed(t, tb, "polled", 1) == 1 {
				at = append(at, time.Since(start))
			}
		}
		want := []time.Duration{}
		for k := 1; k <= 8; k++ {
			want = append(want, time.Duration(k)*125*time.Millisecond)
		}
		assert.Equal(t, want, at,
			"asked every 1/64 s at 8 tokens/s, a bucket admits at exactly 125ms, 250ms, … 1s; more means an interval was refilled twice")
		assert.Equal(t, 8, allowed(t, tb, "idle", 10), "the same second in one step refills 8 tokens too")
	})
}

func TestTokenBucketRetryAfterRoundsUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 3, 1) // a token every 333.33…ms: not a whole number of nanoseconds
		require.Equal(t, 1, allowed(t, tb, "k", 1))
		d, err := tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		require.False(t, d.Allowed)
		assert.GreaterOrEqual(t, d.RetryAfter, time.Second/3, "RetryAfter rounded down sends the client back too early")
		time.Sleep(d.RetryAfter)
		d, err = tb.Allow(t.Context(), "k")
		require.NoError(t, err)
		assert.True(t, d.Allowed, "a client that waits exactly RetryAfter must be allowed: round up, never down")
	})
}

func TestTokenBucketIsSafeForConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 1, 10)
		var ok atomic.Int32
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				if d, err := tb.Allow(t.Context(), "shared"); err == nil && d.Allowed {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(10), ok.Load(), "100 concurrent requests against burst 10 at one instant: exactly 10 allowed")

		time.Sleep(10 * time.Second) // full again: a sweep is due, and races with the Allows below
		ok.Store(0)
		for i := range 100 {
			wg.Go(func() {
				if d, err := tb.Allow(t.Context(), "shared"); err == nil && d.Allowed {
					ok.Add(1)
				}
				_, _ = tb.Allow(t.Context(), fmt.Sprintf("own-%d", i))
			})
		}
		wg.Wait()
		assert.Equal(t, int32(10), ok.Load(), "refilled to burst 10 and asked 100 times at once: exactly 10 allowed, sweep or no sweep")
		assert.Equal(t, 101, tb.Len(), "the shared key and 100 new ones hold state; none of them is full")
	})
}

func TestNewTokenBucketRejectsBadConfig(t *testing.T) {
	for _, c := range []struct {
		name  string
		rate  float64
		burst int
	}{
		{"zero rate", 0, 1},
		{"negative rate", -1, 1},
		{"zero burst", 1, 0},
		{"negative burst", 1, -5},
		{"NaN rate", math.NaN(), 1},
		{"infinite rate", math.Inf(1), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb, err := NewTokenBucket(c.rate, c.burst)
			assert.ErrorIs(t, err, ErrInvalidConfig, "NewTokenBucket(%v, %d) should be refused", c.rate, c.burst)
			assert.Nil(t, tb)
		})
	}
}

// An empty bucket at rate 1 and burst 4 is full again 4s later: its refill time.
const refillTime = 4 * time.Second

func TestTokenBucketForgetsBucketsThatAreFullAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 1, 4)
		for i := range 100 {
			require.Equal(t, 4, allowed(t, tb, fmt.Sprintf("tenant-%d", i), 4))
		}
		require.Equal(t, 100, tb.Len(), "100 tenants with empty buckets hold state")

		time.Sleep(refillTime) // every bucket is full again, exactly now
		d, err := tb.Allow(t.Context(), "tenant-7")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, 1, tb.Len(),
			"a full bucket is the same as a new one: one refill time after every tenant went idle, the next Allow leaves only its own key")
		assert.Equal(t, 3, d.Remaining, "tenant-7's bucket was full again: 4 tokens, minus this request")
	})
}

func TestTokenBucketNeverForgetsABucketThatIsNotFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 1, 4)
		require.Equal(t, 4, allowed(t, tb, "idle", 4)) // full again at 4s
		time.Sleep(time.Nanosecond)
		require.Equal(t, 4, allowed(t, tb, "nearly", 4)) // full again at 4s + 1ns
		time.Sleep(2*time.Second - time.Nanosecond)
		require.Equal(t, 4, allowed(t, tb, "half", 4)) // 2 tokens back at 4s

		time.Sleep(refillTime - 2*time.Second) // now 4s: a sweep is due
		require.Equal(t, 1, allowed(t, tb, "probe", 1))
		assert.Equal(t, 3, tb.Len(), "at 4s only the bucket that is full again is forgotten: nearly, half and probe remain")

		d, err := tb.Allow(t.Context(), "nearly")
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, 2, d.Remaining,
			"1ns short of full is not full: forgetting the bucket would hand out a fresh 4 tokens instead of the 3.999999999 refilled")
		assert.Equal(t, 2, allowed(t, tb, "half", 4), "half refilled 2 tokens in 2s; a forgotten bucket would hand out 4")
	})
}

func TestTokenBucketSweepsAtMostOncePerRefillTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tb := newBucket(t, 1, 4)
		require.Equal(t, 4, allowed(t, tb, "a", 4)) // full again at 4s
		time.Sleep(2 * time.Second)
		require.Equal(t, 4, allowed(t, tb, "b", 4)) // full again at 6s

		// 4s: the first sweep forgets a and keeps b; c is full again at 5s.
		time.Sleep(2 * time.Second)
		require.Equal(t, 1, allowed(t, tb, "c", 1))
		require.Equal(t, 2, tb.Len(), "at 4s a is full again and forgotten; b is not")

		time.Sleep(3 * time.Second) // 7s: b and c are full, but the last sweep was 3s ago
		require.Equal(t, 1, allowed(t, tb, "d", 1))
		assert.Equal(t, 3, tb.Len(),
			"sweeping walks every tenant: it may run at most once per refill time (4s), so at 7s b and c are still held")

		time.Sleep(time.Second) // 8s: a refill time since the last sweep
		require.Equal(t, 1, allowed(t, tb, "d", 1))
		assert.Equal(t, 1, tb.Len(), "at 8s the second sweep forgets b and c, which are full; d has just spent a token")
	})
}
