package quota

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	quotas "github.com/production-go/gateway-lab/solutions/12-quotas"
	"github.com/redis/go-redis/v9"
)

// MaxPerMinute is the largest quota Reserve accepts, so that the script's
// exact integer arithmetic stays within what Lua's doubles hold.
const MaxPerMinute = quotas.MaxPerMinute

// DefaultSettleWindow is how long a reservation may wait for its Settle
// when TokensConfig.SettleWindow is 0.
const DefaultSettleWindow = time.Hour

// TokensConfig configures Tokens.
type TokensConfig struct {
	// Prefix starts every key's hash tag, {Prefix:tenant}; empty means
	// DefaultPrefix. It must not contain braces.
	Prefix string
	// FailOpen admits requests when Redis cannot decide (the default,
	// false, refuses them).
	FailOpen bool
	// OnError, if set, is called with every Redis failure, whichever way
	// the quota fails; it must be safe for concurrent use.
	OnError func(error)
	// Timeout bounds one Redis call; 0 means DefaultTimeout.
	Timeout time.Duration
	// SettleWindow is how long a reservation stays open for Settle; 0
	// means DefaultSettleWindow. A Settle after it is a no-op and the
	// reservation stays charged its estimate. Make it longer than the
	// longest request.
	SettleWindow time.Duration
	// DebtMinutes is how many minutes of a tenant's quota it may owe —
	// usage above what it reserved — before the rest is forgiven; 0 means
	// 1, at most MaxDebtMinutes. More makes an underestimate (a prompt of
	// images or files) cost what it used; less keeps one absurd usage
	// report from locking a tenant out for long.
	DebtMinutes int
}

// MaxDebtMinutes bounds TokensConfig.DebtMinutes: the script's arithmetic
// stays exact (below 2^53) for a quota of MaxPerMinute.
const MaxDebtMinutes = quotas.MaxDebtMinutes

// Tokens is a token quota per tenant, shared by every replica that uses the
// same Redis and Prefix. It is safe for concurrent use.
//
// The quota is a token bucket of capacity perMinute, refilled continuously
// at perMinute/60 tokens per second by Redis' clock, so a tenant may spend
// a full minute's quota at once and then perMinute per minute. A request
// reserves its estimate before the upstream call and settles its actual
// usage after it.
//
// The bucket, the reservations and the script are lab 12's (package
// quotas, the lesson on why each is so). Tokens adds what a service needs
// around them: a timeout of its own on each Redis call, fail-open, errors
// reported to OnError, a Reservation that settles once, and the background
// undo of a call that may have run after it timed out.
type Tokens struct {
	store
	lab *quotas.Quota
}

// NewTokens validates cfg and returns Tokens that runs its script through
// rdb (a *redis.Client, *redis.ClusterClient or *redis.Ring).
func NewTokens(rdb redis.Scripter, cfg TokensConfig) (*Tokens, error) {
	s, err := newStore(rdb, cfg.Prefix, cfg.Timeout, cfg.FailOpen, cfg.OnError)
	if err != nil {
		return nil, err
	}
	window, err := checkSpan("settle window", cfg.SettleWindow, DefaultSettleWindow)
	if err != nil {
		return nil, err
	}
	if cfg.DebtMinutes < 0 || cfg.DebtMinutes > MaxDebtMinutes {
		return nil, fmt.Errorf("%w: debt of %d minutes is outside [0, %d]", ErrInvalidConfig, cfg.DebtMinutes, MaxDebtMinutes)
	}
	lab, err := quotas.New(rdb, quotas.Config{Prefix: s.prefix, SettleWindow: window, DebtMinutes: cfg.DebtMinutes})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Tokens{store: s, lab: lab}, nil
}

// Keys returns the names of tenant's keys: its bucket, its open
// reservations and their estimates. Each carries the hash tag
// {Prefix:tenant}.
func (q *Tokens) Keys(tenant string) []string { return q.lab.Keys(tenant) }

