package timeouts

import (
	"context"
	"errors"
	"fmt"
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

var (
	errFlaky = errors.New("flaky upstream")
	errReset = errors.New("connection reset") // what an op returns when its context ends, instead of ctx.Err()
)

// hang is an op that waits for its context to end and returns its error.
func hang(ctx context.Context, _ int) error {
	<-ctx.Done()
	return ctx.Err()
}

// hangThenReset waits for its context to end and returns its own error, so
// that a test can tell what Do adds (the cause) from what op returned.
func hangThenReset(ctx context.Context, _ int) error {
	<-ctx.Done()
	return errReset
}

func TestDoReturnsOnFirstSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []int
		start := time.Now()
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
		assert.Zero(t, time.Since(start), "BaseBackoff 0 means retry without waiting")
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
		name string
		rnd  func() *rand.Rand
		want time.Duration
	}{
		{"top of the range", top, 3 * time.Second},
		{"bottom of the range", bottom, 0},
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
				assert.Equal(t, c.want, time.Since(start),
					"three backoffs drawn from [0, 1s] at the %s (full jitter reaches both ends)", c.name)
			})
		})
	}
}

func TestDoWaitsTheBackoffOfTheAttemptThatFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		n, err := Do(t.Context(), Policy{MaxAttempts: 4, BaseBackoff: time.Second, MaxBackoff: 10 * time.Second, Rand: top()},
			func(_ context.Context, attempt int) error {
				at = append(at, time.Since(start))
				if attempt < 4 {
					return errFlaky
				}
				return nil
			})
		require.NoError(t, err)
		assert.Equal(t, 4, n)
		assert.Equal(t, []time.Duration{0, time.Second, 3 * time.Second, 7 * time.Second}, at,
			"with the jitter at the top, the waits after attempts 1, 2, 3 are their caps 1s, 2s, 4s: Backoff(k) after attempt k")
	})
}

func TestDoLastAttemptEndsWithoutABackoff(t *testing.T) {
	t.Run("the last of three", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			// Attempts at 0, 10s and 20s; after the third, a 10 s backoff
			// would not fit in the 5 s left — but there is no fourth attempt.
			n, err := Do(t.Context(), Policy{MaxAttempts: 3, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second, TotalTimeout: 25 * time.Second, Rand: top()},
				func(context.Context, int) error { return errFlaky })
			assert.Equal(t, 3, n)
			assert.ErrorIs(t, err, errFlaky)
			assert.NotErrorIs(t, err, context.DeadlineExceeded,
				"the attempts ran out with 5s of budget left: that is not a deadline, whatever the next backoff would have been")
			assert.Equal(t, 20*time.Second, time.Since(start), "Do returns when the last attempt fails, without a backoff after it")
		})
	})
	t.Run("MaxAttempts 1", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			n, err := Do(t.Context(), Policy{MaxAttempts: 1, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second, Rand: top()},
				func(context.Context, int) error { return errFlaky })
			assert.Equal(t, 1, n)
			assert.ErrorIs(t, err, errFlaky)
			assert.NotErrorIs(t, err, context.DeadlineExceeded)
			assert.Zero(t, time.Since(start), "one attempt, no retry, so no backoff")
		})
	})
}

func TestDoTotalDeadlineWrapsBothErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n, err := Do(t.Context(), Policy{MaxAttempts: 5, TotalTimeout: 5 * time.Second}, hangThenReset)
		assert.Equal(t, 1, n, "the total deadline ended attempt 1: no retry")
		assert.Equal(t, 5*time.Second, time.Since(start), "at the total deadline")
		assert.ErrorIs(t, err, context.DeadlineExceeded,
			"the total deadline ended the attempt: Do's error says so, even though op returned its own error")
		assert.ErrorIs(t, err, errReset, "and it wraps what the last attempt returned")
		assert.NotErrorIs(t, err, context.Canceled)
	})
}

