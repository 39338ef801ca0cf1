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
	// TTL is how long a lease lives unless released; 0 means
	// DefaultLeaseTTL. It must be longer than the longest request, because
	// a request still running when its lease expires no longer counts; and
	// it is how long a crashed replica's slots stay taken.
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

// Acquire takes one of tenant's max in-flight slots if one is free.
//
// release is never nil, so it can be deferred at once: it gives the slot
// back, and calling it again, or on a refused or failed Acquire, does
// nothing. It has its own Timeout; if it fails (an error wrapping
// ErrUnavailable) it may be retried, and the lease expires after TTL
// anyway. Like Settle, call it with a context that outlives the request
// (context.WithoutCancel), or a client that hung up keeps its slot for TTL.
//
// A refused Acquire has Decision.Allowed false. When Redis fails, Acquire
// fails closed (an error wrapping ErrUnavailable) unless FailOpen is set;
// then it allows the request.
func (l *Leases) Acquire(ctx context.Context, tenant string, max int) (release func(context.Context) error, d Decision, err error) {
	if err := checkTenant(tenant); err != nil {
		return noRelease, Decision{}, err
	}
	if max < 1 {
		return noRelease, Decision{}, fmt.Errorf("%w: in-flight cap %d must be at least 1", ErrInvalidLimit, max)
	}
	id := rand.Text()
	key := l.Key(tenant)
	reply, err := runScript(ctx, l.rdb, l.timeout, leasesScript, []string{key}, 3,
		"acquire", id, max, l.ttl.Milliseconds())
	if err != nil {
		err, failOpen := l.fail.report(err)
		if failOpen {
			return noRelease, Decision{Allowed: true}, nil
		}
		return noRelease, Decision{}, err
	}
	d = Decision{Allowed: reply[0] == 1, Remaining: int(reply[1])}
	if !d.Allowed {
		return noRelease, d, nil
	}
	var released atomic.Bool
	return func(ctx context.Context) error {
		if released.Load() {
			return nil
		}
		if _, err := runScript(ctx, l.rdb, l.timeout, leasesScript, []string{key}, 3, "release", id); err != nil {
			err, _ := l.fail.report(err)
			return err
		}
		released.Store(true)
		return nil
	}, d, nil
}

func noRelease(context.Context) error { return nil }
