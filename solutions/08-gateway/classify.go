package gateway

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"
)

// The interfaces a provider's errors may implement to tell the gateway what
// happened. The gateway finds them through wrapping (errors.As), so a
// provider may wrap its errors freely.
type (
	// StatusCoder is an error that carries the upstream's HTTP status.
	// A 4xx other than 408 and 429 is the caller's fault: the same request
	// fails the same way everywhere, so it is not retried (but see
	// Request.FallbackOn).
	StatusCoder interface{ StatusCode() int }
	// ErrorCoder is an error that carries the upstream's machine-readable
	// error code, such as "context_length_exceeded".
	ErrorCoder interface{ ErrorCode() string }
	// RetryAfterer is an error that says when the upstream wants to be asked
	// again (429 or 503 with Retry-After). When the same target is the only
	// way on, the next attempt waits at least that long — if it fits the
	// deadline.
	RetryAfterer interface{ RetryAfter() time.Duration }
)

// Reason says why a provider call failed, in the words the metrics and logs
// use. ReasonOf is the one place errors are classified.
type Reason string

// The reasons, from the most specific cause to the least.
const (
	ReasonNone        Reason = ""             // the call succeeded
	ReasonCancelled   Reason = "cancelled"    // the caller left (not the provider's fault)
	ReasonTimeout     Reason = "timeout"      // an attempt, first-token or idle limit ran out
	ReasonRateLimited Reason = "rate_limited" // the upstream answered 429
	ReasonServer      Reason = "server_error" // the upstream answered 5xx
	ReasonClient      Reason = "client_error" // the upstream answered another 4xx
	ReasonConnection  Reason = "connection"   // no answer: refused, reset, DNS
	ReasonOther       Reason = "other"        // anything else (a malformed answer, a panic)
)

// ReasonOf classifies a provider error. A nil error is ReasonNone.
func ReasonOf(err error) Reason {
	var (
		sc     StatusCoder
		netErr net.Error
	)
	switch {
	case err == nil:
		return ReasonNone
	case errors.Is(err, context.Canceled):
		return ReasonCancelled
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case errors.As(err, &sc) && sc.StatusCode() == http.StatusTooManyRequests:
		return ReasonRateLimited
	case errors.As(err, &sc) && sc.StatusCode() >= 500:
		return ReasonServer
	case errors.As(err, &sc) && sc.StatusCode() >= 400:
		return ReasonClient
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &netErr):
		return ReasonConnection
	}
	return ReasonOther
}

// Outcome is the short form of ReasonOf for attempt counters: "ok",
// "timeout", "cancelled" or "error".
func Outcome(err error) string {
	switch ReasonOf(err) {
	case ReasonNone:
		return "ok"
	case ReasonTimeout:
		return "timeout"
	case ReasonCancelled:
		return "cancelled"
	}
	return "error"
}

// The reasons Observer.Rejected is given.
const (
	RejectRateLimited = "rate_limited" // the tenant is over its rate
	RejectTenantBusy  = "tenant_busy"  // the tenant already has MaxPerTenant requests in flight
	RejectOverloaded  = "overloaded"   // no slot within MaxQueueWait
	RejectClosed      = "closed"       // the gateway is shutting down
	RejectCancelled   = "cancelled"    // the caller left while queued
	// RejectLimiterFailed: the rate limiter could not decide and fails closed.
	RejectLimiterFailed = "limiter_error"
)

// callersFault reports whether err is a refusal of the request itself: an
// explicit Permanent, or a 4xx other than 408 (timeout) and 429 (rate).
func callersFault(err error) bool {
	if err == nil {
		return false
	}
	var p *permanentError
	if errors.As(err, &p) {
		return true
	}
	var sc StatusCoder
	if !errors.As(err, &sc) {
		return false
	}
	s := sc.StatusCode()
	return s >= 400 && s < 500 && s != http.StatusRequestTimeout && s != http.StatusTooManyRequests
}

// fallsBackOn reports whether err matches one of a route's fallback_on
// entries: an upstream error code ("context_length_exceeded") or an HTTP
// status ("413").
func fallsBackOn(err error, on []string) bool {
	if len(on) == 0 {
		return false
	}
	var (
		ec   ErrorCoder
		sc   StatusCoder
		code string
		st   string
	)
	if errors.As(err, &ec) {
		code = ec.ErrorCode()
	}
	if errors.As(err, &sc) {
		st = strconv.Itoa(sc.StatusCode())
	}
	for _, o := range on {
		if o != "" && (o == code || o == st) {
			return true
		}
	}
	return false
}

// permanentError is Permanent's mark. The gateway turns it into the retry
// loop's own Permanent when it decides not to fall back.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
