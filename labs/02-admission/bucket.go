package admission

import (
	"context"
)

// TokenBucket is an in-process Limiter with one bucket per key. Buckets are
// created full on first use and refilled lazily when asked: no timer, no
// goroutine. A bucket that is full again is the same as a new one, so
// TokenBucket forgets it: its state is bounded by recent activity.
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
//   - under the lock: read time.Now(), add elapsed × rate tokens, never above burst,
//     and never move the refill time backwards;
//   - one whole token → Allowed, take it, Remaining = whole tokens left;
//   - otherwise refused: take nothing, RetryAfter = time until one whole token
//     is back, rounded UP (a client waiting exactly RetryAfter must succeed);
//   - once a refill time (burst/rate) has passed since the last sweep (the
//     first one counts from NewTokenBucket), delete every bucket that is full
//     at that instant, and keep every other one.
func (tb *TokenBucket) Allow(ctx context.Context, key string) (Decision, error) {
	return Decision{}, ErrNotImplemented
}

// Len is the number of keys holding state now: buckets not yet forgotten.
//
// TODO(lab 02): count the buckets in the map.
func (tb *TokenBucket) Len() int {
	return 0
}