func TestDoCallersDeadlineIsTheBudgetToo(t *testing.T) {
	t.Run("a backoff that would pass it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second) // the caller's deadline; no TotalTimeout
			defer cancel()
			start := time.Now()
			n, err := Do(ctx, Policy{MaxAttempts: 5, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second, Rand: top()},
				func(context.Context, int) error { return errFlaky })
			assert.Zero(t, time.Since(start), "a 10s backoff cannot fit before the caller's deadline in 3s: return at once")
			assert.Equal(t, 1, n)
			assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline is the budget: it ran out")
			assert.ErrorIs(t, err, errFlaky, "and the error says what the last attempt saw")
			assert.NotErrorIs(t, err, context.Canceled, "nobody cancelled")
		})
	})
	t.Run("during an attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
			defer cancel()
			start := time.Now()
			n, err := Do(ctx, Policy{MaxAttempts: 5, AttemptTimeout: time.Minute}, hangThenReset)
			assert.Equal(t, 3*time.Second, time.Since(start), "the caller's deadline ends the attempt")
			assert.Equal(t, 1, n, "the caller's deadline is not an attempt timeout: no retry")
			assert.ErrorIs(t, err, context.DeadlineExceeded, "Do's error says the budget ran out, whatever op returned")
			assert.ErrorIs(t, err, errReset, "and wraps what op returned")
			assert.NotErrorIs(t, err, context.Canceled, "nobody cancelled")
		})
	})
}

func TestDoAttemptTimeoutEqualToTheDeadlineIsNotRetried(t *testing.T) {
	// The attempt's timeout and the deadline above it fall on the same
	// instant, so two timers race to end the attempt. Whichever wins, the
	// budget is spent: no second attempt. The race is decided differently
	// from run to run, hence the rounds.
	for _, c := range []struct {
		name         string
		callerBudget time.Duration // 0: the caller's ctx has no deadline
		p            Policy
	}{
		{"equal to TotalTimeout", 0, Policy{MaxAttempts: 5, AttemptTimeout: 5 * time.Second, TotalTimeout: 5 * time.Second}},
		{"equal to the caller's deadline", 5 * time.Second, Policy{MaxAttempts: 5, AttemptTimeout: 5 * time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				for round := range 100 {
					ctx, cancel := t.Context(), context.CancelFunc(func() {})
					if c.callerBudget > 0 {
						ctx, cancel = context.WithTimeout(ctx, c.callerBudget)
					}
					start := time.Now()
					n, err := Do(ctx, c.p, hang)
					cancel()
					require.Equal(t, 1, n, "round %d: the attempt ended with the whole budget; a second attempt has no time left", round)
					require.ErrorIs(t, err, context.DeadlineExceeded, "round %d: the budget ran out", round)
					require.Equal(t, 5*time.Second, time.Since(start), "round %d: at the deadline", round)
				}
			})
		})
	}
}

func TestDoZeroAttemptTimeoutMeansNoPerAttemptLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var deadline time.Time
		n, err := Do(t.Context(), Policy{MaxAttempts: 5, TotalTimeout: 5 * time.Second}, func(ctx context.Context, attempt int) error {
			deadline, _ = ctx.Deadline()
			return hang(ctx, attempt)
		})
		assert.Equal(t, 1, n, "AttemptTimeout 0 means no per-attempt limit: one attempt runs until the total deadline")
		assert.Equal(t, start.Add(5*time.Second), deadline, "the attempt's only deadline is the total one")
		assert.Equal(t, 5*time.Second, time.Since(start), "at the total deadline")
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the total deadline ended it")
	})
}

