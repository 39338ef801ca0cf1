// Package gateway is the capstone: it composes admission (lab 02), layered
// timeouts and retries (lab 03), a circuit breaker per provider (lab 04),
// in-flight accounting for shutdown (lab 05) and the blocking-call bridge
// (lab 06) into one request path, in this order:
//
//	closing? → per-tenant rate limit → a slot within MaxQueueWait (queue wait
//	recorded) → total deadline starts → pick a provider: pinned → that one,
//	one attempt, no fallback; otherwise the first whose breaker admits, in
//	priority order, starting after the one that just failed → the attempt,
//	with its own timeout, through the bridge → success: return | retryable
//	failure, attempts left, not pinned: at once if the next provider is one
//	this request has not tried (lab 03's Immediate), else after a full-jitter
//	backoff inside the deadline → the slot released, whatever happened.
//
// Each lab's package does its one job; this one owns the order and the seams.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/production-go/gateway-lab/solutions/03-timeouts"
	"github.com/production-go/gateway-lab/solutions/04-breaker"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	"github.com/production-go/gateway-lab/solutions/06-bridge"
)

// Request is one generation request.
type Request struct {
	Tenant   string // who is asking: the rate-limit key
	Provider string // pinned provider name; "" means any healthy one
	Prompt   string
}

// Completion is a provider's answer.
type Completion struct {
	Text  string
	Model string // the upstream model that answered, if the provider knows
}

// Provider generates completions. Generate should honour ctx, but every call
// goes through the bridge all the same: one that does not is still bounded by
// AttemptTimeout, and the gateway need not know which kind it has.
type Provider interface {
	Name() string
	Generate(ctx context.Context, req Request) (Completion, error)
}

// Response is Generate's result; on an error it still counts the attempts.
type Response struct {
	Provider string // the provider that answered
	Model    string
	Text     string
	Attempts int
	// QueueWait is the time spent waiting for a slot.
	QueueWait time.Duration
	// Latency is the time from admission to answer, backoffs included. It
	// excludes QueueWait, so a queue the gateway built is not blamed on a provider.
	Latency time.Duration
}

var (
	// ErrRateLimited: the tenant is over its rate; see RateLimitError.
	ErrRateLimited = errors.New("gateway: rate limited")
	// ErrOverloaded: no slot within MaxQueueWait.
	ErrOverloaded = errors.New("gateway: overloaded")
	// ErrClosed: the gateway is shutting down.
	ErrClosed = errors.New("gateway: closed")
	// ErrNoHealthyProvider: every breaker the request may use is open.
	ErrNoHealthyProvider = errors.New("gateway: no healthy provider")
	// ErrUnknownProvider: the pinned provider does not exist.
	ErrUnknownProvider = errors.New("gateway: unknown provider")
	// ErrInvalidRequest: the request is malformed (no tenant, no prompt).
	ErrInvalidRequest = errors.New("gateway: invalid request")
	// ErrInvalidConfig: New was given settings that cannot work.
	ErrInvalidConfig = errors.New("gateway: invalid config")
)

// RateLimitError is returned when the tenant is over its rate. It wraps
// ErrRateLimited. RetryAfter is exact: rounding it to whole seconds for a
// header is the HTTP layer's business.
type RateLimitError struct{ RetryAfter time.Duration }

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("gateway: rate limited, retry after %s", e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// Permanent marks a provider error as not worth retrying on any provider
// (a 400: the same prompt fails everywhere). It is lab 03's own mark, so the
// retry loop finds it however the provider wrapped it.
func Permanent(err error) error { return timeouts.Permanent(err) }

// Config configures a Gateway. Zero durations mean "none" where that is
// safe (no backoff, no queueing) and are refused where it is not.
type Config struct {
	RatePerSecond float64 // per tenant
	Burst         int
	MaxConcurrent int           // requests in flight
	MaxQueueWait  time.Duration // 0: refuse at once when full

	MaxAttempts             int
	BaseBackoff, MaxBackoff time.Duration
	AttemptTimeout          time.Duration // > 0
	TotalTimeout            time.Duration // > 0

	FailureThreshold int           // consecutive failures that open a provider's breaker
	RecoveryTimeout  time.Duration // how long it stays open before one probe

	// MaxProviderCalls bounds provider calls running at once, abandoned ones
	// included; 0 means 2 × MaxConcurrent.
	MaxProviderCalls int

	Observer Observer // nil: NopObserver
	// Rand is the jitter source, seeded to replay a failure; nil: the global
	// one. A *rand.Rand is not safe for concurrent use, so the gateway
	// draws from it under a lock of its own: one seeded source may serve
	// every request (a lone request's backoffs replay from the seed;
	// concurrent ones interleave their draws).
	Rand *rand.Rand
}

// lockedSource lets concurrent requests share one seeded source.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (s *lockedSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Uint64()
}

