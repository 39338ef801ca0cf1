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
// TODO(lab 09): a token remembers its Limiter, when it was admitted, how many
// permits were in flight then (itself included), and the backoff count at
// that moment.
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
// context.DeadlineExceeded, whichever it was) and hold nothing — mind a
// permit handed over in the same instant.
func (l *Limiter) Acquire(ctx context.Context) (*Token, error) {
	return nil, ErrNotImplemented
}

// Done returns the permit and, unless o is Ignored, feeds the request's
// latency and outcome to the algorithm. Only the first call counts.
//
// TODO(lab 09): in this order, under the lock: give the permit back (on
// every outcome); skip the sample if o is Ignored, or if o is Dropped and a
// backoff happened since this token was admitted (a stale sample: it
// measured the congestion that backoff already answered); otherwise set the
// limit to Algorithm.Update(Sample{…}) and count a backoff when a drop
// lowered it; then admit waiters while InFlight < Limit — a raised limit
// admits more than the one permit returned.
func (t *Token) Done(o Outcome) {}

// Limit is the current limit.
func (l *Limiter) Limit() int {
	return 0
}

// InFlight is the number of permits held now.
func (l *Limiter) InFlight() int {
	return 0
}
