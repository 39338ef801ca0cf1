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
package timeouts

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrInvalidPolicy is returned by Do, without calling op, for a policy that cannot work.
var ErrInvalidPolicy = errors.New("timeouts: invalid policy")

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

func (p Policy) validate() error {
	switch {
	case p.MaxAttempts < 1:
		return fmt.Errorf("%w: MaxAttempts %d must be at least 1", ErrInvalidPolicy, p.MaxAttempts)
	case p.BaseBackoff < 0, p.MaxBackoff < 0, p.AttemptTimeout < 0, p.TotalTimeout < 0:
		return fmt.Errorf("%w: durations must not be negative (base %s, max %s, attempt %s, total %s)",
			ErrInvalidPolicy, p.BaseBackoff, p.MaxBackoff, p.AttemptTimeout, p.TotalTimeout)
	case p.BaseBackoff > p.MaxBackoff:
		return fmt.Errorf("%w: BaseBackoff %s is above MaxBackoff %s", ErrInvalidPolicy, p.BaseBackoff, p.MaxBackoff)
	}
	return nil
}

// Backoff returns the wait after attempt (1-based): uniform in
// [0, min(MaxBackoff, BaseBackoff·2^(attempt−1))], both ends included. It
// never overflows or panics for a valid policy, however large attempt is:
// BaseBackoff 0 is always 0, and MaxBackoff may be math.MaxInt64.
func (p Policy) Backoff(attempt int) time.Duration {
	ceiling := p.ceiling(attempt)
	if ceiling <= 0 {
		return 0
	}
	// Uint64N, not Int64N: the ceiling may be math.MaxInt64 (MaxBackoff has
	// no upper limit), and int64(ceiling)+1 would wrap to a negative n.
	n := uint64(ceiling) + 1
	if p.Rand != nil {
		return time.Duration(p.Rand.Uint64N(n))
	}
	return time.Duration(rand.Uint64N(n))
}

// ceiling is min(MaxBackoff, BaseBackoff·2^(attempt−1)), computed by
// doubling only while the result stays below MaxBackoff, so it cannot wrap.
func (p Policy) ceiling(attempt int) time.Duration {
	if p.BaseBackoff <= 0 {
		return 0
	}
	c := p.BaseBackoff
	for i := 1; i < attempt && c < p.MaxBackoff; i++ {
		if c > p.MaxBackoff/2 {
			return p.MaxBackoff
		}
		c *= 2
	}
	return min(c, p.MaxBackoff)
}
