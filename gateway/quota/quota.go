// Package quota keeps per-tenant limits that every replica of a gateway
// shares, in Redis: a token quota (tokens per minute) and a cap on
// requests in flight.
//
// # Why in Redis
//
// A limit kept in each replica's memory is multiplied by the number of
// replicas: three replicas give a tenant three quotas. Here every decision
// is one Lua script that Redis runs atomically, so all replicas read and
// write one state and no interleaving of their requests can pass more than
// the limit.
//
// # Token quotas: reserve, then settle
//
// An LLM request's cost is known only after the upstream answers (the usage
// block, or the last chunk of a stream), but the decision to admit it must be
// taken before. A gateway that checks the quota before the call and charges
// it after lets fifty parallel requests all see the same unspent balance and
// all pass — the overshoot popular gateways are known for. Tokens therefore
// reserves the request's estimate (prompt size + max_tokens) before the call,
// in the same atomic step that checks the balance, and settles after it:
// Settle refunds what the estimate overstated or charges what it understated.
// Parallel reservations cannot spend more than the bucket holds, because each
// one has already taken its estimate when the next one looks.
//
// # One clock: Redis TIME
//
// The scripts read the time with Redis' TIME, never the replica's clock:
// replicas whose clocks are skewed by a second would otherwise refill a
// shared bucket early (or never), and a lease written by a replica whose
// clock runs fast would outlive its TTL.
//
// # One slot per tenant: hash tags
//
// A Lua script may only touch keys of one Redis Cluster slot, and a tenant's
// quota uses two keys (the bucket and its open reservations). Every key of a
// tenant is named {prefix:tenant}:kind; Redis Cluster hashes only the part
// between the braces, so a tenant's keys share a slot while different tenants
// spread over the cluster.
//
// # Keys that clean up after themselves
//
// A bucket key expires when the bucket would be full again (an absent bucket
// reads as full), a lease set when its last lease expires, and the set of
// open reservations when its newest entry leaves the settle window. An idle
// tenant costs no memory, and nothing needs a sweeper.
//
// # Retries apply once
//
// A reply can be lost after Redis applied the command; a client library may
// then resend it, and a caller may retry a Settle that reported an error.
// Every reservation and lease therefore carries a random id, and the
// scripts remember which ids they applied: a resent reserve takes its
// estimate once, a retried Settle refunds once, a resent acquire holds one
// slot.
//
// # When Redis fails
//
// Each call has its own short timeout (Timeout, 50 ms by default), so a slow
// Redis costs a request at most that. Then the limit fails closed by default:
// refuse, with an error wrapping ErrUnavailable. With FailOpen it fails open:
// allow, and report the error to OnError. A quota that protects money (an
// upstream bill) usually fails closed; a fairness limit that protects
// availability may fail open. Invalid arguments (an empty tenant, an estimate
// larger than the quota) are the caller's bug, not an outage: they are
// refused whichever way the limit fails.
//
// # Requirements
//
// Redis 5 or later (scripts that read TIME and then write need effects
// replication, the default since 5), standalone, Sentinel or Cluster; any
// go-redis client that implements redis.Scripter.
package quota

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/redis/go-redis/v9"
)

var (
	// ErrUnavailable wraps every failure to reach a decision through Redis:
	// a network error, a timeout, or a reply of the wrong shape.
	ErrUnavailable = errors.New("quota: redis unavailable")
	// ErrInvalidConfig is returned by NewTokens and NewLeases for settings
	// that cannot work.
	ErrInvalidConfig = errors.New("quota: invalid config")
	// ErrInvalidTenant is returned for an empty tenant or one containing a
	// brace, which would break the key's hash tag.
	ErrInvalidTenant = errors.New("quota: invalid tenant")
	// ErrInvalidLimit is returned for a limit, estimate or usage outside its
	// range (a quota below 1, a negative estimate, …).
	ErrInvalidLimit = errors.New("quota: invalid limit")
	// ErrEstimateTooLarge is returned by Reserve when the estimate is larger
	// than the whole quota: the bucket never holds that much, so the request
	// could never be admitted and waiting would be forever.
	ErrEstimateTooLarge = errors.New("quota: estimate larger than the quota")
)

