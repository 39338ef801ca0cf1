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
//	failure, attempts left, not pinned: full-jitter backoff inside the
//	deadline, next healthy provider → the slot released, whatever happened.
//
// Metrics go through the small Observer interface, so this package does not
// depend on Prometheus.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
	// Route, if set (and Provider is not), replaces the provider priority
	// order for this request: the targets are tried in order, each asking
	// its provider for its own upstream model. The HTTP layer's route table
	// fills it from the public model name.
	Route []Target
	// Model is the upstream model the provider should ask for; the gateway
	// sets it from the route's target for each attempt. "" means the
	// provider's own default.
	Model string
}

// Target is one step of a route: a provider and the upstream model to ask it for.
type Target struct {
	Provider string
	Model    string
}

// Completion is a provider's answer.
type Completion struct {
	Text  string
	Model string // the upstream model that answered, if the provider knows
	Usage *Usage // token counts as the upstream reported them; nil if it did not
}

// Usage is an upstream's token accounting, passed through so a cost
// dashboard sees what was actually billed (and by which model).
type Usage struct {
	PromptTokens, CompletionTokens, TotalTokens int
}

// Provider generates completions. Generate should honour ctx; one that does
// not is still bounded, through the bridge, by AttemptTimeout.
type Provider interface {
	Name() string
	Generate(ctx context.Context, req Request) (Completion, error)
}

// Response is Generate's result.
type Response struct {
	Provider string // the provider that answered
	Model    string
	Text     string
	Usage    *Usage // as the answering upstream reported it; nil if it did not
	Attempts int
	// QueueWait is the time spent waiting for a slot.
	QueueWait time.Duration
	// Latency is the time from admission to answer — attempts and backoffs —
	// and excludes QueueWait, so the two can be told apart.
	Latency time.Duration
}

var (
	// ErrRateLimited: the tenant is over its rate; see RateLimitError.
	ErrRateLimited = errors.New("gateway: rate limited")
	// ErrOverloaded: no slot within MaxQueueWait.
	ErrOverloaded = errors.New("gateway: overloaded")
	// ErrClosed: the gateway is shutting down.
	ErrClosed = errors.New("gateway: closed")
	// ErrNoHealthyProvider: every provider's breaker is open.
	ErrNoHealthyProvider = errors.New("gateway: no healthy provider")
	// ErrUnknownProvider: the pinned provider does not exist.
	ErrUnknownProvider = errors.New("gateway: unknown provider")
	// ErrInvalidRequest: the request is malformed (no tenant, no prompt).
	ErrInvalidRequest = errors.New("gateway: invalid request")
	// ErrInvalidConfig: New was given settings that cannot work.
	ErrInvalidConfig = errors.New("gateway: invalid config")
)

// RateLimitError is returned when the tenant is over its rate. It wraps ErrRateLimited.
type RateLimitError struct{ RetryAfter time.Duration }

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("gateway: rate limited, retry after %s", e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// Permanent marks a provider error as not worth retrying on any provider
// (a 400: the same prompt fails everywhere). errors.Is/As still see err.
func Permanent(err error) error { return timeouts.Permanent(err) }

// Observer receives the gateway's measurements. Methods must be quick and
// safe for concurrent use.
type Observer interface {
	// Admitted: a request got a slot after waiting queueWait.
	Admitted(tenant string, queueWait time.Duration)
	// Rejected: a request was refused before any provider call. reason is
	// "rate_limited", "overloaded", "closed" or "cancelled".
	Rejected(tenant, reason string)
	// Attempt: one provider call ended (err nil on success).
	Attempt(provider string, attempt int, took time.Duration, err error)
	// BreakerChanged: a provider's breaker moved between "closed", "open", "half-open".
	BreakerChanged(provider, from, to string)
	// Late: a provider call finished after its attempt had given up on it
	// (a provider that ignored its context); took is the call's whole duration.
	Late(took time.Duration, err error)
}

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) Admitted(string, time.Duration)            {}
func (NopObserver) Rejected(string, string)                   {}
func (NopObserver) Attempt(string, int, time.Duration, error) {}
func (NopObserver) BreakerChanged(string, string, string)     {}
func (NopObserver) Late(time.Duration, error)                 {}

