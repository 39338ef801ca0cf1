// Package admission decides whether a request may start, in two separate
// questions asked in a fixed order.
//
// How fast may this tenant send work? A token bucket per tenant answers:
// tokens refill at a steady rate up to a burst, each request takes one, and a
// request that finds none is refused at once with the time until the next
// token (RetryAfter). That is a rate, and it says nothing about how much is
// running now.
//
// How much work is in flight right now? A semaphore answers: a fixed number
// of slots, and a request waits for one — but only up to MaxQueueWait, after
// which it is refused as overloaded. That is a level, and it says nothing
// about who is sending.
//
// Admit asks the rate question first. A request that will be refused for
// quota must never hold, or wait for, a slot another request could use.
//
// Lab 02: the types and errors in this file are given; write bucket.go,
// semaphore.go and admitter.go. Read README.md, then make `make lab-02` green.
package admission

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrRateLimited: the tenant has no token left; see RateLimitError for when to retry.
	ErrRateLimited = errors.New("admission: rate limited")
	// ErrOverloaded: no slot freed up within MaxQueueWait.
	ErrOverloaded = errors.New("admission: overloaded")
	// ErrClosed: the Admitter was closed (the process is draining).
	ErrClosed = errors.New("admission: closed")
	// ErrInvalidConfig: a constructor was given a setting that cannot work.
	ErrInvalidConfig = errors.New("admission: invalid config")
	// ErrNotImplemented is what the stubs return until you write them.
	ErrNotImplemented = errors.New("lab 02: not implemented yet")
)

// RateLimitError is the error a rate-limited Admit returns. It wraps
// ErrRateLimited and carries how long the caller should wait.
type RateLimitError struct {
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("admission: rate limited, retry after %s", e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitError) Unwrap() error { return ErrRateLimited }

// Decision is a limiter's answer for one request.
type Decision struct {
	Allowed bool
	// Remaining is the number of whole tokens left after this request (0 when refused).
	Remaining int
	// RetryAfter is 0 when allowed, else the time until one token is back,
	// rounded up so that retrying after exactly RetryAfter succeeds.
	RetryAfter time.Duration
}

// Limiter decides whether one more request for key may go now. A refused
// request takes nothing. An error means the limiter could not decide.
type Limiter interface {
	Allow(ctx context.Context, key string) (Decision, error)
}