// DefaultTimeout bounds one Redis call when a config's Timeout is 0.
const DefaultTimeout = 50 * time.Millisecond

// DefaultPrefix starts every key when a config's Prefix is empty.
const DefaultPrefix = "quota"

// Decision is the answer to one Reserve or Acquire: lab 02's
// admission.Decision, the one decision type every limiter here returns.
//
// Remaining is what is left after this request: whole tokens in the
// bucket (0 while it is in debt) for Tokens, free in-flight slots for
// Leases; it is 0 when the decision failed open, because then it is
// unknown. RetryAfter is 0 when allowed. For a refused reservation it is
// the time until the bucket holds the estimate again, computed on Redis'
// clock and rounded up to the millisecond, never down: a retry after
// exactly RetryAfter is admitted unless someone else spent the tokens
// first. A refused lease has no such time (a slot frees when some request
// ends), so it is 0 there.
type Decision = admission.Decision

// checkPrefix validates a configured prefix and applies the default.
func checkPrefix(p string) (string, error) {
	if p == "" {
		return DefaultPrefix, nil
	}
	if strings.ContainsAny(p, "{}") {
		return "", fmt.Errorf("%w: prefix %q must not contain braces: the keys' hash tag is {prefix:tenant}", ErrInvalidConfig, p)
	}
	return p, nil
}

func checkTenant(tenant string) error {
	switch {
	case tenant == "":
		return fmt.Errorf("%w: empty tenant", ErrInvalidTenant)
	case strings.ContainsAny(tenant, "{}"):
		return fmt.Errorf("%w: tenant %q contains a brace, which would break the key's hash tag", ErrInvalidTenant, tenant)
	}
	return nil
}

// tenantKey is the name of one of a tenant's keys: {prefix:tenant}:kind.
func tenantKey(prefix, tenant, kind string) string {
	return "{" + prefix + ":" + tenant + "}:" + kind
}

// failure is how a failed Redis call is reported.
type failure struct {
	failOpen bool
	onError  func(error)
}

// report wraps err in ErrUnavailable, hands it to OnError, and says whether
// the caller should fail open.
func (f failure) report(err error) (wrapped error, open bool) {
	err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	if f.onError != nil {
		f.onError(err)
	}
	return err, f.failOpen
}

// runScript runs s within timeout and returns its reply as n non-negative
// integers, without trusting the reply's shape.
func runScript(ctx context.Context, rdb redis.Scripter, timeout time.Duration, s *redis.Script, keys []string, n int, args ...any) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	reply, err := s.Run(ctx, rdb, keys, args...).Result()
	if err != nil {
		return nil, err
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != n {
		return nil, fmt.Errorf("unexpected reply %T %v: want %d integers", reply, reply, n)
	}
	out := make([]int64, n)
	for i, v := range vals {
		x, ok := v.(int64)
		if !ok || x < 0 {
			return nil, fmt.Errorf("unexpected reply element %d: %T %v", i, v, v)
		}
		out[i] = x
	}
	return out, nil
}

// store is what Tokens and Leases share: the client their scripts run
// through, the keys' prefix, one call's timeout and the way they fail.
type store struct {
	rdb       redis.Scripter
	prefix    string
	timeout   time.Duration
	fail      failure
	undos     *undos        // the undo calls still running (see undo)
	undoSlots chan struct{} // one per undo running, up to maxUndos
}

// undo runs a script in the background, best effort, to take back a call
// that failed: a call the client gave up on may still have reached Redis,
// which runs it when it can (a stalled Redis runs what was queued), and
// the undo — idempotent by id — cleans up after it. The undo is retried,
// its waits doubling from one Timeout (at most DefaultTimeout), until an
// attempt gets an answer: a first attempt sent during the stall may run
// before the call it undoes (they wait on different connections), but an
// answer that comes after the stall means Redis has run what was queued
// before it. At most maxUndos run at once; beyond that the lease's TTL, or
// the reservation's settle window, is the cleanup. It does not make the
// failing request wait, and its own failures are not counted a second
// time. Close waits for it.
func (s store) undo(ctx context.Context, failed error, script *redis.Script, keys []string, args ...any) {
	s.undoCall(ctx, failed, s.scriptCall(script, keys, args...))
}

