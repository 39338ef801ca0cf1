package admission

import (
	"context"
)

// TokenBucket is an in-process Limiter with one bucket per key. Buckets are
// created full on first use and refilled lazily when asked: no timer, no
// goroutine.
//
// TODO(lab 02): add the fields you need: the rate, the burst, and a
// mutex-guarded map from key to that key's tokens and last refill time.
type TokenBucket struct{}

// NewTokenBucket returns a Limiter that refills each key at ratePerSecond
// tokens per second, holding at most burst.
//
// TODO(lab 02): refuse rate <= 0 and burst < 1 with an error wrapping ErrInvalidConfig.
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
//     is back, rounded UP (a client waiting exactly RetryAfter must succeed).
func (tb *TokenBucket) Allow(ctx context.Context, key string) (Decision, error) {
	return Decision{}, ErrNotImplemented
}
