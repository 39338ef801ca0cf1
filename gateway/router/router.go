// Package router is the gateway's request path in production: it takes a
// caller's chat request, admits it, and tries the (provider, upstream
// model) targets its public model name stands for until one answers, in
// this order:
//
//	closing? → the tenant's in-flight cap → its rate limit → a slot within
//	MaxQueueWait (queue wait recorded) → total deadline starts → pick a
//	target: pinned → that provider, one attempt, no fallback; otherwise the
//	route's targets in order, skipping any whose breaker is open, starting
//	after the one that just failed → the attempt, with its own timeout →
//	success: return | retryable failure, attempts left (and the retry
//	budget allows): the next target at once if this request has not tried
//	it yet, else a full-jitter backoff inside the deadline → the slot
//	released, whatever happened.
//
// It is lab 08's capstone grown into a service: the same composition of
// labs 02–06 (admission, timeouts and retries, a breaker per target, drain
// accounting, the bridge), plus what a deployment needs that the lab does
// not ask — routes of (provider, model) targets with health per target,
// fallback on a refusal another model may accept, Retry-After honoured,
// a per-tenant in-flight cap, a limiter shared by replicas, lab 10's retry
// budget, streaming with first-token and idle limits, and tracing.
// docs/architecture.md lists each addition with the test that proves it.
//
// Measurements leave through the Observer interface, so the router does
// not depend on Prometheus.
package router

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	bridge "github.com/production-go/gateway-lab/solutions/06-bridge"
	"go.opentelemetry.io/otel/trace"
)

// AutoModel is the public model name that means "any healthy provider, in
// priority order".
const AutoModel = "auto"

// Target is one step of a route: a provider and the upstream model to ask
// it for ("" for the provider's default).
type Target struct {
	Provider string
	Model    string
}

// String is "provider" or "provider/model".
func (t Target) String() string {
	if t.Model == "" {
		return t.Provider
	}
	return t.Provider + "/" + t.Model
}

// Route is a public model name and the targets behind it, the primary
// first.
type Route struct {
	Name    string
	Targets []Target
	// FallbackOn lists upstream error codes ("context_length_exceeded") or
	// HTTP statuses ("413") after which the next target is tried although
	// the error is the request's own fault: another model may accept what
	// this one refused. Other 4xx answers end the request.
	FallbackOn []string
	// Continue lists the targets whose upstream continues an assistant
	// prefill (the answer so far, sent as the last message) instead of
	// starting over: a stream that breaks after its first byte may go on
	// there (see Router.Stream). Each must also be in Targets.
	Continue []Target
	// RetrySame: a target that fails with a 5xx or a dropped connection is
	// tried once more, after a backoff, before the route moves on — for a
	// primary much better (or cheaper) than its fallback, whose errors are
	// mostly one-off. Off, the next target is tried at once: better when
	// the fallback is as good and the request is in a hurry.
	RetrySame bool
	// WaitRetryAfter: a target that answers 429 or 503 with a Retry-After
	// of at most this long (and within the request's deadline) is waited
	// for and tried again, once, instead of the route moving on at once —
	// for a provider whose short pauses are cheaper to sit out than its
	// fallback. 0: never waited for while another target is left.
	WaitRetryAfter time.Duration
}

// Request is one caller's request.
type Request struct {
	Tenant string // who is asking: for metrics and spans, and tenant isolation
	// Provider pins one provider: one attempt, no fallback. Resolve sets it
	// for a provider's own name.
	Provider string
	// Route, if set (and Provider is not), is the route the request takes:
	// its targets in order, and its policies (fallback codes, continuation,
	// the same target again). nil means every provider in priority order.
	// Resolve sets it for a route's name, to the table's own (shared,
	// read-only: never modify it).
	Route *Route
	// NoContinue: the caller asked that a broken stream never be
	// continued on another target; it ends with an error instead.
	NoContinue bool
	// Chat is the caller's chat request as sent; required.
	Chat *chatapi.Request
	// Meter, if set, is the request's accounting (a tenant gate's token
	// quota), passed on with every upstream call it makes (llm.Request's).
	Meter llm.Meter
}

