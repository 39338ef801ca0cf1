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
package distlimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"time"

	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/redis/go-redis/v9"
)

var (
	// ErrUnavailable wraps every failure to reach a decision through Redis.
	ErrUnavailable = errors.New("distlimit: redis unavailable")
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("distlimit: invalid config")
	// ErrInvalidKey is returned by Allow for an empty key.
	ErrInvalidKey = errors.New("distlimit: invalid key")
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

// Limiter is a Redis-backed token bucket per key. It is safe for concurrent use.
type Limiter struct {
	rdb redis.Scripter
	cfg Config
}

// New validates cfg and returns a Limiter that runs its script through rdb
// (a *redis.Client, *redis.ClusterClient or *redis.Ring).
func New(rdb redis.Scripter, cfg Config) (*Limiter, error) {
	switch {
	case rdb == nil:
		return nil, fmt.Errorf("%w: no Redis client", ErrInvalidConfig)
	case !(cfg.Rate > 0) || math.IsInf(cfg.Rate, 0):
		return nil, fmt.Errorf("%w: rate %v per second must be a positive finite number", ErrInvalidConfig, cfg.Rate)
	case cfg.Burst < 1:
		return nil, fmt.Errorf("%w: burst %d must be at least 1", ErrInvalidConfig, cfg.Burst)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: timeout %s must not be negative", ErrInvalidConfig, cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Limiter{rdb: rdb, cfg: cfg}, nil
}

// Key is the Redis key holding key's bucket.
func (l *Limiter) Key(key string) string { return l.cfg.Prefix + "{" + key + "}" }

// Allow takes one token from key's bucket if there is one.
//
// When the caller's ctx is cancelled or its deadline passes, before or
// during the call, Allow returns ctx's error (context.Canceled or
// context.DeadlineExceeded) and no decision: the caller left, Redis did not
// fail, so neither OnError nor FailOpen applies. When the limiter's own
// Timeout runs out first, that is a Redis failure: ErrUnavailable, and not
// context.DeadlineExceeded — the caller's deadline is not what ran out.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	if key == "" {
		return Decision{}, fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if err := expired(ctx); err != nil {
		return Decision{}, fmt.Errorf("distlimit: %w", err) // no token spent for a caller who left
	}
	rctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	reply, err := bucketScript.Run(rctx, l.rdb, []string{l.Key(key)}, l.cfg.Rate, l.cfg.Burst).Result()
	if err != nil {
		if cerr := expired(ctx); cerr != nil {
			return Decision{}, fmt.Errorf("distlimit: %w", cerr)
		}
		if expired(rctx) != nil {
			return l.failed(fmt.Errorf("%w: no answer within %s", ErrUnavailable, l.cfg.Timeout))
		}
		return l.failed(fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	d, err := parseReply(reply)
	if err != nil {
		return l.failed(fmt.Errorf("%w: %w", ErrUnavailable, err))
	}
	return d, nil
}

// expired returns ctx's error, or context.DeadlineExceeded once its deadline
// has come even if ctx.Err() does not say so yet (a network read times out
// at the deadline, racing the context's own timer).
func expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

func (l *Limiter) failed(err error) (Decision, error) {
	if l.cfg.OnError != nil {
		l.cfg.OnError(err)
	}
	if l.cfg.FailOpen {
		return Decision{Allowed: true}, nil
	}
	return Decision{}, err
}

// parseReply reads the script's {allowed, remaining, retry_after_us} reply
// without trusting its shape.
func parseReply(reply any) (Decision, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 3 {
		return Decision{}, fmt.Errorf("unexpected reply %T %v: want 3 integers", reply, reply)
	}
	var n [3]int64
	for i, v := range vals {
		x, ok := v.(int64)
		if !ok || x < 0 {
			return Decision{}, fmt.Errorf("unexpected reply element %d: %T %v", i, v, v)
		}
		n[i] = x
	}
	return Decision{
		Allowed:    n[0] == 1,
		Remaining:  int(n[1]),
		RetryAfter: time.Duration(n[2]) * time.Microsecond,
	}, nil
}
