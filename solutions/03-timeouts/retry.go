package timeouts

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Permanent marks err as not worth retrying (a 400, a validation error, a
// non-idempotent write that may have happened). Do recognises it through
// wrapping, and errors.Is/As still see err. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryAfterer is implemented by errors that know when the server wants to
// be asked again (HTTP 429/503 with Retry-After). Do waits at least that
// long before the next attempt — if the wait fits in the deadline.
type RetryAfterer interface {
	RetryAfter() time.Duration
}

// Immediate is implemented by errors after which the next attempt should
// start at once, without a backoff: a fail-over to a different upstream (lab
// 08's next provider, one this request has not tried). A backoff protects the
// upstream that just failed; a different one is not being hammered, and
// waiting would only add latency. Do finds it through wrapping, like
// Permanent and RetryAfterer. RetryImmediately true skips the whole wait, the
// error's RetryAfter included (that was the failed upstream speaking about
// itself); false means the usual wait. Nothing else changes: the retry is an
// attempt like any other, Permanent still wins, and a spent budget or the
// caller's cancellation still ends the loop first.
type Immediate interface {
	RetryImmediately() bool
}

// Do calls op until it succeeds, fails permanently, runs out of attempts, or
// runs out of time, and returns how many attempts it made. attempt is 1-based.
//
//   - Success: (attempts, nil).
//   - Attempts used up within the budget: the error wraps the last attempt's error.
//   - The budget ran out (TotalTimeout or the caller's deadline), during an
//     attempt, during a backoff, or because the next backoff would end past
//     it: the error wraps the last attempt's error and context.DeadlineExceeded.
//   - The caller cancelled: Do returns at once, wrapping context.Canceled.
//   - A Permanent error: returned after that attempt, never retried, even
//     when it is also Immediate.
//   - An Immediate error: the next attempt starts at once, with no backoff
//     and no Retry-After wait. It still counts against MaxAttempts, and the
//     budget and the caller's cancellation still end the loop first.
//   - ctx already done before the first attempt: (0, ctx.Err() wrapped), op
//     never called.
//
// An attempt that hit its own AttemptTimeout is retried; the total deadline
// and the caller's cancellation are not, even when the attempt's timeout
// falls on the same instant as the deadline.
func Do(ctx context.Context, p Policy, op func(ctx context.Context, attempt int) error) (attempts int, err error) {
	if err := p.validate(); err != nil {
		return 0, err
	}
	if p.TotalTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.TotalTimeout)
		defer cancel()
	}
	var last error
	for attempt := 1; ; attempt++ {
		if err := budgetSpent(ctx); err != nil {
			return attempt - 1, stopped(attempt-1, last, err)
		}
		last = runAttempt(ctx, p.AttemptTimeout, attempt, op)
		if last == nil {
			return attempt, nil
		}
		if pe := (*permanentError)(nil); errors.As(last, &pe) {
			return attempt, fmt.Errorf("timeouts: attempt %d failed permanently: %w", attempt, last)
		}
		if err := budgetSpent(ctx); err != nil {
			// The total deadline or the caller ended this attempt: whatever
			// op returned, there is no budget left to try again with.
			return attempt, stopped(attempt, last, err)
		}
		if attempt == p.MaxAttempts {
			return attempt, fmt.Errorf("timeouts: all %d attempts failed: %w", attempt, last)
		}
		wait := p.Backoff(attempt)
		var ra RetryAfterer
		if errors.As(last, &ra) {
			wait = max(wait, ra.RetryAfter())
		}
		if im := Immediate(nil); errors.As(last, &im) && im.RetryImmediately() {
			wait = 0
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			// Sleeping would end past the deadline; the attempt after it
			// could never run. Say so now instead of sleeping to find out.
			return attempt, stopped(attempt, last, context.DeadlineExceeded)
		}
		if err := sleep(ctx, wait); err != nil {
			return attempt, stopped(attempt, last, err)
		}
	}
}

// budgetSpent reports why ctx leaves no time for another attempt: it was
// cancelled, or its deadline has come. The clock is checked as well as
// ctx.Err() because a context's deadline timer runs on its own goroutine:
// when an attempt's timeout and the total deadline fall on the same instant,
// the attempt can return before the outer context has noticed its own
// deadline, and a retry would start with no budget at all.
func budgetSpent(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if deadline, ok := ctx.Deadline(); ok && !time.Now().Before(deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

func runAttempt(ctx context.Context, timeout time.Duration, attempt int, op func(context.Context, int) error) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return op(ctx, attempt)
}

// stopped builds the error for a loop ended by ctx: it wraps both the cause
// (DeadlineExceeded or Canceled) and the last attempt's error, if any.
func stopped(attempts int, last, cause error) error {
	if last == nil {
		return fmt.Errorf("timeouts: stopped before attempt %d: %w", attempts+1, cause)
	}
	return fmt.Errorf("timeouts: stopped after %d attempts: %w: %w", attempts, cause, last)
}

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
