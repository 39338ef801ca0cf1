package timeouts

import (
	"context"
	"time"
)

// Permanent marks err as not worth retrying (a 400, a validation error, a
// non-idempotent write that may have happened). Do must recognise it through
// wrapping, and errors.Is/As must still see err. Permanent(nil) is nil.
//
// TODO(lab 03): Do finds the mark however err is wrapped or joined later,
// and errors.Is/As still find err through it.
func Permanent(err error) error {
	return err
}

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
// waiting would only add latency. Do must find it through wrapping, like
// Permanent and RetryAfterer. RetryImmediately true skips the whole wait, the
// error's RetryAfter included (that was the failed upstream speaking about
// itself); false means the usual wait. Nothing else changes: the retry is an
// attempt like any other, Permanent still wins, and a spent budget or the
// caller's cancellation still ends the loop first.
type Immediate interface {
	RetryImmediately() bool
}

// Do calls op until it succeeds, fails permanently, runs out of attempts, or
// runs out of time, and returns how many attempts it made.
//
// TODO(lab 03): make these true:
//   - an invalid policy (MaxAttempts < 1, a negative duration, BaseBackoff >
//     MaxBackoff) → an error wrapping ErrInvalidPolicy, op never called;
//   - TotalTimeout is ONE deadline around every attempt and every backoff; the
//     budget is the nearer of it and the caller's own deadline;
//   - a ctx already cancelled or expired → no attempt at all (attempts 0);
//   - each attempt's ctx ends after AttemptTimeout (0 means no per-attempt
//     limit), or at the budget's end if that comes first; an attempt that hit
//     its own timeout is retried;
//   - after a failed attempt: Permanent → return; the budget is spent (the
//     caller left, or the deadline has come, even in the very instant the
//     attempt's own timeout fired) → return, no retry; MaxAttempts reached →
//     return wrapping the last error only (no DeadlineExceeded), without a backoff;
//   - else wait Backoff(attempt) (or the error's RetryAfter if longer), but if
//     that wait would end past the deadline, return at once; whenever the
//     budget runs out the error wraps the last attempt's error AND
//     context.DeadlineExceeded, whatever op returned;
//   - an error whose Immediate (found through wrapping) says RetryImmediately()
//     true waits nothing — no backoff, no RetryAfter — and changes nothing
//     else: Permanent, a spent budget and MaxAttempts still end the loop, and
//     the retry is an attempt like any other;
//   - the caller's cancellation ends any wait at once, wrapping context.Canceled
//     (not DeadlineExceeded).
func Do(ctx context.Context, p Policy, op func(ctx context.Context, attempt int) error) (attempts int, err error) {
	return 0, ErrNotImplemented
}