// Response is an answered request.
type Response struct {
	Provider string // the provider that answered
	Model    string // the upstream model that answered
	Raw      []byte // the answer as the upstream sent it (Generate; a Stream's went to emit), its usage telling the whole request's cost
	// Usage is what the upstreams that wrote the answer reported, summed
	// over a continued stream's calls: what gateway_tokens_total counts.
	// What the caller is told in the answer can be more: it adds what
	// failed or cut calls were charged (see chatapi.WithUsageAdded).
	Usage    *llm.Usage
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
	// ErrOverloaded: no slot within MaxQueueWait.
	ErrOverloaded = errors.New("router: overloaded")
	// ErrClosed: the router is shutting down.
	ErrClosed = errors.New("router: closed")
	// ErrNoHealthyProvider: every target's breaker is open. The error is an
	// llm.RetryAfterer: the time until the first of them lets a probe through.
	ErrNoHealthyProvider = errors.New("router: no healthy provider")
	// ErrUnknownProvider: the pinned provider, or a route's, does not exist.
	ErrUnknownProvider = errors.New("router: unknown provider")
	// ErrInvalidRequest: the request is malformed (no tenant, no chat).
	ErrInvalidRequest = errors.New("router: invalid request")
	// ErrInvalidConfig: New was given settings that cannot work.
	ErrInvalidConfig = errors.New("router: invalid config")
	// ErrRetryBudgetExhausted: Config.RetryBudget refused an attempt after
	// the first. The error wraps the last attempt's error too, so the caller
	// hears what the upstream said.
	ErrRetryBudgetExhausted = errors.New("router: retry budget exhausted")
)

// Config configures a Router. Each group is one lab's settings as the
// router applies them across a route's targets; New validates them once.
// Zero durations mean "none" where that is safe (no backoff) and are
// refused where they are not.
type Config struct {
	// A tenant's rate and its requests in flight are the tenant gate's
	// (gateway/tenant.Gate), asked before a request reaches the router; the
	// router holds every request to the slots all tenants share.
	Slots Slots
	// Retry is how a request moves through its route's targets.
	Retry Retry
	// Health is each target's breaker, and the probes that close it.
	Health Health

	// MaxProviderCalls bounds calls to providers that do not honour their
	// context running at once, abandoned ones included; 0 means
	// 2 × Slots.MaxConcurrent.
	MaxProviderCalls int

	// Routes are the public model names besides AutoModel and the
	// providers' own names. Each target's breaker exists from the start.
	Routes []Route

	Observer Observer // nil: NopObserver
	// Tracer, if set, records a span for each request's admission and
	// each attempt, as children of the span in the request's context (the
	// HTTP layer's). nil records nothing.
	Tracer trace.TracerProvider
	// Rand is the jitter source; nil: the global one. The router locks it,
	// so one seeded source may serve every request (a single request's
	// backoffs replay from the seed; concurrent ones interleave).
	Rand *rand.Rand
	// RetryBudget, if set, must allow every attempt after a request's
	// first: the first attempt deposits to its provider, each later one
	// withdraws from the provider it goes to, and a refusal ends the
	// request at once with the last attempt's error (wrapped in
	// ErrRetryBudgetExhausted). nil: Retry.MaxAttempts is the only limit.
	RetryBudget RetryBudget
}

// Slots are lab 02's admission without its rate limiter: the requests in
// flight every tenant shares, and how long one waits for a slot.
type Slots struct {
	MaxConcurrent int           // requests in flight (≥ 1)
	MaxQueueWait  time.Duration // 0: refuse at once when full
}

// Retry is lab 03's policy, applied across a route's targets rather than
// to one call: attempts go to the next target, and back off only when a
// request comes back to a target it has tried.
type Retry struct {
	MaxAttempts             int // every attempt, the first included (≥ 1)
	BaseBackoff, MaxBackoff time.Duration
	AttemptTimeout          time.Duration // > 0; streams have StreamLimits instead
	TotalTimeout            time.Duration // > 0
}

