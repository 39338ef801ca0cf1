// Package gateway is the capstone: it composes admission (lab 02), layered
// timeouts and retries (lab 03), a circuit breaker per upstream model
// (lab 04), in-flight accounting for shutdown (lab 05) and the
// blocking-call bridge (lab 06) into one request path, in this order:
//
//	closing? → the tenant's in-flight cap → its rate limit → a slot within
//	MaxQueueWait (queue wait recorded) → total deadline starts → pick a
//	target: pinned → that provider, one attempt, no fallback; otherwise the
//	route's (provider, model) targets in order, skipping any whose breaker is
//	open, starting after the one that just failed → the attempt, with its
//	own timeout, through the bridge → success: return | retryable failure,
//	attempts left: the next target at once if this request has not tried it
//	yet, else a full-jitter backoff inside the deadline → the slot released,
//	whatever happened.
//
// Health is kept per target — a (provider, upstream model) pair — because
// one model of a provider can be down while another answers.
//
// Metrics go through the small Observer interface, so this package does not
// depend on Prometheus.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/production-go/gateway-lab/solutions/04-breaker"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	"github.com/production-go/gateway-lab/solutions/06-bridge"
	"github.com/production-go/gateway-lab/solutions/chatapi"
	"go.opentelemetry.io/otel/trace"
)