func TestDoWithContextAlreadyDoneNeverCallsOp(t *testing.T) {
	for _, c := range []struct {
		name        string
		ctx         func(t *testing.T) context.Context
		want, other error
	}{
		{"cancelled", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			return ctx
		}, context.Canceled, context.DeadlineExceeded},
		{"deadline passed", func(t *testing.T) context.Context {
			ctx, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded, context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			called := 0
			n, err := Do(c.ctx(t), Policy{MaxAttempts: 3}, func(context.Context, int) error {
				called++
				return errFlaky
			})
			assert.Zero(t, called, "a caller whose context has already ended gets no attempt: it would be sent upstream for nobody")
			assert.Zero(t, n, "no attempts were made")
			assert.ErrorIs(t, err, c.want, "the error says why: the caller's own ctx.Err()")
			assert.NotErrorIs(t, err, c.other, "and only that")
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

		calls.Store(0)
		n, err = Do(t.Context(), Policy{MaxAttempts: 5}, func(context.Context, int) error {
			calls.Add(1)
			return fmt.Errorf("calling provider: %w", fmt.Errorf("status 400: %w", Permanent(bad)))
		})
		assert.Equal(t, int32(1), calls.Load(), "Permanent is recognised through any depth of fmt.Errorf wrapping")
		assert.Equal(t, 1, n)
		assert.ErrorIs(t, err, bad)
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
			n, err := Do(ctx, Policy{MaxAttempts: 5, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second, TotalTimeout: time.Hour, Rand: top()},
				func(context.Context, int) error {
					calls.Add(1)
					return errFlaky
				})
			assert.Equal(t, time.Second, time.Since(start), "cancellation must end the backoff at once")
			assert.Equal(t, int32(1), calls.Load(), "no attempt may start after the caller cancelled")
			assert.Equal(t, 1, n)
			assert.ErrorIs(t, err, context.Canceled)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller cancelled; the hour of budget was not spent")
			assert.ErrorIs(t, err, errFlaky)
		})
	})
	t.Run("during an attempt", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			defer time.AfterFunc(time.Second, cancel).Stop() // the caller gives up after 1 s
			var calls atomic.Int32
			start := time.Now()
			n, err := Do(ctx, Policy{MaxAttempts: 5, AttemptTimeout: time.Minute, TotalTimeout: time.Hour}, func(ctx context.Context, attempt int) error {
				calls.Add(1)
				return hangThenReset(ctx, attempt)
			})
			assert.Equal(t, time.Second, time.Since(start))
			assert.Equal(t, int32(1), calls.Load(), "a cancelled caller is not an attempt timeout: no retry")
			assert.Equal(t, 1, n)
			assert.ErrorIs(t, err, context.Canceled, "Do's error says the caller cancelled, whatever op returned")
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller cancelled; the hour of budget was not spent")
			assert.ErrorIs(t, err, errReset)
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
		var at []time.Duration
		n, err := Do(t.Context(), Policy{MaxAttempts: 3, BaseBackoff: 2 * time.Second, MaxBackoff: 2 * time.Second, TotalTimeout: time.Minute, Rand: top()},
			func(_ context.Context, attempt int) error {
				at = append(at, time.Since(start))
				if attempt == 1 {
					return retryLater{500 * time.Millisecond}
				}
				return nil
			})
		require.NoError(t, err)
		assert.Equal(t, 2, n)
		assert.Equal(t, []time.Duration{0, 2 * time.Second}, at,
			"Retry-After is a floor: the backoff (2 s, jitter at the top) is longer than the 500 ms asked, so it is waited")
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

// failedOver is an error after which the next attempt goes to a different
// upstream (lab 08's next provider), so it asks Do to retry at once. now is
// what RetryImmediately answers.
type failedOver struct {
	err error
	now bool
}

var _ Immediate = failedOver{}

func (e failedOver) Error() string          { return "failing over: " + e.err.Error() }
func (e failedOver) Unwrap() error          { return e.err }
func (e failedOver) RetryImmediately() bool { return e.now }

// failOver marks err for an immediate retry.
func failOver(err error) error { return failedOver{err: err, now: true} }

// slowBackoff is a policy whose every ordinary retry waits exactly 10 s (the
// jitter pinned at the top), so an immediate one is told apart by the clock.
func slowBackoff(maxAttempts int) Policy {
	return Policy{MaxAttempts: maxAttempts, BaseBackoff: 10 * time.Second, MaxBackoff: 10 * time.Second, TotalTimeout: time.Minute, Rand: top()}
}

func TestDoRetriesAnImmediateErrorAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		n, err := Do(t.Context(), slowBackoff(3), func(_ context.Context, attempt int) error {
			at = append(at, time.Since(start))
			if attempt < 3 {
				return failOver(errFlaky)
			}
			return nil
		})
		assert.Equal(t, []time.Duration{0, 0, 0}, at,
			"attempts 1 and 2 failed with RetryImmediately() true: the next attempt starts at once, not after the 10 s backoff an ordinary failure waits here")
		assert.Equal(t, 3, n)
		assert.NoError(t, err)
	})
}