// Health is lab 04's breaker, one per target, with what a gateway adds to
// it: background probes, and failures a tenant provokes kept apart.
type Health struct {
	FailureThreshold int           // consecutive failures that open a target's breaker (≥ 1)
	RecoveryTimeout  time.Duration // how long it stays open before one probe
	// ProbeInterval, if positive, turns on background health probes (see
	// probe.go): while a target's breaker is open, its upstream is probed
	// (llm.Prober) after ProbeInterval, then at doubling intervals up to
	// ProbeMaxInterval (0: ProbeInterval), and the first probe that
	// succeeds closes the breaker — whatever RecoveryTimeout says. A probe
	// has Retry.AttemptTimeout. 0: only the breaker's own half-open probe.
	ProbeInterval, ProbeMaxInterval time.Duration
	// IsolateTenantFailures counts the failures a tenant's own requests
	// can provoke — timeouts (an attempt's, or a stream's first-token or
	// idle limit) and an upstream's 403, 408 or 429 (a filter that dislikes
	// a prompt, a request over the upstream's own limits) — towards a
	// target's breaker only once two tenants have had them since the
	// target's last success: one tenant cannot open the breaker for every
	// tenant, nor keep it open by failing the probe. Any other failure (a
	// 5xx, a reset, the gateway's own key refused) counts as usual. For a
	// service whose tenants are authenticated (secure_app): with one
	// tenant, these failures never open a breaker, and its attempts fail
	// over instead.
	IsolateTenantFailures bool
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

// Router serves Generate and Stream. It is safe for concurrent use.
type Router struct {
	cfg       Config
	providers []llm.Provider
	byName    map[string]llm.Provider
	routes    map[string]*Route
	admit     *admission.Admitter // the slots every tenant shares
	inflight  gate
	calls     *bridge.Bridge
	obs       Observer
	rand      *rand.Rand
	tracer    trace.Tracer // nil: no spans, and no allocation for them

	probeMu   sync.Mutex
	probing   map[Target]bool    // targets with a background probe running
	probeCtx  context.Context    // ends when Close begins
	probeStop context.CancelFunc // nil once Close has begun: no new probes
	probes    sync.WaitGroup

	mu      sync.RWMutex
	health  map[Target]*health // per (provider, upstream model), made on first use
	streaks map[Target]*streak // beside each breaker, for Config.IsolateTenantFailures
	byOrder []Target           // every provider with its default model, in priority order
}

// New validates cfg and returns a Router over providers, in priority order.
func New(cfg Config, providers ...llm.Provider) (*Router, error) {
	if err := validate(&cfg, providers); err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, providers: providers, byName: map[string]llm.Provider{}, routes: map[string]*Route{},
		obs: cfg.Observer, health: map[Target]*health{},
		streaks: map[Target]*streak{}, probing: map[Target]bool{}}
	if err := r.buildAdmission(); err != nil {
		return nil, err
	}
	if cfg.Tracer != nil {
		r.tracer = cfg.Tracer.Tracer("github.com/production-go/gateway-lab/gateway/router")
	}
	if cfg.Rand != nil {
		r.rand = rand.New(&lockedSource{src: cfg.Rand})
	}
	calls, err := bridge.New(cfg.MaxProviderCalls, bridge.WithOnLate(func(o bridge.Outcome) { r.obs.Late(o.Duration, o.Err) }))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	r.calls = calls
	for _, p := range providers {
		r.byName[p.Name()] = p
	}
	for _, p := range providers {
		t := r.normal(Target{Provider: p.Name()})
		if _, _, err := r.healthOf(t); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		r.byOrder = append(r.byOrder, t)
	}
	if err := r.addRoutes(cfg.Routes); err != nil {
		return nil, err
	}
	r.probeCtx, r.probeStop = context.WithCancel(context.Background())
	return r, nil
}

// buildAdmission makes the admitter for the slots: lab 02's, with no rate
// limiter of its own (a tenant's rate is the tenant gate's).
func (r *Router) buildAdmission() error {
	admit, err := admission.New(admission.Config{MaxConcurrent: r.cfg.Slots.MaxConcurrent, MaxQueueWait: r.cfg.Slots.MaxQueueWait})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	r.admit = admit
	return nil
}