// Request is one generation request.
type Request struct {
	Tenant   string // who is asking: the rate-limit key
	Provider string // pinned provider name; "" means any healthy one
	Prompt   string
	// Route, if set (and Provider is not), replaces the provider priority
	// order for this request: the targets are tried in order, each asking
	// its provider for its own upstream model. The HTTP layer's route table
	// fills it from the public model name; the targets must come from
	// configuration, since the gateway keeps a breaker for each.
	Route []Target
	// FallbackOn lists upstream error codes ("context_length_exceeded") or
	// HTTP statuses ("413") after which the next target is tried even
	// though the error is the request's own fault: another model may accept
	// what this one refused. Other 4xx answers end the request.
	FallbackOn []string
	// Model is the upstream model the provider should ask for; the gateway
	// sets it from the route's target for each attempt. "" means the
	// provider's own default.
	Model string
	// Chat, if set, is the caller's OpenAI chat request as sent. The gateway
	// never reads it; a provider that speaks the same wire format forwards
	// it (with Model), others answer Prompt. Either Prompt or Chat is required.
	Chat *chatapi.Request
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
	// Raw is the upstream's answer as it came (an OpenAI chat completion),
	// for the HTTP layer to pass on untouched; nil from a provider that
	// answers in text.
	Raw []byte
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

// DefaultModeler is a Provider that names the upstream model it asks for
// when a request does not say; the gateway then keeps one breaker for
// "no model" and that model, not two.
type DefaultModeler interface{ DefaultModel() string }

// Response is Generate's result.
type Response struct {
	Provider string // the provider that answered
	Model    string
	Text     string
	Usage    *Usage // as the answering upstream reported it; nil if it did not
	Raw      []byte // the answering upstream's own bytes, if it sent an OpenAI answer
	Attempts int
	// QueueWait is the time spent waiting for a slot.
	QueueWait time.Duration
	// Latency is the time from admission to answer — attempts and backoffs —
	// and excludes QueueWait, so the two can be told apart.
	Latency time.Duration
	// Upstream is the time spent inside provider calls, every attempt
	// included; Backoff the time spent waiting between attempts. What is
	// left of a request's time is the gateway's own overhead.
	Upstream, Backoff time.Duration
}

var (
	// ErrRateLimited: the tenant is over its rate; see RateLimitError.
	ErrRateLimited = errors.New("gateway: rate limited")
	// ErrTenantBusy: the tenant already has MaxPerTenant requests in flight.
	// It is a RateLimitError too: the tenant should slow down, not go elsewhere.
	ErrTenantBusy = errors.New("gateway: tenant has too many requests in flight")
	// ErrOverloaded: no slot within MaxQueueWait.
	ErrOverloaded = errors.New("gateway: overloaded")
	// ErrClosed: the gateway is shutting down.
	ErrClosed = errors.New("gateway: closed")
	// ErrNoHealthyProvider: every target's breaker is open. The error is a
	// RetryAfterer: the time until the first of them lets a probe through.
	ErrNoHealthyProvider = errors.New("gateway: no healthy provider")
	// ErrUnknownProvider: the pinned provider, or a route's, does not exist.
	ErrUnknownProvider = errors.New("gateway: unknown provider")
	// ErrInvalidRequest: the request is malformed (no tenant, no prompt).
	ErrInvalidRequest = errors.New("gateway: invalid request")
	// ErrLimiterFailed: the rate limiter could not decide (a shared one whose
	// store is down, failing closed). The request was not admitted.
	ErrLimiterFailed = errors.New("gateway: rate limiter failed")
	// ErrInvalidConfig: New was given settings that cannot work.
	ErrInvalidConfig = errors.New("gateway: invalid config")
	// ErrRetryBudgetExhausted: Config.RetryBudget refused an attempt after
	// the first. The error wraps the last attempt's error too, so the caller
	// hears what the upstream said.
	ErrRetryBudgetExhausted = errors.New("gateway: retry budget exhausted")
)

// RateLimitError is returned when the tenant is over its rate (it wraps
// ErrRateLimited) or over its in-flight cap (it wraps ErrTenantBusy).
type RateLimitError struct {
	RetryAfter time.Duration
	busy       bool
}

func (e *RateLimitError) Error() string {
	if e.busy {
		return fmt.Sprintf("gateway: tenant has too many requests in flight, retry after %s", e.RetryAfter)
	}
	return fmt.Sprintf("gateway: rate limited, retry after %s", e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrRateLimited) — or ErrTenantBusy — true.
func (e *RateLimitError) Unwrap() error {
	if e.busy {
		return ErrTenantBusy
	}
	return ErrRateLimited
}

// Permanent marks a provider error as not worth retrying on any provider
// (a 400: the same prompt fails everywhere). errors.Is/As still see err.
// An upstream 4xx other than 408 and 429 (a StatusCoder) is treated the same
// way without the mark.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// Observer receives the gateway's measurements. Methods must be quick and
// safe for concurrent use.
type Observer interface {
	// Admitted: a request got a slot after waiting queueWait.
	Admitted(tenant string, queueWait time.Duration)
	// Rejected: a request was refused before any provider call; reason is
	// one of the Reject… constants.
	Rejected(tenant, reason string)
	// Attempt: one provider call ended (err nil on success).
	Attempt(provider string, attempt int, took time.Duration, err error)
	// BreakerChanged: a provider's breaker moved between "closed", "open", "half-open".
	BreakerChanged(provider, from, to string)
	// Late: a provider call finished after its attempt had given up on it
	// (a provider that ignored its context); took is the call's whole duration.
	Late(took time.Duration, err error)
}

// TargetObserver is an Observer that also wants the upstream model: when
// the Observer implements it, the gateway calls these instead of Attempt
// and BreakerChanged. Model is the target's model ("" for the provider's
// default when the provider does not name it).
type TargetObserver interface {
	Observer
	TargetAttempt(t Target, attempt int, took time.Duration, err error)
	TargetBreakerChanged(t Target, from, to string)
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
	// Limiter, if set, replaces the in-process token bucket RatePerSecond
	// and Burst would build — a limiter shared by every replica (secure_app
	// passes lab 07's Redis limiter, per tier).
	Limiter       admission.Limiter
	MaxConcurrent int           // requests in flight
	MaxQueueWait  time.Duration // 0: refuse at once when full
	// MaxPerTenant caps one tenant's requests in flight (queued or
	// running), so a tenant within its rate cannot take every slot; 0 means
	// no cap.
	MaxPerTenant int

	MaxAttempts             int
	BaseBackoff, MaxBackoff time.Duration
	AttemptTimeout          time.Duration // > 0
	TotalTimeout            time.Duration // > 0

	FailureThreshold int           // consecutive failures that open a target's breaker
	RecoveryTimeout  time.Duration // how long it stays open before one probe

	// MaxProviderCalls bounds provider calls running at once, abandoned ones
	// included; 0 means 2 × MaxConcurrent.
	MaxProviderCalls int

	Observer Observer // nil: NopObserver
	// Tracer, if set, records a span for each request's admission and
	// each attempt, as children of the span in the request's context (the
	// HTTP layer's). nil records nothing.
	Tracer trace.TracerProvider
	// Rand is the jitter source; nil: the global one. The gateway locks it,
	// so one seeded source may serve every request (a single request's
	// backoffs replay from the seed; concurrent ones interleave).
	Rand *rand.Rand
	// RetryBudget, if set, must allow every attempt after a request's
	// first: the first attempt deposits to its provider, each later one
	// withdraws from the provider it goes to, and a refusal ends the
	// request at once with the last attempt's error (wrapped in
	// ErrRetryBudgetExhausted). nil: MaxAttempts is the only limit.
	RetryBudget RetryBudget
}

// RetryBudget keeps retries to a share of recent traffic per provider, so a
// fleet of gateways cannot multiply an outage (lab 10's *hedging.Budget is
// one). Safe for concurrent use.
type RetryBudget interface {
	// Deposit records one request whose first attempt goes to provider.
	Deposit(provider string)
	// Withdraw takes one extra attempt to provider, if the budget has one.
	Withdraw(provider string) bool
}

// RetryBudgetObserver is an Observer that also counts the attempts a
// RetryBudget refused, by the provider they would have gone to.
type RetryBudgetObserver interface {
	RetryRefused(provider string)
}

// Gateway serves Generate. It is safe for concurrent use.
type Gateway struct {
	cfg       Config
	providers []Provider
	byName    map[string]Provider
	admit     *admission.Admitter
	buckets   *admission.TokenBucket
	tenants   *tenantCap
	inflight  *drain.Drainer
	calls     *bridge.Bridge
	obs       Observer
	tobs      TargetObserver // obs, if it wants targets; else nil
	rand      *rand.Rand
	tracer    trace.Tracer // nil: no spans, and no allocation for them

	mu      sync.RWMutex
	health  map[Target]*breaker.Breaker // per (provider, upstream model), made on first use
	byOrder []Target                    // every provider with its default model, in priority order
}

// New validates cfg and returns a Gateway over providers, in priority order.
func New(cfg Config, providers ...Provider) (*Gateway, error) {
	if err := validate(&cfg, providers); err != nil {
		return nil, err
	}
	var buckets *admission.TokenBucket
	limiter := cfg.Limiter
	if limiter == nil {
		var err error
		if buckets, err = admission.NewTokenBucket(cfg.RatePerSecond, cfg.Burst); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		limiter = buckets
	}
	admit, err := admission.New(admission.Config{Limiter: limiter, MaxConcurrent: cfg.MaxConcurrent, MaxQueueWait: cfg.MaxQueueWait})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	g := &Gateway{cfg: cfg, providers: providers, byName: map[string]Provider{}, admit: admit, buckets: buckets,
		tenants: newTenantCap(cfg.MaxPerTenant), inflight: drain.New(), obs: cfg.Observer,
		health: map[Target]*breaker.Breaker{}}
	g.tobs, _ = cfg.Observer.(TargetObserver)
	if cfg.Tracer != nil {
		g.tracer = cfg.Tracer.Tracer("github.com/production-go/gateway-lab/solutions/08-gateway")
	}
	if cfg.Rand != nil {
		g.rand = rand.New(&lockedSource{src: cfg.Rand})
	}
	g.calls, err = bridge.New(cfg.MaxProviderCalls, bridge.WithOnLate(func(o bridge.Outcome) { g.obs.Late(o.Duration, o.Err) }))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	for _, p := range providers {
		g.byName[p.Name()] = p
		t := g.normal(Target{Provider: p.Name()})
		if _, err := g.breaker(t); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		g.byOrder = append(g.byOrder, t)
	}
	return g, nil
}

func validate(cfg *Config, providers []Provider) error {
	if len(providers) == 0 {
		return fmt.Errorf("%w: no providers", ErrInvalidConfig)
	}
	seen := map[string]bool{}
	for _, p := range providers {
		if name := p.Name(); name == "" || seen[name] {
			return fmt.Errorf("%w: provider names must be unique and non-empty (%q)", ErrInvalidConfig, name)
		}
		seen[p.Name()] = true
	}
	switch {
	case cfg.AttemptTimeout <= 0 || cfg.TotalTimeout <= 0:
		return fmt.Errorf("%w: AttemptTimeout and TotalTimeout must be positive", ErrInvalidConfig)
	case cfg.MaxAttempts < 1 || cfg.BaseBackoff < 0 || cfg.BaseBackoff > cfg.MaxBackoff:
		return fmt.Errorf("%w: need MaxAttempts ≥ 1 and 0 ≤ BaseBackoff ≤ MaxBackoff", ErrInvalidConfig)
	case cfg.MaxPerTenant < 0:
		return fmt.Errorf("%w: MaxPerTenant must not be negative", ErrInvalidConfig)
	case cfg.FailureThreshold < 1:
		return fmt.Errorf("%w: FailureThreshold must be at least 1", ErrInvalidConfig)
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	if cfg.MaxProviderCalls == 0 {
		cfg.MaxProviderCalls = 2 * cfg.MaxConcurrent
	}
	return nil
}

// lockedSource makes one seeded source safe for every request at once.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (s *lockedSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Uint64()
}

// Providers lists the provider names in priority order.
func (g *Gateway) Providers() []string {
	names := make([]string, len(g.providers))
	for i, p := range g.providers {
		names[i] = p.Name()
	}
	return names
}

// BreakerState reports the state ("closed", "open", "half-open") of a
// provider's breaker for its default model, or "" for an unknown provider.
func (g *Gateway) BreakerState(provider string) string {
	return g.TargetState(Target{Provider: provider})
}

// TargetState reports the breaker state of one (provider, model) target:
// "closed" for a target not used yet, "" for an unknown provider.
func (g *Gateway) TargetState(t Target) string {
	if g.byName[t.Provider] == nil {
		return ""
	}
	g.mu.RLock()
	b := g.health[g.normal(t)]
	g.mu.RUnlock()
	if b == nil {
		return breaker.Closed.String()
	}
	return b.State().String()
}

// TenantState is how many tenants the gateway holds state for in this
// process: buckets not yet full again (none with a Config.Limiter), and
// tenants with requests in flight. Idle tenants are forgotten, so it
// shrinks back after a burst of distinct tenants.
func (g *Gateway) TenantState() int {
	n := g.tenants.busy()
	if g.buckets != nil {
		n += g.buckets.Len()
	}
	return n
}

// InFlight is the number of admitted requests now.
func (g *Gateway) InFlight() int { return g.admit.InFlight() }

// Capacity is MaxConcurrent.
func (g *Gateway) Capacity() int { return g.admit.Capacity() }

// Close stops admitting requests (new and queued ones get ErrClosed) and
// waits for those in flight, or for ctx. Abandoned provider calls are
// waited for too, so nothing outlives the gateway.
func (g *Gateway) Close(ctx context.Context) error {
	g.admit.Close()
	if !g.inflight.Drain(ctx) {
		return fmt.Errorf("gateway: close: %d requests still in flight: %w", g.inflight.Active(), ctx.Err())
	}
	if err := g.calls.Close(ctx); err != nil {
		return fmt.Errorf("gateway: close: %w", err)
	}
	return nil
}
