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
// TODO(lab 02): make these true (README.md: "Admit, in this order"):
//   - after Close → ErrClosed, whatever else holds; the Limiter is not asked;
//   - the caller's ctx already ended → ctx.Err(); the Limiter is not asked
//     and no slot is taken;
//   - the rate is decided before any slot is taken or waited for: the
//     Limiter's error → an error wrapping it; refused → &RateLimitError{RetryAfter: …};
//     neither holds a slot; a nil Limiter means no rate limit;
//   - a slot at once if one is free, else within MaxQueueWait (0 = don't
//     wait): none in time → an error wrapping ErrOverloaded (and not
//     context.DeadlineExceeded); the caller's ctx ended while queued
//     (cancelled OR its deadline passed) → ctx.Err(); Close meanwhile → ErrClosed;
//   - the Ticket's QueueWait is how long Admit waited for the slot, and its
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
