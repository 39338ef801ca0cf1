package timeouts

import (
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
	}
}

func TestBackoffDoesNotOverflowForLargeAttempts(t *testing.T) {
	p := Policy{MaxAttempts: 1, BaseBackoff: time.Second, MaxBackoff: time.Minute, Rand: testkit.Rand(t)}
	for _, attempt := range []int{30, 63, 64, 65, 100, 1000, math.MaxInt32, math.MaxInt} {
		hi := time.Duration(0)
		for range 50 {
			d := p.Backoff(attempt)
			require.GreaterOrEqual(t, d, time.Duration(0), "Backoff(%d) = %s: Base·2^(attempt−1) overflowed", attempt, d)
			require.LessOrEqual(t, d, time.Minute, "Backoff(%d) = %s is above MaxBackoff", attempt, d)
			hi = max(hi, d)
		}
		assert.Greater(t, hi, 30*time.Second,
			"Backoff(%d): late attempts are capped at MaxBackoff (1m), so draws should reach well past 30s; the largest of 50 was %s — did Base·2^(attempt−1) wrap to zero?", attempt, hi)
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