// Reserve takes estimate tokens from tenant's quota of perMinute tokens
// per minute if the bucket holds at least that many, and returns the
// Reservation to settle once the actual usage is known.
//
// A bucket short of estimate takes nothing and returns a nil Reservation
// with Decision.Allowed false and RetryAfter the time until estimate tokens
// are back. An estimate of 0 passes unless the tenant is in debt (see
// Settle). An estimate larger than perMinute is refused with
// ErrEstimateTooLarge: it could never fit.
//
// When Redis fails, Reserve fails closed (an error wrapping ErrUnavailable)
// unless FailOpen is set; then it allows the request with a Reservation
// whose Settle does nothing. Either way, a failed call may still have
// reached Redis and run there after the caller gave up on it, so a failed
// Reserve settles its id at zero in the background (see Close) — harmless
// if nothing was reserved.
func (q *Tokens) Reserve(ctx context.Context, tenant string, perMinute, estimate int) (*Reservation, Decision, error) {
	if err := checkTenant(tenant); err != nil {
		return nil, Decision{}, err
	}
	switch {
	case perMinute < 1 || perMinute > MaxPerMinute:
		return nil, Decision{}, fmt.Errorf("%w: %d tokens per minute is outside [1, %d]", ErrInvalidLimit, perMinute, MaxPerMinute)
	case estimate < 0:
		return nil, Decision{}, fmt.Errorf("%w: negative estimate %d", ErrInvalidLimit, estimate)
	case estimate > perMinute:
		return nil, Decision{}, fmt.Errorf("%w: %d tokens estimated, the quota holds %d per minute", ErrEstimateTooLarge, estimate, perMinute)
	}
	r := &Reservation{q: q, tenant: tenant, id: rand.Text(), perMinute: perMinute, estimate: estimate}
	d, err := q.call(ctx, func(ctx context.Context) (quotas.Decision, error) {
		return q.lab.Reserve(ctx, tenant, r.id, perMinute, estimate)
	})
	if err != nil {
		// The reserve may yet run: settle its id at zero, so it cannot stay
		// charged for a request that never ran (and if the settle runs
		// first, its marker makes the late reserve take nothing).
		q.undoCall(ctx, err, r.settleCall(0))
		err, failOpen := q.fail.report(err)
		if failOpen {
			return &Reservation{noop: true, estimate: estimate}, Decision{Allowed: true}, nil
		}
		return nil, Decision{}, err
	}
	if !d.Allowed {
		return nil, Decision(d), nil
	}
	return r, Decision(d), nil
}

// call runs one of lab 12's calls within the store's timeout.
func (q *Tokens) call(ctx context.Context, f func(context.Context) (quotas.Decision, error)) (quotas.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, q.timeout)
	defer cancel()
	return f(ctx)
}

// Reservation is estimate tokens taken from a tenant's quota, waiting for
// the actual usage. It is safe for concurrent use.
//
// A reservation never settled stays charged its estimate: a stream cut
// before the upstream reported usage, or a replica that crashed mid-request,
// costs the tenant exactly what was reserved — never more, and never the
// free pass that charging only after the call would give.
type Reservation struct {
	q         *Tokens
	tenant    string
	id        string
	perMinute int
	estimate  int
	noop      bool        // admitted while Redis was down: nothing to settle
	settled   atomic.Bool // a Settle succeeded; later ones need no round trip
}

// Estimate returns the number of tokens reserved.
func (r *Reservation) Estimate() int {
	if r == nil {
		return 0
	}
	return r.estimate
}

// Settle reconciles the reservation with the tokens actually used, in one
// atomic step: it gives back estimate−actual (the bucket never above its
// capacity) or charges actual−estimate more. An underestimate may leave the
// bucket in debt, down to one minute's quota below zero, and then every
// request waits until the refill has paid it back — honest accounting
// rather than a free overshoot.
//
// Settle applies at most once: a second call, from any goroutine, is a
// no-op that returns nil, and so is a retry after an error whose first
// attempt did reach Redis (Redis remembers which reservations are open).
// A Settle after the SettleWindow, on a nil Reservation (a refused Reserve)
// or on one admitted by FailOpen does nothing and returns nil.
//
// When Redis fails it returns an error wrapping ErrUnavailable (reported to
// OnError too), and retries in the background until Redis answers, a few
// times over about 1.6 s at the default Timeout (Close waits for them); the
// caller may retry it too. A negative usage, or one above
// MaxPerMinute, is refused with ErrInvalidLimit and changes nothing.
//
// Settle with a context that outlives the request — for example
// context.WithoutCancel(r.Context()) — since the request's own context is
// often already cancelled by then (a client that hung up mid-stream), and a
// cancelled context settles nothing.
func (r *Reservation) Settle(ctx context.Context, actual int) error {
	if actual < 0 {
		return fmt.Errorf("%w: negative usage %d", ErrInvalidLimit, actual)
	}
	if actual > MaxPerMinute {
		return fmt.Errorf("%w: usage %d is above %d", ErrInvalidLimit, actual, MaxPerMinute)
	}
	if r == nil || r.noop || r.settled.Load() {
		return nil
	}
	q := r.q
	err := r.settleCall(actual)(ctx)
	if err != nil {
		// Retried in the background (a settle is idempotent by id): a
		// blip must not leave the reservation charged its estimate when
		// the usage was less, or forgive usage above it.
		if ctx.Err() == nil {
			q.retryCall(ctx, func(set bool) bool {
				if set {
					r.settled.Store(true)
				}
				return r.settled.Load()
			}, r.settleCall(actual))
		}
		err, _ := q.fail.report(err)
		return err
	}
	r.settled.Store(true)
	return nil
}

// settleCall is the settle of r at used tokens, within the store's timeout.
func (r *Reservation) settleCall(used int) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := r.q.call(ctx, func(ctx context.Context) (quotas.Decision, error) {
			_, err := r.q.lab.Settle(ctx, r.tenant, r.id, r.perMinute, used)
			return quotas.Decision{}, err
		})
		if errors.Is(err, quotas.ErrInvalidArgument) {
			return nil // nothing a retry could change
		}
		return err
	}
}
