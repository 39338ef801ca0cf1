package adaptive

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAIMDAddsOnePermitPerRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 100, Initial: 10})
		round(t, l, 10, 100*time.Millisecond, Success)
		assert.Equal(t, 11, l.Limit(),
			"a full limit's worth of successes (one round trip) adds Increase once; +1 per success doubles the limit every round trip, which is multiplicative")
		round(t, l, 11, 100*time.Millisecond, Success)
		assert.Equal(t, 12, l.Limit(), "the next round trip is 11 successes")
		round(t, l, 6, 100*time.Millisecond, Success)
		assert.Equal(t, 12, l.Limit(), "half a round trip adds nothing yet")
	})
}

func TestAIMDBacksOffOnErrorsAndTimeouts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 100, Initial: 20, Backoff: 0.5})
		tok := acquire(t, l, 1)[0]
		tok.Done(Dropped)
		assert.Equal(t, 10, l.Limit(), "a drop multiplies the limit by Backoff")

		// An attempt that ran into its own deadline is a timeout: overload.
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		tok = acquire(t, l, 1)[0]
		<-ctx.Done()
		tok.Done(OutcomeOf(ctx.Err()))
		assert.Equal(t, 5, l.Limit(), "a timed-out attempt backs off like an error")
	})
}

func TestCancellationNeverMovesTheLimit(t *testing.T) {
	for _, name := range []string{"AIMD", "Gradient"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var l *Limiter
				if name == "AIMD" {
					l = newAIMD(t, AIMDConfig{Min: 1, Max: 100, Initial: 10})
				} else {
					l = newGradient(t, GradientConfig{Min: 1, Max: 100, Initial: 10, Window: 1})
				}
				for range 30 {
					ctx, cancel := context.WithCancel(t.Context())
					toks := acquire(t, l, 10)
					time.Sleep(time.Duration(len(toks)) * time.Second) // slow, as a cancelled call often is
					cancel()
					for _, tok := range toks {
						tok.Done(OutcomeOf(ctx.Err()))
					}
				}
				assert.Equal(t, 10, l.Limit(), "a caller that left says nothing about the provider: 300 cancellations must not move the limit")
				assert.Zero(t, l.InFlight(), "but each one returns its permit")
			})
		})
	}
}

func TestOneBackoffPerCongestionEpisode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newAIMD(t, AIMDConfig{Min: 1, Max: 100, Initial: 20})
		round(t, l, 20, time.Second, Dropped)
		assert.Equal(t, 18, l.Limit(),
			"20 requests that failed together measured one overload: back off once (20·0.9), not 20 times (20·0.9^20 ≈ 2); a drop from a request admitted before the last backoff is a stale sample")
		round(t, l, 1, time.Second, Dropped)
		assert.Equal(t, 16, l.Limit(), "a drop from a request admitted after the backoff is news: back off again (⌊18·0.9⌋)")
	})
}

func TestLimitStaysBetweenFloorAndCeiling(t *testing.T) {
	for _, name := range []string{"AIMD", "Gradient"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var l *Limiter
				if name == "AIMD" {
					l = newAIMD(t, AIMDConfig{Min: 3, Max: 12, Initial: 10})
				} else {
					l = newGradient(t, GradientConfig{Min: 3, Max: 12, Initial: 10, Window: 1, Smoothing: 1})
				}
				for i := range 40 {
					round(t, l, 1, 100*time.Millisecond, Dropped)
					require.GreaterOrEqual(t, l.Limit(), 3, "drop %d took the limit below the floor (Min 3); a limit of 0 never admits the sample that would raise it", i+1)
				}
				assert.Equal(t, 3, l.Limit(), "forty drops in a row end at the floor")
				for i := range 60 {
					round(t, l, l.Limit(), 100*time.Millisecond, Success)
					require.LessOrEqual(t, l.Limit(), 12, "round trip %d took the limit above the ceiling (Max 12)", i+1)
				}
				assert.Equal(t, 12, l.Limit(), "a healthy provider at full use grows the limit to the ceiling")
			})
		})
	}
}

func TestLimitDoesNotGrowWithoutDemand(t *testing.T) {
	for _, name := range []string{"AIMD", "Gradient"} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var l *Limiter
				if name == "AIMD" {
					l = newAIMD(t, AIMDConfig{Min: 1, Max: 1000, Initial: 10})
				} else {
					l = newGradient(t, GradientConfig{Min: 1, Max: 1000, Initial: 10, Window: 1, Smoothing: 1})
				}
				for range 200 {
					round(t, l, 4, 100*time.Millisecond, Success) // 4 of 10 in use
				}
				assert.Equal(t, 10, l.Limit(),
					"200 fast successes with 4 of 10 permits in use prove nothing about 11: grow only while at least half the limit is in use, or a quiet night ends with a limit of 1000 and the morning's burst hits the provider unchecked")
			})
		})
	}
}
