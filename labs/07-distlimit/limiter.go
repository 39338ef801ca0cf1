// Package distlimit is a token-bucket rate limiter whose buckets live in
// Redis, so every replica of a service shares one quota per tenant.
//
// With N replicas each holding an in-process bucket, a tenant gets N times
// its quota. Moving the bucket to Redis fixes that — and adds a network hop,
// a dependency, and a failure mode. Three properties make it correct:
//
//   - Atomic: refill and consume happen in one Lua script. Read-then-write
//     from the client lets two replicas both see the last token and both
//     take it.
//   - One clock: the script reads Redis' own TIME, so replicas with skewed
//     clocks cannot refill a bucket early.
//   - One round trip: EVALSHA, falling back to EVAL only when Redis has not
//     cached the script (NOSCRIPT).
//
// Keys are Prefix + "{" + key + "}": the hash tag pins each bucket to one
// Redis Cluster slot. A bucket expires once it would be full again, so idle
// tenants cost no memory.
//
// When Redis is down or slow (each decision has its own short Timeout) the
// limiter fails closed by default — refuse, with an error wrapping
// ErrUnavailable — or fails open when configured: allow, and report the
// error to OnError. Fail open where the limiter protects availability (an
// API gateway's fairness limit); fail closed where it protects money (a
// spending budget).
//
// A caller that leaves is not a Redis failure: when the caller's context is
// cancelled or past its deadline, Allow returns that context's error and no
// decision, without OnError or FailOpen.
//
// Lab 07: the types are given; write bucket.lua and the Limiter below.
// Read README.md, then make `make lab-07` green.
package distlimit

import (
	"context"
	_ "embed"
	"errors"
	"time"

	admission "github.com/production-go/gateway-lab/labs/02-admission"
	"github.com/redis/go-redis/v9"
)

var (
	// ErrUnavailable wraps every failure to reach a decision through Redis.
	ErrUnavailable = errors.New("distlimit: redis unavailable")
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("distlimit: invalid config")
	// ErrInvalidKey is returned by Allow for an empty key.
	ErrInvalidKey = errors.New("distlimit: invalid key")
	// ErrNotImplemented is what the stubs return until you write them.
	ErrNotImplemented = errors.New("lab 07: not implemented yet")
)

// DefaultTimeout bounds one decision when Config.Timeout is 0.
const DefaultTimeout = 100 * time.Millisecond

// Decision is the limiter's answer for one request. It is lab 02's own
// type, not a copy: a *Limiter is an admission.Limiter, so lab 02's
// Admitter takes the Redis limiter in place of its in-process buckets.
// Here RetryAfter is computed by the script, rounded up to the microsecond.
type Decision = admission.Decision

var _ admission.Limiter = (*Limiter)(nil) // the compiler checks the drop-in claim

// Config configures a Limiter.
type Config struct {
	Rate     float64 // tokens per second, > 0 and finite
	Burst    int     // bucket size, ≥ 1
	Prefix   string  // key prefix, e.g. "rl:"; keys are Prefix{key}
	FailOpen bool    // when Redis fails: allow (true) or refuse (false, the default)
	// OnError, if set, is called with every Redis failure, whichever way
	// the limiter fails.
	OnError func(error)
	// Timeout bounds one decision; 0 means DefaultTimeout.
	Timeout time.Duration
}

//go:embed bucket.lua
var bucketLua string

var bucketScript = redis.NewScript(bucketLua)

// Limiter is a Redis-backed token bucket per key.
type Limiter struct{} // TODO(lab 07): the fields you need

// New validates cfg and returns a Limiter that runs its script through rdb.
//
// TODO(lab 07): a nil rdb, a Rate that is not positive and finite (NaN
// too), Burst < 1 or a negative Timeout → an error wrapping
// ErrInvalidConfig; Timeout 0 means DefaultTimeout.
func New(rdb redis.Scripter, cfg Config) (*Limiter, error) {
	return &Limiter{}, nil
}

// Key is the Redis key holding key's bucket.
//
// TODO(lab 07): Prefix + "{" + key + "}".
func (l *Limiter) Key(key string) string {
	return key
}

// Allow takes one token from key's bucket if there is one.
//
// TODO(lab 07):
//   - an empty key → an error wrapping ErrInvalidKey (no Redis call, no fail-open);
//   - the caller's ctx already done → its error, no Redis call;
//   - one decision takes at most cfg.Timeout;
//   - on error, the caller's ctx done (cancelled, or its deadline come) → its error,
//     no decision: not a Redis failure, so no OnError and no fail-open;
//   - the limiter's own timeout → ErrUnavailable, not context.DeadlineExceeded;
//   - one round trip to Redis per call once the script is cached there (and
//     still right after a SCRIPT FLUSH), on Redis' clock;
//   - a reply that is not what the script returns is an error, never a panic;
//   - any failure: call OnError; FailOpen → Decision{Allowed: true}, nil;
//     otherwise Decision{}, an error wrapping ErrUnavailable.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	_ = bucketScript // TODO(lab 07): run it
	return Decision{}, ErrNotImplemented
}
