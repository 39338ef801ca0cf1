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
// Time decides one transition (Open → HalfOpen), and that one is computed
// when the state is read: there is no timer and no goroutine. Every
// transition starts a new generation; a done from an older generation (a
// request admitted before the breaker opened, a probe that was given up)
// arrives too late to count, and is ignored.
package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

var (
	// ErrOpen is returned by Allow while the breaker is open, or half-open
	// with its probe already out.
	ErrOpen = errors.New("breaker: open")
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("breaker: invalid config")
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
type Breaker struct {
	threshold    int
	recovery     time.Duration
	probeTimeout time.Duration
	isFailure    func(error) bool
	onChange     func(from, to State)

	mu       sync.Mutex
	state    State     // Closed, Open or HalfOpen as last written; Open may read HalfOpen
	failures int       // consecutive failures while Closed
	openedAt time.Time // when it last opened
	probing  bool      // a probe is out
	probeAt  time.Time // when the current probe was let through
	gen      uint64    // bumped on every transition and every new probe
	closedFn func(error)
}

// New validates cfg and returns a closed Breaker.
func New(cfg Config) (*Breaker, error) {
	switch {
	case cfg.FailureThreshold < 1:
		return nil, fmt.Errorf("%w: FailureThreshold %d must be at least 1", ErrInvalidConfig, cfg.FailureThreshold)
	case cfg.RecoveryTimeout <= 0:
		return nil, fmt.Errorf("%w: RecoveryTimeout %s must be positive", ErrInvalidConfig, cfg.RecoveryTimeout)
	case cfg.ProbeTimeout < 0:
		return nil, fmt.Errorf("%w: ProbeTimeout %s must not be negative", ErrInvalidConfig, cfg.ProbeTimeout)
	}
	b := &Breaker{
		threshold:    cfg.FailureThreshold,
		recovery:     cfg.RecoveryTimeout,
		probeTimeout: cfg.ProbeTimeout,
		isFailure:    cfg.IsFailure,
		onChange:     cfg.OnStateChange,
	}
	if b.probeTimeout == 0 {
		b.probeTimeout = b.recovery
	}
	if b.isFailure == nil {
		b.isFailure = defaultIsFailure
	}
	b.closedFn = b.doneFor(0)
	return b, nil
}

func defaultIsFailure(err error) bool {
	return err != nil && !errors.Is(err, context.Canceled)
}

// State reports the state now. Open reads HalfOpen once RecoveryTimeout has
// passed since it opened.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateAt(time.Now())
}

func (b *Breaker) stateAt(now time.Time) State {
	if b.state == Open && now.Sub(b.openedAt) >= b.recovery {
		return HalfOpen
	}
	return b.state
}

// Allow asks to make one call. If allowed, the caller must make the call and
// report its outcome with done(err) exactly once. If not, err is ErrOpen.
// A probe's verdict is a transition, so a probe that reports twice finds its
// second report stale.
func (b *Breaker) Allow() (done func(err error), err error) {
	b.mu.Lock()
	if b.state == Closed { // the hot path: no clock needed
		done = b.closedFn
		b.mu.Unlock()
		return done, nil
	}
	now := time.Now()
	if b.stateAt(now) == Open {
		b.mu.Unlock()
		return nil, ErrOpen
	}
	// HalfOpen: one probe at a time. A probe that has not reported within
	// probeTimeout is presumed lost; this caller replaces it.
	if b.probing && now.Sub(b.probeAt) < b.probeTimeout {
		b.mu.Unlock()
		return nil, ErrOpen
	}
	from := b.state
	b.state = HalfOpen
	b.probing = true
	b.probeAt = now
	b.gen++
	done = b.doneFor(b.gen)
	b.mu.Unlock()
	if from != HalfOpen {
		b.notify(from, HalfOpen)
	}
	return done, nil
}

// doneFor makes the done func for generation gen. Closed shares one per
// generation, so the hot path allocates nothing.
func (b *Breaker) doneFor(gen uint64) func(error) {
	return func(err error) { b.report(gen, err) }
}

func (b *Breaker) report(gen uint64, err error) {
	b.mu.Lock()
	if gen != b.gen {
		b.mu.Unlock() // from before the last transition: too late to count
		return
	}
	from := b.state
	switch kind := b.classify(err); {
	case from == Closed && kind == success:
		b.failures = 0
	case from == Closed && kind == failure:
		b.failures++
		if b.failures >= b.threshold {
			b.open(time.Now())
		}
	case from == HalfOpen && kind == success:
		b.state = Closed
		b.failures = 0
		b.probing = false
		b.gen++
		b.closedFn = b.doneFor(b.gen)
	case from == HalfOpen && kind == failure:
		b.open(time.Now())
	case from == HalfOpen:
		// A neutral probe (its caller left) proves nothing either way:
		// free the probe slot for the next caller and stay half-open.
		b.probing = false
		b.gen++
	}
	to := b.state
	b.mu.Unlock()
	if from != to {
		b.notify(from, to)
	}
}

type outcome int

const (
	success outcome = iota
	failure
	neutral
)

// classify: nil is a success; an error IsFailure accepts is a failure; any
// other error (by default context.Canceled) is neutral: it neither counts
// towards opening nor resets the count.
func (b *Breaker) classify(err error) outcome {
	switch {
	case err == nil:
		return success
	case b.isFailure(err):
		return failure
	}
	return neutral
}

// open moves to Open with a fresh recovery window. Called with mu held.
func (b *Breaker) open(now time.Time) {
	b.state = Open
	b.openedAt = now
	b.failures = 0
	b.probing = false
	b.gen++
}

func (b *Breaker) notify(from, to State) {
	if b.onChange != nil {
		b.onChange(from, to)
	}
}
