// Package quotas is a token quota per tenant in Redis, shared by every
// replica: reserve an estimate before an upstream call, settle the real
// usage after it — atomically, idempotently, on Redis' clock.
//
// A rate limit (lab 07) counts requests, whose cost is known when they
// arrive. Tokens are not: the answer's length is known only when it ends.
// So a request is charged twice over: Reserve takes an estimate from the
// tenant's bucket before the call (and refuses the request if it does not
// fit), and Settle moves the bucket by estimate − used after it — a refund
// when the answer was short, a further charge when it was long. In
// between, every replica sees the reservation: parallel requests cannot
// all fit into the same last tokens.
//
// Four rules make it money-safe:
//
//   - Atomic: each step is one Lua script; the bucket and the reservation
//     change together or not at all.
//   - Idempotent by id: a Reserve or Settle resent after a lost reply is
//     not applied twice, and a Settle that Redis runs before its Reserve
//     (a stalled connection) leaves a marker so the late Reserve takes
//     nothing.
//   - The estimate is Redis' record, not the caller's word: Settle refunds
//     what Reserve took, whatever the caller now claims.
//   - A reservation never settled stays charged: a replica that crashed
//     mid-request costs the tenant its estimate — never the free pass that
//     charging only after the call would give.
//
// What a call should cost when it was cancelled, timed out or cut is a
// rule of its own: Charge.
package quotas

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("quotas: invalid config")
	// ErrInvalidArgument: an empty or brace-holding tenant, an empty id, a
	// quota outside [1, MaxPerMinute], a negative estimate or usage.
	ErrInvalidArgument = errors.New("quotas: invalid argument")
	// ErrEstimateTooLarge: an estimate above the quota could never fit.
	ErrEstimateTooLarge = errors.New("quotas: estimate larger than the quota")
	// ErrUnexpectedReply: Redis answered something the script never
	// returns (a proxy, a different script under the same SHA).
	ErrUnexpectedReply = errors.New("quotas: unexpected reply from redis")
)

const (
	// MaxPerMinute is the largest quota, so that the script's exact
	// integer arithmetic stays within what Lua's doubles hold.
	MaxPerMinute = 1_000_000_000
	// MaxDebtMinutes bounds Config.DebtMinutes, for the same reason.
	MaxDebtMinutes = 60
	// DefaultSettleWindow is Config.SettleWindow when it is 0.
	DefaultSettleWindow = time.Hour
	// DefaultPrefix is Config.Prefix when it is "".
	DefaultPrefix = "quota"
)

// Config configures a Quota.
type Config struct {
	// Prefix starts each key's hash tag, {Prefix:tenant}; "" means
	// DefaultPrefix. It must not contain braces.
	Prefix string
	// SettleWindow is how long a reservation waits for its Settle; 0 means
	// DefaultSettleWindow, and it must be a whole number of milliseconds
	// (Redis' clock, as the script reads it, counts no finer). A Settle
	// SettleWindow or more after its Reserve applies nothing: the
	// reservation stays charged its estimate. Make it longer than the
	// longest request.
	SettleWindow time.Duration
	// DebtMinutes is how many minutes of quota a tenant may owe — usage
	// beyond its reservations — before the rest is forgiven; 0 means 1.
	DebtMinutes int
}

// Decision is Reserve's answer.
type Decision struct {
	Allowed bool
	// Remaining is the whole tokens left after this request (0 in debt).
	Remaining int
	// RetryAfter is, for a refused request, the time until its estimate
	// fits, rounded up to the millisecond; 0 when allowed.
	RetryAfter time.Duration
}

//go:embed quota.lua
var quotaLua string

var quotaScript = redis.NewScript(quotaLua)

// Quota is a token bucket per tenant of perMinute tokens, refilled
// continuously at perMinute/60 a second of Redis' clock, in Redis. A clock
// that steps back refills nothing until it passes the latest time the
// bucket has counted, and Remaining never falls without a charge. Safe for
// concurrent use.
type Quota struct {
	rdb    redis.Scripter
	prefix string
	window time.Duration
	debt   int
}

// New validates cfg and returns a Quota that runs its script through rdb
// (a *redis.Client, *redis.ClusterClient or *redis.Ring).
func New(rdb redis.Scripter, cfg Config) (*Quota, error) {
	switch {
	case rdb == nil || reflect.ValueOf(rdb).Kind() == reflect.Pointer && reflect.ValueOf(rdb).IsNil():
		return nil, fmt.Errorf("%w: no Redis client", ErrInvalidConfig) // a nil *redis.Client too
	case strings.ContainsAny(cfg.Prefix, "{}"):
		return nil, fmt.Errorf("%w: prefix %q must not contain braces: it is inside the keys' hash tag", ErrInvalidConfig, cfg.Prefix)
	case cfg.SettleWindow < 0 || cfg.SettleWindow%time.Millisecond != 0:
		return nil, fmt.Errorf("%w: settle window %s must be 0 or a whole number of milliseconds", ErrInvalidConfig, cfg.SettleWindow)
	case cfg.DebtMinutes < 0 || cfg.DebtMinutes > MaxDebtMinutes:
		return nil, fmt.Errorf("%w: debt of %d minutes is outside [0, %d]", ErrInvalidConfig, cfg.DebtMinutes, MaxDebtMinutes)
	}
	q := &Quota{rdb: rdb, prefix: cfg.Prefix, window: cfg.SettleWindow, debt: max(cfg.DebtMinutes, 1)}
	if q.prefix == "" {
		q.prefix = DefaultPrefix
	}
	if q.window == 0 {
		q.window = DefaultSettleWindow
	}
	return q, nil
}

