// Package timeouts runs an operation with retries inside three layers of
// time limits, each answering a different question:
//
//   - queue wait (lab 02): how long may a request wait to start?
//   - AttemptTimeout: how long may one try take before we give up on it and
//     try again? A slow attempt is worth retrying.
//   - TotalTimeout: how long has the caller agreed to wait for an answer,
//     all attempts and all waits between them included? When it runs out we
//     stop: there is no budget left to retry with.
//
// Conflating them is how a 20 s timeout becomes 93 s: a deadline per attempt
// instead of around the loop lets three attempts take three deadlines (plus
// the queue wait and the backoffs between them).
//
// Between attempts Do waits a capped exponential backoff with full jitter:
// a uniformly random wait in [0, min(MaxBackoff, BaseBackoff·2^(attempt−1))].
// Without jitter every client that failed together retries together, and a
// blip becomes a synchronised retry storm.
//
// Lab 03: the Policy type is given; write Backoff here and Do in retry.go.
// Read README.md, then make `make lab-03` green.
package timeouts

import (
	"errors"
	"math/rand/v2"
	"time"
)

// ErrInvalidPolicy is returned by Do, without calling op, for a policy that cannot work.
var ErrInvalidPolicy = errors.New("timeouts: invalid policy")

// ErrNotImplemented is what the stubs return until you write them.
var ErrNotImplemented = errors.New("lab 03: not implemented yet")

// Policy says how many times to try and how long to wait.
type Policy struct {
	// MaxAttempts is the most times op is called, the first included (≥ 1).
	MaxAttempts int
	// BaseBackoff is the cap on the wait after the first attempt; it doubles
	// per attempt up to MaxBackoff. 0 means retry without waiting.
	BaseBackoff, MaxBackoff time.Duration
	// AttemptTimeout bounds one attempt; 0 means no per-attempt limit.
	AttemptTimeout time.Duration
	// TotalTimeout bounds everything: attempts and backoffs. 0 means only
	// the caller's own deadline applies.
	TotalTimeout time.Duration
	// Rand is the source of jitter. nil uses the global source; a seeded
	// one replays a failure. A *rand.Rand is not safe for concurrent use:
	// don't share one Policy.Rand across goroutines.
	Rand *rand.Rand
}

// Backoff returns the wait after attempt (1-based).
//
// TODO(lab 03): full jitter: uniform in [0, min(MaxBackoff, BaseBackoff·2^(attempt−1))],
// both ends included.
//   - drawn from p.Rand when it is set (a seeded source replays a failure), else
//     from the global source;
//   - never negative, never past MaxBackoff, never a panic, for any attempt up
//     to math.MaxInt;
//   - every valid policy works: BaseBackoff 0 (always 0, for any attempt) and
//     MaxBackoff math.MaxInt64.
func (p Policy) Backoff(attempt int) time.Duration {
	return 0
}