func validate(cfg *Config, providers []llm.Provider) error {
	if len(providers) == 0 {
		return fmt.Errorf("%w: no providers", ErrInvalidConfig)
	}
	seen := map[string]bool{}
	for _, p := range providers {
		if name := p.Name(); name == "" || name == AutoModel || seen[name] {
			return fmt.Errorf("%w: provider names must be unique, non-empty and not %q (%q)", ErrInvalidConfig, AutoModel, name)
		}
		seen[p.Name()] = true
	}
	if err := cfg.Retry.validate(); err != nil {
		return err
	}
	if err := cfg.Health.validate(); err != nil {
		return err
	}
	if cfg.Health.ProbeMaxInterval == 0 {
		cfg.Health.ProbeMaxInterval = cfg.Health.ProbeInterval
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	if cfg.MaxProviderCalls == 0 {
		cfg.MaxProviderCalls = 2 * cfg.Slots.MaxConcurrent
	}
	return nil
}

// addRoutes checks the route table against the providers and makes every
// target's breaker, so targets exist (and show in metrics) before the
// first request.
func (r *Router) addRoutes(routes []Route) error {
	for _, rt := range routes {
		switch {
		case rt.Name == "" || rt.Name == AutoModel || r.byName[rt.Name] != nil:
			return fmt.Errorf("%w: route %q: a route needs a name that is not %q and not a provider's name", ErrInvalidConfig, rt.Name, AutoModel)
		case r.routes[rt.Name] != nil:
			return fmt.Errorf("%w: route %q is defined twice", ErrInvalidConfig, rt.Name)
		case len(rt.Targets) == 0:
			return fmt.Errorf("%w: route %q has no targets", ErrInvalidConfig, rt.Name)
		case rt.WaitRetryAfter < 0:
			return fmt.Errorf("%w: route %q: WaitRetryAfter must not be negative", ErrInvalidConfig, rt.Name)
		}
		for _, t := range rt.Targets {
			if r.byName[t.Provider] == nil {
				return fmt.Errorf("%w: route %q: unknown provider %q (have %s)", ErrInvalidConfig, rt.Name, t.Provider, strings.Join(r.Providers(), ", "))
			}
			if _, _, err := r.healthOf(r.normal(t)); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
			}
		}
		for _, t := range rt.Continue {
			if !slices.Contains(rt.Targets, t) {
				return fmt.Errorf("%w: route %q: continue names %s, which is not one of its targets", ErrInvalidConfig, rt.Name, t)
			}
			if !llm.HonoursContext(r.byName[t.Provider]) {
				return fmt.Errorf("%w: route %q: %s cannot continue a stream: its provider does not honour its context", ErrInvalidConfig, rt.Name, t)
			}
		}
		r.routes[rt.Name] = &rt
	}
	return nil
}

// Resolve sets req's targets for a public model name: "" or AutoModel
// means every provider in priority order; a route's name, its targets and
// fallback; a provider's name pins that provider. It reports false for a
// name that is none of these.
func (r *Router) Resolve(model string, req *Request) bool {
	if model == "" || model == AutoModel {
		return true
	}
	if rt := r.routes[model]; rt != nil {
		req.Route = rt
		return true
	}
	if r.byName[model] != nil {
		req.Provider = model
		return true
	}
	return false
}

// Routes lists the route table, in the order it was configured.
func (r *Router) Routes() []Route { return slices.Clone(r.cfg.Routes) }

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

// HasProvider reports whether name is one of the providers.
func (r *Router) HasProvider(name string) bool { return r.byName[name] != nil }

// Providers lists the provider names in priority order.
func (r *Router) Providers() []string {
	names := make([]string, len(r.providers))
	for i, p := range r.providers {
		names[i] = p.Name()
	}
	return names
}

// InFlight is the number of admitted requests now.
func (r *Router) InFlight() int { return r.admit.InFlight() }

// Capacity is MaxConcurrent.
func (r *Router) Capacity() int { return r.admit.Capacity() }

// Close stops admitting requests (new and queued ones get ErrClosed) and
// waits for those in flight, or for ctx. Abandoned provider calls are
// waited for too, so nothing outlives the router.
func (r *Router) Close(ctx context.Context) error {
	r.admit.Close()
	r.stopProbes()
	if !r.inflight.close(ctx) {
		return fmt.Errorf("router: close: %d requests still in flight: %w", r.inflight.active(), ctx.Err())
	}
	if err := r.calls.Close(ctx); err != nil {
		return fmt.Errorf("router: close: %w", err)
	}
	return nil
}

func (c Retry) validate() error {
	switch {
	case c.AttemptTimeout <= 0 || c.TotalTimeout <= 0:
		return fmt.Errorf("%w: Retry.AttemptTimeout and Retry.TotalTimeout must be positive", ErrInvalidConfig)
	case c.MaxAttempts < 1 || c.BaseBackoff < 0 || c.BaseBackoff > c.MaxBackoff:
		return fmt.Errorf("%w: Retry needs MaxAttempts ≥ 1 and 0 ≤ BaseBackoff ≤ MaxBackoff", ErrInvalidConfig)
	}
	return nil
}

func (c Health) validate() error {
	switch {
	case c.FailureThreshold < 1:
		return fmt.Errorf("%w: Health.FailureThreshold must be at least 1", ErrInvalidConfig)
	case c.ProbeInterval < 0 || c.ProbeMaxInterval < 0 || c.ProbeInterval > 0 && c.ProbeMaxInterval > 0 && c.ProbeMaxInterval < c.ProbeInterval:
		return fmt.Errorf("%w: Health needs 0 ≤ ProbeInterval ≤ ProbeMaxInterval", ErrInvalidConfig)
	}
	return nil
}
