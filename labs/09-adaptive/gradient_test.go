package adaptive

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestGradientFollowsTheLatencyRatio(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Smoothing 1 and Tolerance 1 make each window's update exact:
		// limit·clamp(min/mean, 0.5, 1) + Queue.
		l := newGradient(t, GradientConfig{Min: 1, Max: 100, Initial: 10, Tolerance: 1, Queue: 2, Smoothing: 1, Window: 10})
		round(t, l, 10, 100*time.Millisecond, Success)
		assert.Equal(t, 12, l.Limit(), "at the minimum latency nothing is queued: the limit grows by the queue allowance (10·1 + 2)")

		round(t, l, 10, 200*time.Millisecond, Success)
		assert.Equal(t, 8, l.Limit(),
			"latency doubled: the gradient is min/mean = 100 ms/200 ms = 0.5, so 12·0.5 + 2 = 8 (a baseline that averages every latency instead of keeping the minimum gives 150 ms and 11)")

		round(t, l, 8, 400*time.Millisecond, Success)
		round(t, l, 2, 400*time.Millisecond, Success)
		assert.Equal(t, 6, l.Limit(), "the gradient is clamped at 0.5 (8·0.5 + 2), so one slow window cannot collapse the limit")
	})
}

func TestGradientToleratesLatencyUpToTolerance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newGradient(t, GradientConfig{Min: 1, Max: 100, Initial: 10, Tolerance: 1.5, Queue: 2, Smoothing: 1, Window: 10})
		round(t, l, 10, 100*time.Millisecond, Success)
		round(t, l, 10, 150*time.Millisecond, Success)
		assert.Equal(t, 14, l.Limit(), "1.5× the minimum is within Tolerance 1.5: still growing (12 + 2)")
		round(t, l, 10, 300*time.Millisecond, Success)
		assert.Equal(t, 9, l.Limit(), "3× the minimum is past Tolerance: gradient 1.5·100/300 = 0.5, so 14·0.5 + 2")
	})
}

func TestGradientSmoothsEachStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newGradient(t, GradientConfig{Min: 1, Max: 100, Initial: 20, Tolerance: 1, Queue: 4, Smoothing: 0.5, Window: 20})
		round(t, l, 20, 100*time.Millisecond, Success)
		assert.Equal(t, 22, l.Limit(), "halfway from 20 to 20·1 + 4")
		round(t, l, 20, 200*time.Millisecond, Success)
		assert.Equal(t, 18, l.Limit(), "halfway from 22 to 22·0.5 + 4 = 15: 18.5, floored")
	})
}

func TestGradientBaselineFollowsAProviderThatReallyGotSlower(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Window 1: every sample updates. LongWindow 10 s: a minimum is
		// remembered for one to two long windows, then a new one takes over.
		l := newGradient(t, GradientConfig{Min: 1, Max: 10, Initial: 2, Tolerance: 1, Queue: 1, Smoothing: 1, Window: 1, LongWindow: 10 * time.Second})
		round(t, l, 1, 100*time.Millisecond, Success) // t = 0.1 s: minimum 100 ms
		assert.Equal(t, 3, l.Limit())
		round(t, l, 1, 200*time.Millisecond, Success) // the provider got slower
		assert.Equal(t, 2, l.Limit(), "200 ms against a 100 ms minimum: 3·0.5 + 1")

		time.Sleep(10 * time.Second)
		round(t, l, 1, 200*time.Millisecond, Success) // t ≈ 10.5 s
		assert.Equal(t, 2, l.Limit(), "10 s on, the 100 ms minimum is still within the long window")

		time.Sleep(10 * time.Second)
		round(t, l, 1, 200*time.Millisecond, Success) // t ≈ 20.7 s
		assert.Equal(t, 3, l.Limit(),
			"two long windows of nothing faster than 200 ms: 200 ms is the provider's new normal, and at its normal latency the limit grows again; a minimum kept for ever shrinks the limit for ever")
	})
}