func TestDoBacksOffWhenRetryImmediatelyIsFalse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		n, err := Do(t.Context(), slowBackoff(3), func(_ context.Context, attempt int) error {
			at = append(at, time.Since(start))
			if attempt < 3 {
				return failedOver{err: errFlaky, now: false}
			}
			return nil
		})
		assert.Equal(t, []time.Duration{0, 10 * time.Second, 20 * time.Second}, at,
			"RetryImmediately() false means the usual wait: the 10 s backoff after each failure (implementing Immediate is not enough, ask it)")
		assert.Equal(t, 3, n)
		assert.NoError(t, err)
	})
}

func TestDoFindsImmediateThroughWrapping(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
	}{
		{"fmt.Errorf %w, twice", fmt.Errorf("calling provider: %w", fmt.Errorf("status 503: %w", failOver(errFlaky)))},
		{"errors.Join", errors.Join(errors.New("calling provider"), failOver(errFlaky))},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var at []time.Duration
				n, err := Do(t.Context(), slowBackoff(2), func(_ context.Context, attempt int) error {
					at = append(at, time.Since(start))
					if attempt == 1 {
						return c.err
					}
					return nil
				})
				assert.Equal(t, []time.Duration{0, 0}, at,
					"Immediate is found through wrapping (errors.As, not a type assertion): the retry starts at once, not after the 10 s backoff")
				assert.Equal(t, 2, n)
				assert.NoError(t, err)
			})
		})
	}
}

func TestDoCountsImmediateRetriesAgainstMaxAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		start := time.Now()
		n, err := Do(t.Context(), slowBackoff(3), func(context.Context, int) error {
			if calls.Add(1) > 5 {
				return nil // only a loop that does not count immediate retries gets here
			}
			return failOver(errFlaky)
		})
		assert.Equal(t, int32(3), calls.Load(), "MaxAttempts 3 means 3 calls, immediate retries included: a retry that did not wait is still an attempt")
		assert.Equal(t, 3, n)
		assert.ErrorIs(t, err, errFlaky, "the attempts ran out: the error wraps the last attempt's error")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "with 1 min of budget left, that is not a deadline")
		assert.Zero(t, time.Since(start), "every retry was immediate, and there is no wait after the last attempt")
	})
}

func TestDoDoesNotRetryImmediatelyPastTheDeadline(t *testing.T) {
	for _, c := range []struct {
		name         string
		callerBudget time.Duration // 0: the caller's ctx has no deadline
		p            Policy
	}{
		{"TotalTimeout", 0, Policy{MaxAttempts: 5, TotalTimeout: 5 * time.Second}},
		{"the caller's deadline", 5 * time.Second, Policy{MaxAttempts: 5}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := t.Context(), context.CancelFunc(func() {})
				if c.callerBudget > 0 {
					ctx, cancel = context.WithTimeout(ctx, c.callerBudget)
				}
				defer cancel()
				var calls atomic.Int32
				start := time.Now()
				n, err := Do(ctx, c.p, func(ctx context.Context, _ int) error {
					calls.Add(1)
					<-ctx.Done()
					return failOver(errReset) // the next provider is waiting — but the budget is not
				})
				assert.Equal(t, int32(1), calls.Load(),
					"the deadline ended attempt 1: an immediate retry is still a retry, and there is no budget left for it")
				assert.Equal(t, 1, n)
				assert.Equal(t, 5*time.Second, time.Since(start), "at the deadline")
				assert.ErrorIs(t, err, context.DeadlineExceeded, "the budget ran out: Do's error says so, whatever op returned")
				assert.ErrorIs(t, err, errReset, "and it wraps what the last attempt returned")
			})
		})
	}
}

