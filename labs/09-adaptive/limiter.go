package adaptive

import (
	"context"
)

// Limiter is a semaphore whose size an Algorithm moves. Waiters are served
// first come, first served.
type Limiter struct{} // TODO(lab 09): the fields you need

// Token is one admitted request's permit. Call Done exactly once when the
// request ends (a second call does nothing).
//
// TODO(lab 09): what Done needs. The Sample Done makes describes the request
// as it was admitted: its latency from then, and the permits in flight then
// (itself included).
type Token struct{}

// New returns a Limiter driven by alg, starting at alg.InitialLimit().
//
// TODO(lab 09): a nil alg, or an initial limit below 1, is an error wrapping
// ErrInvalidConfig.
func New(alg Algorithm) (*Limiter, error) {
	return nil, ErrNotImplemented
}

// Acquire takes a permit, waiting until one is free or ctx ends.
//
// TODO(lab 09): ctx already ended → ctx.Err(), nothing taken, even with
// permits free. A permit is free while InFlight < Limit and nobody is queued
// ahead. Waiting, return ctx.Err() when ctx ends (context.Canceled or
// context.DeadlineExceeded, whichever it was) and hold nothing, even when a
// permit reached this caller in that same instant.
func (l *Limiter) Acquire(ctx context.Context) (*Token, error) {
	return nil, ErrNotImplemented
}

// Done returns the permit and, unless o is Ignored, feeds the request's
// latency and outcome to the algorithm. Only the first call counts.
//
// TODO(lab 09): the permit comes back on every outcome. The sample is
// skipped if o is Ignored, or if o is Dropped and a backoff happened since
// this token was admitted (a stale sample: it measured the congestion that
// backoff already answered); otherwise the limit becomes
// Algorithm.Update(Sample{…}), and a drop that lowered it is a backoff.
// Waiters are then admitted while InFlight < Limit: a raised limit admits
// more than the one permit returned.
func (t *Token) Done(o Outcome) {}

// Limit is the current limit.
func (l *Limiter) Limit() int {
	return 0
}

// InFlight is the number of permits held now.
func (l *Limiter) InFlight() int {
	return 0
}