// Config configures a Gateway. Zero durations mean "none" where that is
// safe (no backoff, no per-attempt limit) and are refused where it is not.
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

	Observer Observer   // nil: NopObserver
	Rand     *rand.Rand // jitter source; nil: global. Not shared across goroutines: see Generate.
}

// Gateway serves Generate. It is safe for concurrent use.
type Gateway struct {
	cfg       Config
	providers []Provider
	breakers  map[string]*breaker.Breaker
	admit     *admission.Admitter
	inflight  *drain.Drainer
	calls     *bridge.Bridge
	obs       Observer
	// defaultRoute is every provider in priority order, each with its own model.
	defaultRoute []Target
}

// New validates cfg and returns a Gateway over providers, in priority order.
func New(cfg Config, providers ...Provider) (*Gateway, error) {
	if len(providers) == 0 {
		return nil, fmt.Errorf("%w: no providers", ErrInvalidConfig)
	}
	if cfg.AttemptTimeout <= 0 || cfg.TotalTimeout <= 0 {
		return nil, fmt.Errorf("%w: AttemptTimeout and TotalTimeout must be positive", ErrInvalidConfig)
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	if cfg.MaxProviderCalls == 0 {
		cfg.MaxProviderCalls = 2 * cfg.MaxConcurrent
	}
	if cfg.MaxAttempts < 1 || cfg.BaseBackoff < 0 || cfg.BaseBackoff > cfg.MaxBackoff {
		return nil, fmt.Errorf("%w: need MaxAttempts ≥ 1 and 0 ≤ BaseBackoff ≤ MaxBackoff", ErrInvalidConfig)
	}
	limiter, err := admission.NewTokenBucket(cfg.RatePerSecond, cfg.Burst)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	admit, err := admission.New(admission.Config{Limiter: limiter, MaxConcurrent: cfg.MaxConcurrent, MaxQueueWait: cfg.MaxQueueWait})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	g := &Gateway{cfg: cfg, providers: providers, breakers: map[string]*breaker.Breaker{}, admit: admit, inflight: drain.New(), obs: cfg.Observer}
	g.calls, err = bridge.New(cfg.MaxProviderCalls, bridge.WithWorkTimeout(cfg.AttemptTimeout),
		bridge.WithOnLate(func(o bridge.Outcome) { g.obs.Late(o.Duration, o.Err) }))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, p := range providers {
		name := p.Name()
		if _, dup := g.breakers[name]; dup || name == "" {
			return nil, fmt.Errorf("%w: provider names must be unique and non-empty (%q)", ErrInvalidConfig, name)
		}
		b, err := breaker.New(breaker.Config{
			FailureThreshold: cfg.FailureThreshold,
			RecoveryTimeout:  cfg.RecoveryTimeout,
			ProbeTimeout:     cfg.AttemptTimeout,
			OnStateChange: func(from, to breaker.State) {
				g.obs.BreakerChanged(name, from.String(), to.String())
			},
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		g.breakers[name] = b
		g.defaultRoute = append(g.defaultRoute, Target{Provider: name})
	}
	return g, nil
}

// Providers lists the provider names in priority order.
func (g *Gateway) Providers() []string {
	names := make([]string, len(g.providers))
	for i, p := range g.providers {
		names[i] = p.Name()
	}
	return names
}

// BreakerState reports a provider's breaker state ("closed", "open", "half-open"), or "" for an unknown provider.
func (g *Gateway) BreakerState(provider string) string {
	if b, ok := g.breakers[provider]; ok {
		return b.State().String()
	}
	return ""
}

// InFlight is the number of admitted requests now; Capacity is MaxConcurrent.
func (g *Gateway) InFlight() int { return g.admit.InFlight() }

// Capacity is MaxConcurrent.
func (g *Gateway) Capacity() int { return g.admit.Capacity() }
