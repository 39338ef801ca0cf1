package adaptive

import (
	"time"
)

// GradientConfig configures a Gradient algorithm. Zero values other than
// Min, Max and Initial take the defaults.
type GradientConfig struct {
	// Min is the floor (at least 1), Max the ceiling (at least Min),
	// Initial the starting limit, within [Min, Max].
	Min, Max, Initial int
	// Tolerance is how much slower than the long-window minimum the short
	// window may be before the limit shrinks, at least 1. Default 1.5.
	Tolerance float64
	// Queue is the allowance added at every update: the requests allowed
	// to wait inside the provider. Without it the limit could only shrink.
	// At least 1; default 4.
	Queue int
	// Smoothing weighs each new limit against the old one, in (0, 1].
	// Default 0.2.
	Smoothing float64
	// Window is how many samples make one short window: the limit moves
	// once per window. Default 10.
	Window int
	// LongWindow is how long a minimum latency is remembered, so a
	// provider that really got slower sets a new baseline. Default 1 min.
	LongWindow time.Duration
	// Backoff multiplies the limit on a drop, in (0, 1). Default 0.9.
	Backoff float64
}

// Gradient moves the limit by the ratio of the provider's unloaded latency
// (the minimum over LongWindow) to its latency now (the mean of the last
// Window samples). At or under Tolerance times the minimum, nothing queues
// and the limit grows by Queue; above it, the limit shrinks in proportion.
// A minimum is remembered for at least LongWindow and forgotten within two.
type Gradient struct{} // TODO(lab 09): the fields you need

// NewGradient validates cfg and returns a Gradient.
//
// TODO(lab 09): fill in the defaults (Tolerance 1.5, Queue 4, Smoothing 0.2,
// Window 10, LongWindow 1 min, Backoff 0.9), then refuse, with an error
// wrapping ErrInvalidConfig: Min < 1, Max < Min, Initial outside [Min, Max],
// Tolerance < 1 (or NaN, or +Inf), Queue < 1, Smoothing outside (0, 1],
// Window < 1, LongWindow < 0, Backoff outside (0, 1).
func NewGradient(cfg GradientConfig) (*Gradient, error) {
	return nil, ErrNotImplemented
}

// InitialLimit is cfg.Initial.
func (g *Gradient) InitialLimit() int { return 0 }

// Update folds one sample in; once per Window samples it moves the limit.
//
// TODO(lab 09): a drop → limit·Backoff (never below Min) at once, and a new
// window begins. Every other sample joins the window, and its latency counts
// towards the minimum (see Gradient). Once the window holds Window samples,
// with minLatency that minimum and meanLatency the window's mean,
//
//	gradient = clamp(Tolerance · minLatency / meanLatency, 0.5, 1)
//	next     = limit·gradient + Queue
//
// the limit holds if next would grow it while fewer than half the permits
// were in use during the window; else it becomes
//
//	limit·(1−Smoothing) + next·Smoothing
//
// clamped to [Min, Max]; either way a new window begins. The limit keeps its
// fraction from one window to the next; Update returns it rounded down.
func (g *Gradient) Update(s Sample) int {
	return 0
}
