package timeouts

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Backoff is random, so these tests check the distribution's bounds and
// shape over many draws from a seeded source. A failure prints the seed;
// SEED=… replays it.

func TestBackoffIsFullJitterWithinTheCap(t *testing.T) {
	p := Policy{MaxAttempts: 10, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Rand: testkit.Rand(t)}
	caps := map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 4: 800 * time.Millisecond, 5: time.Second, 6: time.Second}
	for attempt := 1; attempt <= 6; attempt++ {
		t.Run(fmt.Sprintf("attempt %d", attempt), func(t *testing.T) {
			ceiling := caps[attempt]
			const n = 2000
			lo, hi, sum := time.Duration(math.MaxInt64), time.Duration(0), 0.0
			for range n {
				d := p.Backoff(attempt)
				lo, hi, sum = min(lo, d), max(hi, d), sum+float64(d)
			}
			require.GreaterOrEqual(t, lo, time.Duration(0), "attempt %d: a backoff is never negative", attempt)
			require.LessOrEqual(t, hi, ceiling, "attempt %d: backoff above min(MaxBackoff, Base·2^(attempt−1)) = %s", attempt, ceiling)
			assert.Less(t, lo, ceiling/10,
				"attempt %d: full jitter draws from [0, %s]; the smallest of %d draws was %s — is the jitter only a band around the interval?", attempt, ceiling, n, lo)
			assert.Greater(t, hi, ceiling*9/10, "attempt %d: the largest of %d draws was %s; the range should reach up to %s", attempt, n, hi, ceiling)
			mean := time.Duration(sum / n)
			assert.InDelta(t, float64(ceiling/2), float64(mean), float64(ceiling)/10,
				"attempt %d: uniform in [0, %s] should average about %s, got %s", attempt, ceiling, ceiling/2, mean)
		})
	}
}

func TestBackoffDoesNotOverflowForLargeAttempts(t *testing.T) {
	p := Policy{MaxAttempts: 1, BaseBackoff: time.Second, MaxBackoff: time.Minute, Rand: testkit.Rand(t)}
	for _, attempt := range []int{30, 63, 64, 65, 100, 1000, math.MaxInt32, math.MaxInt} {
		t.Run(fmt.Sprintf("attempt %d", attempt), func(t *testing.T) {
			hi := time.Duration(0)
			for range 50 {
				d := p.Backoff(attempt)
				require.GreaterOrEqual(t, d, time.Duration(0), "Backoff(%d) = %s: Base·2^(attempt−1) overflowed", attempt, d)
				require.LessOrEqual(t, d, time.Minute, "Backoff(%d) = %s is above MaxBackoff", attempt, d)
				hi = max(hi, d)
			}
			assert.Greater(t, hi, 30*time.Second,
				"Backoff(%d): late attempts are capped at MaxBackoff (1m), so draws should reach well past 30s; the largest of 50 was %s — did Base·2^(attempt−1) wrap to zero?", attempt, hi)
		})
	}
}

func TestBackoffWithSameSeedReplays(t *testing.T) {
	a := Policy{MaxAttempts: 1, BaseBackoff: time.Millisecond, MaxBackoff: time.Second, Rand: rand.New(rand.NewPCG(7, 7))}
	b := Policy{MaxAttempts: 1, BaseBackoff: time.Millisecond, MaxBackoff: time.Second, Rand: rand.New(rand.NewPCG(7, 7))}
	distinct := map[time.Duration]bool{}
	for attempt := 1; attempt <= 20; attempt++ {
		d := a.Backoff(attempt)
		assert.Equal(t, d, b.Backoff(attempt), "the same seed must give the same backoffs, so a failure can be replayed")
		distinct[d] = true
	}
	assert.Greater(t, len(distinct), 10, "20 jittered backoffs should not repeat: is Policy.Rand used?")
}

func TestBackoffReachesBothEndsOfTheRangeExactly(t *testing.T) {
	// top() and bottom() (do_test.go) pin the jitter to the ends of its
	// range: full jitter over [0, cap] must then give exactly cap and 0.
	caps := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i, ceiling := range caps {
		attempt := i + 1
		t.Run(fmt.Sprintf("attempt %d", attempt), func(t *testing.T) {
			high := Policy{MaxAttempts: 10, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Rand: top()}
			low := Policy{MaxAttempts: 10, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, Rand: bottom()}
			assert.Equal(t, ceiling, high.Backoff(attempt),
				"attempt %d: the top of the jitter range is min(MaxBackoff, Base·2^(attempt−1)) itself: [0, cap] includes cap", attempt)
			assert.Equal(t, time.Duration(0), low.Backoff(attempt), "attempt %d: the bottom of the jitter range is 0", attempt)
		})
	}
}

