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
//
// Lab 12: the types are given; write quota.lua, the Quota below and
// charge.go. Read README.md, then make `make lab-12` green.
package quotas

import (
	"context"
	_ "embed"
	"errors"
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
	// ErrNotImplemented is what the stubs return until you write them.
	ErrNotImplemented = errors.New("lab 12: not implemented yet")
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
type Quota struct{} // TODO(lab 12): what it needs

// New validates cfg and returns a Quota that runs its script through rdb.
// A nil rdb, a prefix with a brace, a negative window or one below a
// millisecond, or DebtMinutes outside [0, MaxDebtMinutes] is an error
// wrapping ErrInvalidConfig; zero values take the defaults (DefaultPrefix,
// DefaultSettleWindow, one minute of debt).
//
// TODO(lab 12): write it.
func New(rdb redis.Scripter, cfg Config) (*Quota, error) {
	return &Quota{}, nil
}

// Keys returns every key the quota may write for tenant, each carrying the
// hash tag {Prefix:tenant}: on Redis Cluster one script may touch only
// keys of one slot, and an operator reads Keys to find (or delete) what a
// tenant holds.
//
// TODO(lab 12): name the keys your script keeps.
func (q *Quota) Keys(tenant string) []string {
	return nil
}

// Reserve takes estimate tokens from tenant's bucket of perMinute tokens,
// under id, if the bucket holds that many; otherwise it takes nothing and
// the Decision says when the estimate will fit. A Reserve resent with the
// same id takes nothing more. An estimate of 0 passes unless the tenant is
// in debt.
//
// Bad arguments are refused before any Redis call (ErrInvalidArgument, or
// ErrEstimateTooLarge for an estimate above perMinute). A Reserve is one
// round trip: quotaScript.Run sends EVALSHA, and EVAL only when Redis has
// lost the script. A reply the script never returns is
// ErrUnexpectedReply, never a panic; Redis' errors come back wrapped, so
// a caller's cancelled context stays errors.Is-able.
//
// TODO(lab 12): check, run the script, read its reply.
func (q *Quota) Reserve(ctx context.Context, tenant, id string, perMinute, estimate int) (Decision, error) {
	_ = quotaScript // TODO(lab 12): run it
	return Decision{}, ErrNotImplemented
}

// Settle closes tenant's reservation id with the tokens the call used: the
// bucket moves by what Reserve took minus used — never above full, never
// below the debt allowed. It reports whether it applied: false for a
// reservation settled already, never made (then a late Reserve of id takes
// nothing), or reserved SettleWindow or more ago (it stays charged).
//
// Arguments, round trips, replies and errors as for Reserve; used is at
// most MaxPerMinute.
//
// TODO(lab 12): check, run the script, read its reply.
func (q *Quota) Settle(ctx context.Context, tenant, id string, perMinute, used int) (bool, error) {
	return false, ErrNotImplemented
}