// undoCall is undo for any idempotent call.
func (s store) undoCall(ctx context.Context, failed error, call func(context.Context) error) {
	if !mayHaveRun(failed) {
		return // refused at dial, say: the call never reached Redis
	}
	s.retryCall(ctx, nil, call)
}

// scriptCall is a call of script with keys and args, bounded by the
// store's timeout.
func (s store) scriptCall(script *redis.Script, keys []string, args ...any) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := runScript(ctx, s.rdb, s.timeout, script, keys, 3, args...)
		return err
	}
}

// retryCall runs an idempotent call in the background until an attempt
// gets an answer, within the bounds undo describes; it calls done after
// the attempt that got one, and stops early once done reports true
// (someone else got an answer). done may be nil. call bounds its own time.
func (s store) retryCall(ctx context.Context, done func(set bool) bool, call func(context.Context) error) {
	if done == nil {
		done = func(bool) bool { return false }
	}
	select {
	case s.undoSlots <- struct{}{}:
	default:
		return // too many undos at once: an outage, not a stall
	}
	if !s.undos.goUnlessClosed(func() {
		defer func() { <-s.undoSlots }()
		ctx := context.WithoutCancel(ctx)
		wait := min(s.timeout, DefaultTimeout)
		for n := range undoAttempts {
			if done(false) {
				return
			}
			if err := call(ctx); err == nil {
				done(true)
				return
			}
			if n < undoAttempts-1 {
				time.Sleep(wait) // a pause between attempts of a background retry, not synchronisation
				wait = min(2*wait, time.Second)
			}
		}
	}) {
		<-s.undoSlots // closed: nothing runs
	}
}

// mayHaveRun reports whether a call that failed with err may still have
// reached Redis: it timed out (or its caller gave up) after it was sent.
// A call refused at dial, or answered with an error, did not run.
func mayHaveRun(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		(errors.As(err, &netErr) && netErr.Timeout())
}

// The undo's bounds: how many attempts (the waits between them double from
// one Timeout, each at most a second: about 1.6 s at the default), and how
// many undos at once.
const (
	undoAttempts = 6
	maxUndos     = 256
)

// Close waits for the undo calls still running (each at most
// undoAttempts attempts apart). Call it before closing the Redis client.
func (s store) Close() { s.undos.close() }

// undos runs the background calls, and stops taking new ones once closed:
// a settle that fails after Close (an abandoned call returning late) is
// not retried against a client about to be closed.
type undos struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func (u *undos) goUnlessClosed(f func()) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return false
	}
	u.wg.Go(f)
	return true
}

func (u *undos) close() {
	u.mu.Lock()
	u.closed = true
	u.mu.Unlock()
	u.wg.Wait()
}

func newStore(rdb redis.Scripter, prefix string, timeout time.Duration, failOpen bool, onError func(error)) (store, error) {
	if rdb == nil {
		return store{}, fmt.Errorf("%w: no Redis client", ErrInvalidConfig)
	}
	prefix, err := checkPrefix(prefix)
	if err != nil {
		return store{}, err
	}
	if timeout, err = checkTimeout(timeout); err != nil {
		return store{}, err
	}
	return store{rdb: rdb, prefix: prefix, timeout: timeout, fail: failure{failOpen: failOpen, onError: onError},
		undos: &undos{}, undoSlots: make(chan struct{}, maxUndos)}, nil
}

// checkSpan validates a lifetime the scripts keep in whole milliseconds
// (what names it in errors); 0 means def.
func checkSpan(what string, d, def time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%w: %s %s must not be negative", ErrInvalidConfig, what, d)
	case d == 0:
		return def, nil
	case d < time.Millisecond:
		return 0, fmt.Errorf("%w: %s %s is below the script's 1ms resolution", ErrInvalidConfig, what, d)
	}
	return d, nil
}

func checkTimeout(d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%w: timeout %s must not be negative", ErrInvalidConfig, d)
	case d == 0:
		return DefaultTimeout, nil
	}
	return d, nil
}
