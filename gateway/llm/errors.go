package llm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"
)

// The interfaces a provider's errors may implement to say what happened.
// They are found through wrapping (errors.As), so a provider may wrap its
// errors freely. chatapi.UpstreamError implements all three.
type (
	// StatusCoder is an error that carries the upstream's HTTP status.
	StatusCoder interface{ StatusCode() int }
	// ErrorCoder is an error that carries the upstream's machine-readable
	// error code, such as "context_length_exceeded".
	ErrorCoder interface{ ErrorCode() string }
	// RetryAfterer is an error that says when to ask again (a 429 or 503
	// with Retry-After).
	RetryAfterer interface{ RetryAfter() time.Duration }
)

var (
	// ErrPanic is wrapped by the error a provider call returns when the
	// provider panicked (see Generate and Stream).
	ErrPanic = errors.New("llm: provider panicked")
	// ErrEmptyAnswer is wrapped by the error Generate returns for a
	// provider that answered nothing and reported no error.
	ErrEmptyAnswer = errors.New("llm: the provider's answer is empty")
	// ErrNotSent is wrapped by the error a provider middleware returns for
	// a call it refused before anything reached the upstream (a tenant
	// out of tokens for a retry, say). It ends the request — no retry, no
	// other target — and no breaker counts it: the upstream was not asked.
	ErrNotSent = errors.New("llm: the call was refused before it was sent")
	// ErrCallerGone is the cause a call's context ends with when the
	// caller it answers stopped reading (a stream's client hung up). It
	// wraps context.Canceled: no failure of the provider's. A middleware
	// that bills calls may read such a call on for its usage (see guard).
	ErrCallerGone = fmt.Errorf("llm: the caller has gone: %w", context.Canceled)
)

// Reason says why a provider call failed, in the words metrics and logs
// use. ReasonOf is the one place provider errors are classified.
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
	if err == nil {
		return ReasonNone // before the errors.As target below: it escapes, and costs an allocation
	}
	var netErr net.Error
	switch status := StatusOf(err); {
	case errors.Is(err, context.Canceled), errors.Is(err, ErrNotSent):
		return ReasonCancelled // called off: by its caller, or before it was sent (no provider's doing)
	case errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	case status == http.StatusTooManyRequests:
		return ReasonRateLimited
	case status >= 500:
		return ReasonServer
	case status >= 400:
		return ReasonClient
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.As(err, &netErr):
		return ReasonConnection
	}
	return ReasonOther
}

// Outcome is the short form of a Reason, for attempt counters.
type Outcome string

// The outcomes.
const (
	OutcomeOK        Outcome = "ok"
	OutcomeError     Outcome = "error"
	OutcomeTimeout   Outcome = "timeout"
	OutcomeCancelled Outcome = "cancelled"
)

// OutcomeOf is err's Outcome.
func OutcomeOf(err error) Outcome { return ReasonOf(err).Outcome() }

// Outcome is the reason's short form.
func (r Reason) Outcome() Outcome {
	switch r {
	case ReasonNone:
		return OutcomeOK
	case ReasonTimeout:
		return OutcomeTimeout
	case ReasonCancelled:
		return OutcomeCancelled
	}
	return OutcomeError
}

// CallersFault reports whether err is the upstream refusing the request
// itself: a 4xx other than 408 (timeout), 429 (rate) and the ones that
// refuse the gateway's own credentials (401, 403, 407). The same request
// fails the same way everywhere, so it is not retried, and it says nothing
// against the upstream's health; a refused credential is the gateway's
// problem with that upstream, and another may take the request.
func CallersFault(err error) bool {
	switch s := StatusOf(err); s {
	case http.StatusRequestTimeout, http.StatusTooManyRequests,
		http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired:
		return false
	default:
		return s >= 400 && s < 500
	}
}

// ErrorCode is the upstream's error code in err, or "".
func ErrorCode(err error) string {
	var ec ErrorCoder
	if errors.As(err, &ec) {
		return ec.ErrorCode()
	}
	return ""
}

// StatusOf is the upstream HTTP status in err, or 0 when it carries none.
func StatusOf(err error) int {
	if err == nil {
		return 0 // no allocation for the errors.As target on the way that has no error
	}
	var sc StatusCoder
	if errors.As(err, &sc) {
		return sc.StatusCode()
	}
	return 0
}
