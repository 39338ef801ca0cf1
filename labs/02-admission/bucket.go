package admission

import (
	"context"
)

// TokenBucket is an in-process Limiter with one bucket per key, safe for
// concurrent use. A bucket starts full on first use. TokenBucket starts no
// timer and no goroutine, so there is nothing to stop. A bucket that is full
// again is the same as a new one, so TokenBucket forgets it: its state is
// bounded by recent activity.
type TokenBucket struct{} // TODO(lab 02): the fields you need

// NewTokenBucket returns a Limiter that refills each key at ratePerSecond
// tokens per second, holding at most burst.
//
// TODO(lab 02): refuse a rate that is not a positive finite number (NaN too:
// NaN <= 0 is false) and burst < 1 with an error wrapping ErrInvalidConfig.
func NewTokenBucket(ratePerSecond float64, burst int) (*TokenBucket, error) {
	return &TokenBucket{}, nil
}

// Allow takes one token from key's bucket if there is one.
//
// TODO(lab 02): make these true:
//   - a key seen for the first time starts with a full bucket (burst tokens);
//   - tokens come back at ratePerSecond, never above burst, however often the
//     key is asked: no stretch of time is refilled twice, even under
//     concurrent calls;
//   - one whole token → Allowed, take it, Remaining = whole tokens left;
//   - otherwise refused: take nothing, RetryAfter = time until one whole token
//     is back, rounded UP (a client waiting exactly RetryAfter must succeed);
//   - once a refill time (burst/rate) has passed since the last sweep (the
//     first one counts from NewTokenBucket), every bucket that is full at that
//     instant is forgotten and every other one kept; the keys are swept at
//     most once per refill time.
func (tb *TokenBucket) Allow(ctx context.Context, key string) (Decision, error) {
	return Decision{}, ErrNotImplemented
}

// Len is the number of keys holding state now: buckets not yet forgotten.
//
// TODO(lab 02): a forgotten bucket no longer counts.
func (tb *TokenBucket) Len() int {
	return 0
}