// Keys returns tenant's keys — its bucket, its open reservations and their
// estimates — each carrying the hash tag {Prefix:tenant}, so that on Redis
// Cluster they share one slot and one script may touch them all.
func (q *Quota) Keys(tenant string) []string {
	tag := "{" + q.prefix + ":" + tenant + "}:"
	return []string{tag + "tokens", tag + "reservations", tag + "estimates"}
}

// Reserve takes estimate tokens from tenant's bucket of perMinute tokens,
// under id, if the bucket holds that many; otherwise it takes nothing and
// the Decision says when the estimate will fit. A Reserve resent with the
// same id takes nothing more. An estimate of 0 passes unless the tenant is
// in debt.
func (q *Quota) Reserve(ctx context.Context, tenant, id string, perMinute, estimate int) (Decision, error) {
	if err := check(tenant, id, perMinute, estimate); err != nil {
		return Decision{}, err
	}
	if estimate > perMinute {
		return Decision{}, fmt.Errorf("%w: %d tokens estimated, the quota holds %d a minute", ErrEstimateTooLarge, estimate, perMinute)
	}
	r, err := q.run(ctx, tenant, "reserve", perMinute, id, estimate)
	if err != nil {
		return Decision{}, fmt.Errorf("quotas: reserve for %s: %w", tenant, err)
	}
	if r[0] == 1 && r[2] != 0 {
		return Decision{}, fmt.Errorf("quotas: reserve for %s: %w: allowed, with a wait of %d ms", tenant, ErrUnexpectedReply, r[2])
	}
	return Decision{Allowed: r[0] == 1, Remaining: int(r[1]), RetryAfter: time.Duration(r[2]) * time.Millisecond}, nil
}

// Settle closes tenant's reservation id with the tokens the call used: the
// bucket moves by what Reserve took minus used — never above full, never
// below the debt allowed. It reports whether it applied: false for a
// reservation settled already, never made (then a late Reserve of id takes
// nothing), or reserved SettleWindow or more ago (it stays charged).
func (q *Quota) Settle(ctx context.Context, tenant, id string, perMinute, used int) (bool, error) {
	if err := check(tenant, id, perMinute, used); err != nil {
		return false, err
	}
	if used > MaxPerMinute {
		return false, fmt.Errorf("%w: usage %d is above %d", ErrInvalidArgument, used, MaxPerMinute)
	}
	r, err := q.run(ctx, tenant, "settle", perMinute, id, used)
	if err != nil {
		return false, fmt.Errorf("quotas: settle for %s: %w", tenant, err)
	}
	return r[0] == 1, nil
}

func check(tenant, id string, perMinute, n int) error {
	switch {
	case tenant == "" || strings.ContainsAny(tenant, "{}"):
		return fmt.Errorf("%w: tenant %q: empty, or a brace that would break the hash tag", ErrInvalidArgument, tenant)
	case id == "":
		return fmt.Errorf("%w: empty reservation id", ErrInvalidArgument)
	case perMinute < 1 || perMinute > MaxPerMinute:
		return fmt.Errorf("%w: %d tokens a minute is outside [1, %d]", ErrInvalidArgument, perMinute, MaxPerMinute)
	case n < 0:
		return fmt.Errorf("%w: negative token count %d", ErrInvalidArgument, n)
	}
	return nil
}

// run runs the script — EVALSHA, EVAL when Redis has not cached it — and
// reads its reply: three non-negative integers, or ErrUnexpectedReply.
func (q *Quota) run(ctx context.Context, tenant, op string, perMinute int, id string, n int) ([3]int64, error) {
	var out [3]int64
	reply, err := quotaScript.Run(ctx, q.rdb, q.Keys(tenant), op, perMinute, id, n, q.window.Milliseconds(), q.debt).Result()
	if errors.Is(err, redis.Nil) {
		return out, fmt.Errorf("%w: nil", ErrUnexpectedReply) // go-redis gives a nil reply as this error
	}
	if err != nil {
		return out, err
	}
	vals, ok := reply.([]any)
	if !ok || len(vals) != len(out) {
		return out, fmt.Errorf("%w: %T %v", ErrUnexpectedReply, reply, reply)
	}
	for i, v := range vals {
		x, ok := v.(int64)
		if !ok || x < 0 {
			return out, fmt.Errorf("%w: element %d is %T %v", ErrUnexpectedReply, i, v, v)
		}
		out[i] = x
	}
	return out, nil
}