// backoffOf calls p.Backoff(attempt) on its own goroutine, so that a
// Backoff that loops or panics fails this test by name instead of hanging or
// crashing the package. The 2 s bound is real time and only a guard: a
// correct Backoff returns in microseconds.
func backoffOf(t *testing.T, p Policy, attempt int) (d time.Duration, ok bool) {
	t.Helper()
	type result struct {
		d        time.Duration
		panicked any
	}
	out := make(chan result, 1)
	go func() {
		var r result
		defer func() {
			r.panicked = recover()
			out <- r
		}()
		r.d = p.Backoff(attempt)
	}()
	select {
	case r := <-out:
		if r.panicked != nil {
			t.Errorf("Backoff(%d) with BaseBackoff %s, MaxBackoff %s panicked: %v", attempt, p.BaseBackoff, p.MaxBackoff, r.panicked)
			return 0, false
		}
		return r.d, true
	case <-time.After(2 * time.Second):
		t.Errorf("Backoff(%d) with BaseBackoff %s, MaxBackoff %s did not return within 2s: does the doubling loop end?",
			attempt, p.BaseBackoff, p.MaxBackoff)
		return 0, false
	}
}

func TestBackoffAtTheEdgesOfAValidPolicy(t *testing.T) {
	t.Run("MaxBackoff math.MaxInt64", func(t *testing.T) {
		p := Policy{MaxAttempts: 1, BaseBackoff: time.Second, MaxBackoff: math.MaxInt64, Rand: top()}
		for _, c := range []struct {
			attempt int
			want    time.Duration
		}{
			{1, time.Second},
			{2, 2 * time.Second},
			{64, math.MaxInt64}, // 1s·2^63 is past any Duration: capped
			{math.MaxInt, math.MaxInt64},
		} {
			t.Run(fmt.Sprintf("attempt %d", c.attempt), func(t *testing.T) {
				if d, ok := backoffOf(t, p, c.attempt); ok {
					assert.Equal(t, c.want, d, "MaxBackoff math.MaxInt64 is a valid policy: Backoff(%d) at the top of its range", c.attempt)
				}
			})
		}
		p.Rand = nil
		if d, ok := backoffOf(t, p, math.MaxInt); ok {
			assert.GreaterOrEqual(t, d, time.Duration(0), "the global source, too, draws from [0, math.MaxInt64]")
		}
	})
	t.Run("BaseBackoff 0", func(t *testing.T) {
		for _, maxBackoff := range []time.Duration{0, time.Second} {
			for _, attempt := range []int{1, 2, 64, math.MaxInt} {
				t.Run(fmt.Sprintf("MaxBackoff %s attempt %d", maxBackoff, attempt), func(t *testing.T) {
					p := Policy{MaxAttempts: 1, BaseBackoff: 0, MaxBackoff: maxBackoff, Rand: top()}
					if d, ok := backoffOf(t, p, attempt); ok {
						assert.Equal(t, time.Duration(0), d,
							"BaseBackoff 0 means retry without waiting: Backoff(%d) must be 0 (MaxBackoff %s)", attempt, maxBackoff)
					}
				})
			}
		}
	})
}

func TestBackoffWithoutRandUsesTheGlobalSource(t *testing.T) {
	p := Policy{MaxAttempts: 1, BaseBackoff: time.Second, MaxBackoff: time.Second} // Rand nil
	distinct := map[time.Duration]bool{}
	lo, hi := time.Duration(math.MaxInt64), time.Duration(0)
	for range 200 {
		d := p.Backoff(1)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, time.Second)
		distinct[d] = true
		lo, hi = min(lo, d), max(hi, d)
	}
	assert.Greater(t, len(distinct), 150, "a nil Policy.Rand means the global source, not no jitter: 200 draws from [0, 1s] should rarely repeat")
	assert.Less(t, lo, 500*time.Millisecond, "draws should spread over [0, 1s]; the smallest of 200 was %s", lo)
	assert.Greater(t, hi, 500*time.Millisecond, "draws should spread over [0, 1s]; the largest of 200 was %s", hi)
}
