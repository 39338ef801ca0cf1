package quota

import (
	"context"
	"crypto/rand"
	_ "embed"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultLeaseTTL is a lease's lifetime when LeasesConfig.TTL is 0.
const DefaultLeaseTTL = 10 * time.Minute

// LeasesConfig configures Leases.
type LeasesConfig struct {
	// Prefix starts every key's hash tag, {Prefix:tenant}; empty means
	// DefaultPrefix. It must not contain braces.
	Prefix string
	// TTL is how long a lease lives unless renewed or released; 0 means
	// DefaultLeaseTTL. A request longer than TTL must renew its lease
	// (Lease.Renew) while it runs, or it no longer counts once the lease
	// expires; TTL is also how long a crashed replica's slots stay taken.
	TTL time.Duration
	// FailOpen admits requests when Redis cannot decide (the default,
	// false, refuses them).
	FailOpen bool
	// OnError, if set, is called with every Redis failure, whichever way
	// the cap fails; it must be safe for concurrent use.
	OnError func(error)
	// Timeout bounds one Redis call; 0 means DefaultTimeout.
	Timeout time.Duration
}

//go:embed leases.lua
var leasesLua string

var leasesScript = redis.NewScript(leasesLua)

// Leases caps each tenant's requests in flight across every replica that
// uses the same Redis and Prefix. It is safe for concurrent use.
//
// Each admitted request holds a lease: an id in the tenant's sorted set,
// scored by its expiry on Redis' clock. Acquire first drops expired leases,
// then adds one if fewer than max are live — in one script, so replicas
// racing for the last slot cannot both get it. A lease is released when the
// request ends, or expires after TTL if its replica died first.
type Leases struct {
	store
	ttl time.Duration
}

// NewLeases validates cfg and returns Leases that runs its script through
// rdb (a *redis.Client, *redis.ClusterClient or *redis.Ring).
func NewLeases(rdb redis.Scripter, cfg LeasesConfig) (*Leases, error) {
	s, err := newStore(rdb, cfg.Prefix, cfg.Timeout, cfg.FailOpen, cfg.OnError)
	if err != nil {
		return nil, err
	}
	ttl, err := checkSpan("lease TTL", cfg.TTL, DefaultLeaseTTL)
	if err != nil {
		return nil, err
	}
	return &Leases{store: s, ttl: ttl}, nil
}

// Key returns the name of tenant's lease set, hash-tagged {Prefix:tenant}.
func (l *Leases) Key(tenant string) string { return tenantKey(l.prefix, tenant, "leases") }

// cancelledKey names the set of tenant's acquires given up on (see Hold).
func (l *Leases) cancelledKey(tenant string) string { return tenantKey(l.prefix, tenant, "cancelled") }

// Acquire takes one of tenant's max in-flight slots if one is free; it is
// Hold for a caller that needs only to give the slot back.
//
// release is never nil, so it can be deferred at once: it gives the slot
// back, and calling it again, or on a refused or failed Acquire, does
// nothing. It has its own Timeout; if it fails (an error wrapping
// ErrUnavailable) it may be retried, and the lease expires after TTL
// anyway. Like Settle, call it with a context that outlives the request
// (context.WithoutCancel), or a client that hung up keeps its slot for TTL.
func (l *Leases) Acquire(ctx context.Context, tenant string, max int) (release func(context.Context) error, d Decision, err error) {
	lease, d, err := l.Hold(ctx, tenant, max)
	return lease.Release, d, err
}

// Hold takes one of tenant's max in-flight slots if one is free, and
// returns the Lease that holds it: Release gives it back, Renew keeps it
// alive TTL more (a request longer than TTL renews its lease while it
// runs, so TTL can be short and a crashed replica's slots come back soon).
//
// A refused Hold has Decision.Allowed false and a nil Lease (whose methods
// do nothing). When Redis fails, Hold fails closed (an error wrapping
// ErrUnavailable) unless FailOpen is set; then it allows the request, with
// a nil Lease. Either way, a call that failed may still have reached Redis
// and run there after the caller gave up on it (a stalled Redis runs what
// was queued); so a failed Hold cancels its lease's id in the background
// (see Close): it releases the lease if the acquire ran, and, since the
// acquire may run after the cancel (they travel on different connections,
// in an order Redis chooses), leaves a mark for the lease's lifetime under
// which a late acquire of that id takes nothing.
func (l *Leases) Hold(ctx context.Context, tenant string, max int) (*Lease, Decision, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, Decision{}, err
	}
	if max < 1 {
		return nil, Decision{}, fmt.Errorf("%w: in-flight cap %d must be at least 1", ErrInvalidLimit, max)
	}
	lease := &Lease{l: l, keys: []string{l.Key(tenant), l.cancelledKey(tenant)}, id: rand.Text()}
	reply, err := runScript(ctx, l.rdb, l.timeout, leasesScript, lease.keys, 3,
		"acquire", lease.id, max, l.ttl.Milliseconds())
	if err != nil {
		l.undo(ctx, err, leasesScript, lease.keys, "cancel", lease.id, l.ttl.Milliseconds()) // the acquire may yet run

		err, failOpen := l.fail.report(err)
		if failOpen {
			return nil, Decision{Allowed: true}, nil
		}
		return nil, Decision{}, err
	}
	d := Decision{Allowed: reply[0] == 1, Remaining: int(reply[1])}
	if !d.Allowed {
		return nil, d, nil
	}
	return lease, d, nil
}

// Lease is one held in-flight slot. It is safe for concurrent use; a nil
// Lease holds nothing and its methods do nothing.
type Lease struct {
	l        *Leases
	keys     []string // the lease set, and the cancelled ids
	id       string
	released atomic.Bool
}

// Release gives the slot back. A second Release, from any goroutine, does
// nothing. One that fails (an error wrapping ErrUnavailable) is retried in
// the background until Redis answers, within the bounds of a failed Hold's
// cancel (see Close), so a stall does not keep the slot for the lease's
// TTL; the caller may retry it too.
func (lease *Lease) Release(ctx context.Context) error {
	if lease == nil || lease.released.Load() {
		return nil
	}
	l := lease.l
	release := l.scriptCall(leasesScript, lease.keys, "release", lease.id)
	if err := release(ctx); err != nil {
		l.retryCall(ctx, func(bool) bool { return lease.released.Load() }, func(ctx context.Context) error {
			if err := release(ctx); err != nil {
				return err
			}
			lease.released.Store(true)
			return nil
		})
		err, _ := l.fail.report(err)
		return err
	}
	lease.released.Store(true)
	return nil
}

// Renew keeps a live lease alive TTL more from now, on Redis' clock, and
// reports whether it was live: a lease released or already expired (its
// replica stalled longer than TTL) is not brought back.
func (lease *Lease) Renew(ctx context.Context) (bool, error) {
	if lease == nil || lease.released.Load() {
		return false, nil
	}
	l := lease.l
	reply, err := runScript(ctx, l.rdb, l.timeout, leasesScript, lease.keys, 3, "renew", lease.id, l.ttl.Milliseconds())
	if err != nil {
		err, _ := l.fail.report(err)
		return false, err
	}
	return reply[0] == 1, nil
}
