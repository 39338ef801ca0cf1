package timeouts

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// top and bottom are jitter sources pinned to the ends of the range, so a
// test can make a backoff take (almost exactly) its cap, or nothing.
type fixedSource uint64

func (s fixedSource) Uint64() uint64 { return uint64(s) }

func top() *rand.Rand    { return rand.New(fixedSource(math.MaxUint64)) }
func bottom() *rand.Rand { return rand.New(fixedSource(1)) }

var errFlaky = errors.New("flaky upstream")

// hang is an op that waits for its context to end and returns its error.
func hang(ctx context.Context, _ int) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestDoReturnsOnFirstSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []int
		n, err := Do(t.Context(), Policy{MaxAttempts: 5}, func(_ context.Context, attempt int) error {
			seen = append(seen, attempt)
			if attempt < 3 {
				return errFlaky
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, 3, n, "Do should report how many attempts it made")
		assert.Equal(t, []int{1, 2, 3}, seen, "attempts are numbered from 1, one call each")
	})
}

func TestDoStopsAfterMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		n, err := Do(t.Context(), Policy{MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond, TotalTimeout: time.Hour},
			func(context.Context, int) error {
				calls.Add(1)
				return errFlaky
			})
		assert.Equal(t, int32(3), calls.Load(), "MaxAttempts 3 means op is called exactly 3 times")
		assert.Equal(t, 3, n)
		assert.ErrorIs(t, err, errFlaky, "the error should wrap the last attempt's error")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "attempts ran out well inside the budget: that is not a deadline")
	})
}

func TestDoTotalTimeoutSpansAllAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n, err := Do(t.Context(), Policy{MaxAttempts: 3, AttemptTimeout: 15 * time.Second, TotalTimeout: 20 * time.Second}, hang)
		assert.Equal(t, 20*time.Second, time.Since(start),
			"three attempts of up to 15 s under a 20 s total must end at 20 s, not 45 s: the total deadline goes around the loop")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 2, n, "attempt 1 timed out at 15 s and was retried; attempt 2 was cut by the total deadline at 20 s")
	})
}

func TestDoRetriesAnAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n, err := Do(t.Context(), Policy{MaxAttempts: 3, AttemptTimeout: time.Second, TotalTimeout: time.Minute},
			func(ctx context.Context, attempt int) error {
				if attempt == 1 {
					return hang(ctx, attempt) // a slow attempt: worth another try
				}
				return nil
			})
		require.NoError(t, err, "an attempt that hit its own timeout should be retried")
		assert.Equal(t, 2, n)
		assert.Equal(t, time.Second, time.Since(start), "the first attempt is cut at AttemptTimeout, not left to run")
	})
}

func TestDoDoesNotRetryAfterTheTotalDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		start := time.Now()
		n, err := Do(t.Context(), Policy{MaxAttempts: 5, AttemptTimeout: 10 * time.Second, TotalTimeout: 5 * time.Second},
			func(ctx context.Context, attempt int) error {
				calls.Add(1)
				return hang(ctx, attempt)
			})
		assert.Equal(t, int32(1), calls.Load(), "the total deadline ended attempt 1: it is not an attempt timeout, there is nothing left to retry with")
		assert.Equal(t, 1, n)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start))
	})
}

func TestDoNeverSleepsPastTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		start := time.Now()
		// The backoff after attempt 1 is ~10 s; only 3 s of budget are left.
		n, err := Do(t.Context(), Policy{MaxAttempts: 5, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second, TotalTimeout: 3 * time.Second, Rand: top()},
			func(context.Context, int) error {
				calls.Add(1)
				return errFlaky
			})
		assert.Zero(t, time.Since(start), "a backoff that would end past the deadline must not be slept: return at once")
		assert.Equal(t, int32(1), calls.Load())
		assert.Equal(t, 1, n)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the budget ran out (there is no time for another attempt)")
		assert.ErrorIs(t, err, errFlaky, "and the error says what the last attempt saw")
	})
}

func TestDoWaitsAJitteredBackoffBetweenAttempts(t *testing.T) {
	for _, c := range []struct {
		name   string
		rnd    func() *rand.Rand
		lo, hi time.Duration
	}{
		{"top of the range", top, 3*time.Second - time.Millisecond, 3 * time.Second},
		{"bottom of the range", bottom, 0, time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				n, err := Do(t.Context(), Policy{MaxAttempts: 4, BaseBackoff: time.Second, MaxBackoff: time.Second, Rand: c.rnd()},
					func(_ context.Context, attempt int) error {
						if attempt < 4 {
							return errFlaky
						}
						return nil
					})
				require.NoError(t, err)
				assert.Equal(t, 4, n)
				took := time.Since(start)
				assert.True(t, took >= c.lo && took <= c.hi,
					"three backoffs drawn from [0, 1s] at the %s should take between %s and %s, took %s (full jitter reaches both ends)", c.name, c.lo, c.hi, took)
			})
		})
	}
}

func TestDoNeverRetriesPermanentErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := errors.New("400 context_length_exceeded")
		var calls atomic.Int32
		n, err := Do(t.Context(), Policy{MaxAttempts: 5}, func(context.Context, int) error {
			calls.Add(1)
			return errors.Join(errors.New("calling provider"), Permanent(bad)) // recognised through wrapping
		})
		assert.Equal(t, int32(1), calls.Load(), "a permanent error must not be retried")
		assert.Equal(t, 1, n)
		assert.ErrorIs(t, err, bad, "the permanent error stays visible to errors.Is")
		assert.NoError(t, Permanent(nil), "Permanent(nil) is nil")
	})
}

func TestDoStopsAtOnceWhenTheCallerCancels(t *testing.T) {
	t.Run("during a backoff", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			defer time.AfterFunc(time.Second, cancel).Stop() // the caller gives up after 1 s
			var calls atomic.Int32
			start := time.Now()
			n, err := Do(ctx, Policy{MaxAttempts: 5, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second, Rand: top()},
				func(context.Context, int) error {
					calls.Add(1)
					return errFlaky
				})
			assert.Equal(t, time.Second, time.Since(start), "cancellation must end the backoff at once")
			assert.Equal(t, int32(1), calls.Load(), "no attempt may start after the caller cancelled")
			assert.Equal(t, 1, n)
			assert.ErrorIs(t, err, context.Canceled)
			assert.ErrorIs(t, err, errFlaky)
		})
	})
	t.Run("during an attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			defer time.AfterFunc(time.Second, cancel).Stop() // the caller gives up after 1 s
			var calls atomic.Int32
			n, err := Do(ctx, Policy{MaxAttempts: 5, AttemptTimeout: time.Minute}, func(ctx context.Context, attempt int) error {
				calls.Add(1)
				return hang(ctx, attempt)
			})
			assert.Equal(t, int32(1), calls.Load(), "a cancelled caller is not an attempt timeout: no retry")
			assert.Equal(t, 1, n)
			assert.ErrorIs(t, err, context.Canceled)
		})
	})
}

// retryLater is an upstream error that says when to come back (HTTP 429 + Retry-After).
type retryLater struct{ after time.Duration }

func (e retryLater) Error() string             { return "429 too many requests" }
func (e retryLater) RetryAfter() time.Duration { return e.after }

func TestDoHonoursRetryAfterWithinTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		n, err := Do(t.Context(), Policy{MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond, TotalTimeout: time.Minute, Rand: bottom()},
			func(_ context.Context, attempt int) error {
				at = append(at, time.Since(start))
				if attempt == 1 {
					return retryLater{2 * time.Second}
				}
				return nil
			})
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		assert.Equal(t, []time.Duration{0, 2 * time.Second}, at, "the server asked for 2 s: the next attempt waits that long, not the 1 ms backoff")
	})
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n, err := Do(t.Context(), Policy{MaxAttempts: 3, TotalTimeout: 5 * time.Second},
			func(context.Context, int) error { return retryLater{time.Minute} })
		assert.Equal(t, 1, n, "a Retry-After past the deadline leaves no time for another attempt")
		assert.Zero(t, time.Since(start), "so Do returns at once instead of sleeping into the deadline")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestDoRejectsInvalidPolicy(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Policy
	}{
		{"no attempts", Policy{MaxAttempts: 0}},
		{"negative attempts", Policy{MaxAttempts: -1}},
		{"negative base", Policy{MaxAttempts: 1, BaseBackoff: -1, MaxBackoff: time.Second}},
		{"negative max", Policy{MaxAttempts: 1, MaxBackoff: -time.Second}},
		{"negative attempt timeout", Policy{MaxAttempts: 1, AttemptTimeout: -time.Second}},
		{"negative total timeout", Policy{MaxAttempts: 1, TotalTimeout: -time.Second}},
		{"base above max", Policy{MaxAttempts: 1, BaseBackoff: 2 * time.Second, MaxBackoff: time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := Do(t.Context(), c.p, func(context.Context, int) error {
				t.Error("op must not be called with an invalid policy")
				return nil
			})
			assert.ErrorIs(t, err, ErrInvalidPolicy)
			assert.Zero(t, n)
		})
	}
}
