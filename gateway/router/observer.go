package router

import (
	"time"

	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
)

// Observer receives the router's measurements. Methods must be quick and
// safe for concurrent use. package telemetry implements it with Prometheus.
type Observer interface {
	// Admitted: a request got a slot after waiting queueWait.
	Admitted(tenant string, queueWait time.Duration)
	// Rejected: a request was refused before any provider call.
	Rejected(tenant string, reason RejectReason)
	// Attempt: one provider call ended (err nil on success); attempt
	// counts from 1.
	Attempt(t Target, attempt int, took time.Duration, err error)
	// BreakerChanged: a target's breaker moved from one state to another.
	BreakerChanged(t Target, from, to breaker.State)
	// Late: a provider call finished after its attempt had given up on it
	// (a provider that ignored its context); took is the call's whole
	// duration.
	Late(took time.Duration, err error)
	// RetryRefused: the retry budget refused an attempt to provider.
	RetryRefused(provider string)
	// Continued: a stream from t broke after its first byte, and this is
	// what became of it (see Router.Stream).
	Continued(t Target, outcome ContinueOutcome)
	// Probed: a background health probe of t, whose breaker is open,
	// ended (err nil: the upstream answered, and the breaker closes).
	Probed(t Target, err error)
}

// RejectReason says why a request was refused before any provider call:
// the one vocabulary of gateway_rejected_total's reason label.
type RejectReason string

// The reasons. The router gives Observer.Rejected the last three; the first
// three are the tenant gate's (gateway/tenant.Gate), asked before the
// router, and reach the same counter through its own observer.
const (
	RejectRateLimited   RejectReason = "rate_limited"  // the tenant is over its rate
	RejectTenantBusy    RejectReason = "tenant_busy"   // the tenant already has its cap of requests in flight
	RejectLimiterFailed RejectReason = "limiter_error" // the rate limiter could not decide, and fails closed
	RejectOverloaded    RejectReason = "overloaded"    // no slot within MaxQueueWait
	RejectClosed        RejectReason = "closed"        // the router is shutting down
	RejectCancelled     RejectReason = "cancelled"     // the caller left while queued
)

// RejectReasons lists every RejectReason, for metrics that start each
// series at 0.
var RejectReasons = []RejectReason{RejectRateLimited, RejectTenantBusy, RejectOverloaded, RejectClosed, RejectCancelled, RejectLimiterFailed}

// NopObserver ignores everything. Embed it to implement only some methods.
type NopObserver struct{}

func (NopObserver) Admitted(string, time.Duration)                      {}
func (NopObserver) Rejected(string, RejectReason)                       {}
func (NopObserver) Attempt(Target, int, time.Duration, error)           {}
func (NopObserver) BreakerChanged(Target, breaker.State, breaker.State) {}
func (NopObserver) Late(time.Duration, error)                           {}
func (NopObserver) RetryRefused(string)                                 {}
func (NopObserver) Continued(Target, ContinueOutcome)                   {}
func (NopObserver) Probed(Target, error)                                {}
