package admission

import (
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
	} {
		t.Run(c.name, func(t *testing.T) {
			tb, err := NewTokenBucket(c.rate, c.burst)
			assert.ErrorIs(t, err, ErrInvalidConfig, "NewTokenBucket(%v, %d) should be refused", c.rate, c.burst)
			assert.Nil(t, tb)
		})
	}
}
