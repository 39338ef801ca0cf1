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
// Metrics go through the small Observer interface, so this package does not
// depend on Prometheus.
//
// Lab 08: the types are given. Write the Gateway by composing YOUR labs:
//
//	admission "github.com/production-go/gateway-lab/labs/02-admission"
//	"github.com/production-go/gateway-lab/labs/03-timeouts"
//	"github.com/production-go/gateway-lab/labs/04-breaker"
//	drain "github.com/production-go/gateway-lab/labs/05-drain"
//	"github.com/production-go/gateway-lab/labs/06-bridge"
//
// Read README.md, then make `make lab-08` green.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
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

// Response is Generate's result.
type Response struct {
	Provider string // the provider that answered
	Model    string
	Text     string
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
	// ErrNotImplemented is what the stubs return until you write them.
	ErrNotImplemented = errors.New("lab 08: not implemented yet")
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
//
// TODO(lab 08): Generate finds the mark however the provider wrapped it
// further, and never retries that error; Permanent(nil) is nil.
func Permanent(err error) error { return err }

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

	Observer Observer // nil: NopObserver
	// Rand is the jitter source, seeded to replay a failure; nil: the global
	// one. A *rand.Rand is not safe for concurrent use, so the gateway
	// must draw from it under a lock of its own: one seeded source may
	// serve every request (a lone request's backoffs replay from the seed;
	// concurrent ones interleave their draws).
	Rand *rand.Rand
}

// Gateway serves Generate. It is safe for concurrent use.
//
// TODO(lab 08): the fields you need.
type Gateway struct{}

// New validates cfg and returns a Gateway over providers, in priority order.
//
// TODO(lab 08): no providers, duplicate or empty names, MaxAttempts < 1, a
// negative BaseBackoff or one above MaxBackoff, non-positive AttemptTimeout
// or TotalTimeout, a rate that is not positive and finite, Burst,
// MaxConcurrent or FailureThreshold < 1, a negative MaxQueueWait or
// MaxProviderCalls, a non-positive RecoveryTimeout → an error wrapping
// ErrInvalidConfig.
func New(cfg Config, providers ...Provider) (*Gateway, error) {
	return &Gateway{}, nil
}

// Generate runs one request through the whole path (see the package doc).
//
// TODO(lab 08): the path in the package doc, keeping these promises: a
// request that is invalid, or pins a provider that does not exist, is
// refused before it is admitted; once Close has begun, ErrClosed; a tenant
// over its rate gets ErrRateLimited (a *RateLimitError with its RetryAfter),
// a full gateway ErrOverloaded; whatever happens, the slot comes back; a
// pinned request gets one attempt, on that provider; every attempt's outcome
// reaches its provider's breaker and the Observer; a caller who leaves stops
// the upstream call in flight; a retry to a provider this request has not
// tried goes at once, one to a provider it has tried after a backoff;
// Response.QueueWait is the wait for the slot, Latency runs from admission.
func (g *Gateway) Generate(ctx context.Context, req Request) (Response, error) {
	return Response{}, ErrNotImplemented
}

// BreakerState reports a provider's breaker state ("closed", "open",
// "half-open"), or "" for an unknown provider.
func (g *Gateway) BreakerState(provider string) string {
	return ""
}

// InFlight is the number of admitted requests now.
func (g *Gateway) InFlight() int {
	return -1
}

// Close stops admitting requests and waits for those in flight, and for
// abandoned provider calls, or for ctx.
//
// TODO(lab 08): from the first call, new requests and those still queued for
// a slot get ErrClosed; Close returns once the requests in flight and then the
// abandoned provider calls (their late outcomes observed) are done, or, when
// ctx ends first, an error wrapping ctx.Err(). Calling Close twice is safe.
func (g *Gateway) Close(ctx context.Context) error {
	return ErrNotImplemented
}