func TestDoNeverRetriesAPermanentErrorMarkedImmediate(t *testing.T) {
	bad := errors.New("400 context_length_exceeded")
	for _, c := range []struct {
		name string
		err  error
	}{
		{"Permanent inside Immediate", failOver(Permanent(bad))}, // lab 08 wraps every failure it fails over from
		{"Immediate inside Permanent", Permanent(failOver(bad))},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				n, err := Do(t.Context(), slowBackoff(5), func(context.Context, int) error {
					calls.Add(1)
					return c.err
				})
				assert.Equal(t, int32(1), calls.Load(),
					"Permanent wins, however the two are nested: the same request fails the same way on every upstream, so it is not retried at all")
				assert.Equal(t, 1, n)
				assert.ErrorIs(t, err, bad, "the permanent error stays visible to errors.Is")
			})
		})
	}
}

func TestDoCallerCancellationStopsImmediateRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		defer time.AfterFunc(time.Second, cancel).Stop() // the caller gives up after 1 s
		var calls atomic.Int32
		start := time.Now()
		n, err := Do(ctx, Policy{MaxAttempts: 5, TotalTimeout: time.Hour}, func(ctx context.Context, _ int) error {
			calls.Add(1)
			<-ctx.Done()
			return failOver(errReset)
		})
		assert.Equal(t, int32(1), calls.Load(), "the caller left during attempt 1: no retry, immediate or not")
		assert.Equal(t, 1, n)
		assert.Equal(t, time.Second, time.Since(start), "Do returns when the caller cancels")
		assert.ErrorIs(t, err, context.Canceled, "Do's error says the caller cancelled")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller cancelled; the hour of budget was not spent")
		assert.ErrorIs(t, err, errReset)
	})
}

func TestDoImmediateRetryDoesNotWaitOutRetryAfter(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		p    Policy
		want []time.Duration // the instants of attempts 1 and 2
		why  string
	}{
		{"a Retry-After inside the budget", failOver(retryLater{20 * time.Second}),
			Policy{MaxAttempts: 3, TotalTimeout: time.Minute}, []time.Duration{0, 0},
			"the 20 s Retry-After is the failed upstream's; the next attempt goes elsewhere and starts at once"},
		{"a Retry-After past the deadline", failOver(retryLater{time.Minute}),
			Policy{MaxAttempts: 3, TotalTimeout: 5 * time.Second}, []time.Duration{0, 0},
			"a Retry-After that would not fit ends the loop only when it is to be waited: an immediate retry waits nothing"},
		{"RetryImmediately false", failedOver{err: retryLater{2 * time.Second}, now: false},
			Policy{MaxAttempts: 3, TotalTimeout: time.Minute}, []time.Duration{0, 2 * time.Second},
			"RetryImmediately() false: the Retry-After is honoured as usual"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var at []time.Duration
				n, err := Do(t.Context(), c.p, func(_ context.Context, attempt int) error {
					at = append(at, time.Since(start))
					if attempt == 1 {
						return c.err
					}
					return nil
				})
				assert.Equal(t, c.want, at, c.why)
				assert.Equal(t, 2, n)
				assert.NoError(t, err)
			})
		})
	}
}

func TestDoImmediateAppliesOnlyToTheErrorThatSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		n, err := Do(t.Context(), slowBackoff(4), func(_ context.Context, attempt int) error {
			at = append(at, time.Since(start))
			switch attempt {
			case 1, 3:
				return failOver(errFlaky)
			case 2:
				return errFlaky
			}
			return nil
		})
		assert.Equal(t, []time.Duration{0, 0, 10 * time.Second, 10 * time.Second}, at,
			"attempts 1 and 3 failed over (retry at once); attempt 2's ordinary failure waits its 10 s backoff: one Immediate error must not make later retries immediate")
		assert.Equal(t, 4, n)
		assert.NoError(t, err)
	})
}
