// Package breaker is a circuit breaker: it stops calling a dependency that
// keeps failing, so callers fail fast instead of queueing behind timeouts,
// and the dependency gets room to recover.
//
// The whole state machine, top to bottom:
//
//	Closed   — calls go through. FailureThreshold consecutive failures → Open.
//	           A success resets the count.
//	Open     — calls fail at once with ErrOpen. Once RecoveryTimeout has
//	           passed since opening, the breaker reads HalfOpen.
//	HalfOpen — exactly one caller is let through as a probe; everyone else
//	           still gets ErrOpen. The probe's success → Closed; its failure
//	           → Open with a fresh RecoveryTimeout. A probe that does not
//	           report within ProbeTimeout is given up, and the next caller
//	           becomes the probe.
//
// Time decides one transition (Open → HalfOpen), and it takes no timer and
// no goroutine: the state reads HalfOpen the moment RecoveryTimeout has
// passed, and there is nothing to stop. Every transition starts a new
// generation; a done from an older generation (a request admitted before the
// breaker opened, a probe that was given up) arrives too late to count, and
// is ignored.
//
// Lab 04: State, the errors and Config are given; write the Breaker below.
// Read README.md, then make `make lab-04` green.
package breaker

import (
	"errors"
	"fmt"
	"time"
)

// State is a breaker's state.
type State int

// The three states. The zero value is Closed.
const (
	Closed State = iota
	Open
	HalfOpen
)

// String names the state: "closed", "open", "half-open".
//
// TODO(lab 04): the three names (metrics labels and logs use them).
func (s State) String() string {
	return fmt.Sprintf("State(%d)", int(s))
}

var (
	// ErrOpen is returned by Allow while the breaker is open, or half-open
	// with its probe already out.
	ErrOpen = errors.New("breaker: open")
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("breaker: invalid config")
	// ErrNotImplemented is what the stubs return until you write them.
	ErrNotImplemented = errors.New("lab 04: not implemented yet")
)

// Config configures a Breaker.
type Config struct {
	// FailureThreshold consecutive failures open the breaker (≥ 1).
	FailureThreshold int
	// RecoveryTimeout is how long the breaker stays open before it lets a probe through (> 0).
	RecoveryTimeout time.Duration
	// ProbeTimeout is how long a probe may take to report before it is
	// given up; 0 means RecoveryTimeout.
	ProbeTimeout time.Duration
	// IsFailure decides which errors count as failures. nil counts every
	// error except context.Canceled: a caller that left is not the
	// dependency's fault. A custom IsFailure replaces that default. An error
	// it rejects is neutral: it neither counts as a failure nor resets the
	// count, and a neutral probe frees the probe slot for the next caller.
	// It is asked only about errors: a nil outcome is always a success.
	IsFailure func(error) bool
	// OnStateChange, if set, is called after every transition, outside the
	// breaker's lock, so it may call the breaker. Calls from different
	// goroutines may arrive out of order.
	OnStateChange func(from, to State)
}

// Breaker is a circuit breaker. It is safe for concurrent use.
type Breaker struct{} // TODO(lab 04): the fields you need

// New validates cfg and returns a closed Breaker.
//
// TODO(lab 04): FailureThreshold < 1, RecoveryTimeout <= 0 or a negative
// ProbeTimeout → an error wrapping ErrInvalidConfig. ProbeTimeout 0 means
// RecoveryTimeout; a nil IsFailure counts every error except context.Canceled.
func New(cfg Config) (*Breaker, error) {
	return &Breaker{}, nil
}

// State reports the state now.
//
// TODO(lab 04): an Open breaker reads HalfOpen once RecoveryTimeout has
// passed since it opened (at that very instant too); opening starts no timer
// and no goroutine.
func (b *Breaker) State() State {
	return Closed
}

// Allow asks to make one call. If allowed, the caller makes the call and
// reports its outcome with done(err). If not, err is ErrOpen.
//
// TODO(lab 04):
//   - Closed: admit; done counts consecutive failures (IsFailure), a success
//     resets the count, FailureThreshold failures → Open;
//   - Open: ErrOpen;
//   - HalfOpen: admit exactly ONE probe; its success → Closed, its failure →
//     Open with a fresh window; a probe silent for ProbeTimeout is given up and
//     the next caller becomes the probe;
//   - a done from before the last transition (older generation) changes
//     nothing: a call admitted before the breaker opened, a probe given up,
//     a probe reporting a second time;
//   - nil is a success; an error IsFailure rejects is neutral: it neither
//     counts nor resets the count (a neutral probe frees the probe slot);
//   - OnStateChange is called once per transition, never without one, on
//     every path (Allow's included), and may call the breaker.
func (b *Breaker) Allow() (done func(err error), err error) {
	return nil, ErrNotImplemented
}
