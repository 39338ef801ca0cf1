package admission

import (
	"context"
	"time"
)

// Config configures an Admitter.
type Config struct {
	// Limiter decides the rate per key. nil means no rate limit.
	Limiter Limiter
	// MaxConcurrent is how many admitted requests may be in flight at once.
	MaxConcurrent int
	// MaxQueueWait bounds how long Admit waits for a slot. 0 means don't
	// wait: refuse at once when every slot is taken.
	MaxQueueWait time.Duration
}

// Admitter admits requests: rate limit first, then a slot within MaxQueueWait.
type Admitter struct{} // TODO(lab 02): the fields you need

// New validates cfg and returns an Admitter.
//
// TODO(lab 02): refuse MaxConcurrent < 1 and a negative MaxQueueWait with an
// error wrapping ErrInvalidConfig.
func New(cfg Config) (*Admitter, error) {
	return &Admitter{}, nil
}

// Admit admits one request for key, or says why not.
//
// TODO(lab 02): in this order:
//  1. closed → ErrClosed;
//  2. the caller's ctx already ended → ctx.Err(), before the Limiter is asked;
//  3. ask the Limiter FIRST: an error → wrap it (%w) and return, no slot taken;
//     refused → &RateLimitError{RetryAfter: …}, no slot taken; a nil Limiter
//     means no rate limit;
//  4. take a free slot, or wait for one up to MaxQueueWait (0 = don't wait):
//     the wait ran out → an error wrapping ErrOverloaded (and not
//     context.DeadlineExceeded); the caller's ctx ended (cancelled OR its
//     deadline passed) → ctx.Err(); Close was called meanwhile → ErrClosed;
//  5. return a Ticket whose QueueWait is the time spent in step 4 and whose
//     RateLimit is the Limiter's Decision.
func (a *Admitter) Admit(ctx context.Context, key string) (*Ticket, error) {
	return nil, ErrNotImplemented
}

// InFlight is the number of tickets out now.
func (a *Admitter) InFlight() int {
	return 0
}

// Capacity is MaxConcurrent.
func (a *Admitter) Capacity() int {
	return 0
}

// Close makes later Admits, and Admits still waiting for a slot, return
// ErrClosed. Tickets already out stay valid. Close is idempotent.
func (a *Admitter) Close() {}

// Ticket is an admitted request's slot. Release it when the request ends,
// whatever happened (defer it).
//
// TODO(lab 02): what Release needs.
type Ticket struct {
	// QueueWait is how long Admit waited for a slot: zero when one was free.
	QueueWait time.Duration
	// RateLimit is the limiter's decision (for X-RateLimit-* headers).
	RateLimit Decision
}

// Release returns the slot. Calling it more than once is harmless.
func (t *Ticket) Release() {}