// Gateway serves Generate. It is safe for concurrent use.
type Gateway struct {
	providers []Provider         // in priority order
	breakers  []*breaker.Breaker // one per provider: one that is down is skipped, the others serve
	byName    map[string]int     // index into both
	admit     *admission.Admitter
	inflight  *drain.Drainer
	calls     *bridge.Bridge
	retry     timeouts.Policy
	obs       Observer
}

// New validates cfg and returns a Gateway over providers, in priority order.
func New(cfg Config, providers ...Provider) (*Gateway, error) {
	g, err := build(cfg, providers)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return g, nil
}

// build checks what no lab checks, then lets each lab's constructor refuse its own settings.
func build(cfg Config, providers []Provider) (*Gateway, error) {
	switch {
	case len(providers) == 0:
		return nil, errors.New("no providers")
	case cfg.MaxAttempts < 1 || cfg.AttemptTimeout <= 0 || cfg.TotalTimeout <= 0:
		return nil, errors.New("need MaxAttempts ≥ 1 and positive AttemptTimeout and TotalTimeout")
	case cfg.BaseBackoff < 0 || cfg.BaseBackoff > cfg.MaxBackoff:
		return nil, errors.New("need 0 ≤ BaseBackoff ≤ MaxBackoff")
	}
	obs := cmp.Or[Observer](cfg.Observer, NopObserver{})
	bucket, err := admission.NewTokenBucket(cfg.RatePerSecond, cfg.Burst)
	if err != nil {
		return nil, err
	}
	admit, err := admission.New(admission.Config{Limiter: bucket, MaxConcurrent: cfg.MaxConcurrent, MaxQueueWait: cfg.MaxQueueWait})
	if err != nil {
		return nil, err
	}
	calls, err := bridge.New(cmp.Or(cfg.MaxProviderCalls, 2*cfg.MaxConcurrent),
		bridge.WithOnLate(func(o bridge.Outcome) { obs.Late(o.Duration, o.Err) }))
	if err != nil {
		return nil, err
	}
	var jitter *rand.Rand // nil: timeouts.Do's own, safe for concurrent use
	if cfg.Rand != nil {
		jitter = rand.New(&lockedSource{src: cfg.Rand}) // every request draws from it
	}
	g := &Gateway{providers: slices.Clone(providers), byName: map[string]int{}, admit: admit, inflight: drain.New(), calls: calls, obs: obs,
		retry: timeouts.Policy{MaxAttempts: cfg.MaxAttempts, BaseBackoff: cfg.BaseBackoff, MaxBackoff: cfg.MaxBackoff,
			AttemptTimeout: cfg.AttemptTimeout, TotalTimeout: cfg.TotalTimeout, Rand: jitter}}
	for i, p := range providers {
		name := p.Name()
		if _, dup := g.byName[name]; dup || name == "" {
			return nil, fmt.Errorf("provider names must be unique and non-empty (%q)", name)
		}
		b, err := breaker.New(breaker.Config{FailureThreshold: cfg.FailureThreshold, RecoveryTimeout: cfg.RecoveryTimeout,
			OnStateChange: func(from, to breaker.State) { obs.BreakerChanged(name, from.String(), to.String()) }})
		if err != nil {
			return nil, err
		}
		g.breakers, g.byName[name] = append(g.breakers, b), i
	}
	return g, nil
}

// BreakerState reports a provider's breaker state ("closed", "open",
// "half-open"), or "" for an unknown provider.
func (g *Gateway) BreakerState(provider string) string {
	if i, ok := g.byName[provider]; ok {
		return g.breakers[i].State().String()
	}
	return ""
}

// InFlight is the number of admitted requests now: the slots taken.
func (g *Gateway) InFlight() int { return g.admit.InFlight() }

// Close shuts down in the order that loses nothing: the admitter (requests
// still queued for a slot get ErrClosed), the requests in flight, then the
// provider calls their attempts abandoned. Each step is idempotent, so Close is too.
func (g *Gateway) Close(ctx context.Context) error {
	g.admit.Close()
	if !g.inflight.Drain(ctx) {
		return fmt.Errorf("gateway: close: %d requests still in flight: %w", g.inflight.Active(), ctx.Err())
	}
	if err := g.calls.Close(ctx); err != nil {
		return fmt.Errorf("gateway: close: abandoned provider calls: %w", err)
	}
	return nil
}
