package adaptive

import (
	"fmt"
	"math"
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
type Gradient struct {
	cfg      GradientConfig
	estimate float64

	// The long window: the minimum of the current and the previous bucket
	// of LongWindow each, so the minimum is at most two LongWindows old.
	minCur, minPrev time.Duration
	bucketStart     time.Time

	// The short window.
	sum         time.Duration
	n           int
	maxInFlight int
}

// NewGradient validates cfg and returns a Gradient.
func NewGradient(cfg GradientConfig) (*Gradient, error) {
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 1.5
	}
	if cfg.Queue == 0 {
		cfg.Queue = 4
	}
	if cfg.Smoothing == 0 {
		cfg.Smoothing = 0.2
	}
	if cfg.Window == 0 {
		cfg.Window = 10
	}
	if cfg.LongWindow == 0 {
		cfg.LongWindow = time.Minute
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = 0.9
	}
	switch {
	case cfg.Min < 1:
		return nil, fmt.Errorf("%w: Min %d, want at least 1", ErrInvalidConfig, cfg.Min)
	case cfg.Max < cfg.Min:
		return nil, fmt.Errorf("%w: Max %d below Min %d", ErrInvalidConfig, cfg.Max, cfg.Min)
	case cfg.Initial < cfg.Min || cfg.Initial > cfg.Max:
		return nil, fmt.Errorf("%w: Initial %d outside [%d, %d]", ErrInvalidConfig, cfg.Initial, cfg.Min, cfg.Max)
	case !(cfg.Tolerance >= 1) || math.IsInf(cfg.Tolerance, 1):
		return nil, fmt.Errorf("%w: Tolerance %v, want a finite number ≥ 1", ErrInvalidConfig, cfg.Tolerance)
	case cfg.Queue < 1:
		return nil, fmt.Errorf("%w: Queue %d, want at least 1", ErrInvalidConfig, cfg.Queue)
	case !(cfg.Smoothing > 0 && cfg.Smoothing <= 1):
		return nil, fmt.Errorf("%w: Smoothing %v, want in (0, 1]", ErrInvalidConfig, cfg.Smoothing)
	case cfg.Window < 1:
		return nil, fmt.Errorf("%w: Window %d, want at least 1", ErrInvalidConfig, cfg.Window)
	case cfg.LongWindow < 0:
		return nil, fmt.Errorf("%w: LongWindow %v, want > 0", ErrInvalidConfig, cfg.LongWindow)
	case !(cfg.Backoff > 0 && cfg.Backoff < 1):
		return nil, fmt.Errorf("%w: Backoff %v, want in (0, 1)", ErrInvalidConfig, cfg.Backoff)
	}
	return &Gradient{cfg: cfg, estimate: float64(cfg.Initial), bucketStart: time.Now()}, nil
}

// InitialLimit is cfg.Initial.
func (g *Gradient) InitialLimit() int { return g.cfg.Initial }

// Update folds one sample in; once per Window samples it moves the limit to
//
//	limit·(1−Smoothing) + (limit·gradient + Queue)·Smoothing
//	gradient = clamp(Tolerance · minLatency / meanLatency, 0.5, 1)
//
// A drop cuts the limit by Backoff at once and starts a new window.
func (g *Gradient) Update(s Sample) int {
	if s.Dropped {
		g.estimate = math.Max(float64(g.cfg.Min), g.estimate*g.cfg.Backoff)
		g.sum, g.n, g.maxInFlight = 0, 0, 0
		return g.limit()
	}

	now := time.Now()
	if now.Sub(g.bucketStart) >= g.cfg.LongWindow {
		g.minPrev, g.minCur, g.bucketStart = g.minCur, 0, now
	}
	if g.minCur == 0 || s.Latency < g.minCur {
		g.minCur = s.Latency
	}

	g.sum += s.Latency
	g.n++
	g.maxInFlight = max(g.maxInFlight, s.InFlight)
	if g.n < g.cfg.Window {
		return g.limit()
	}
	mean := float64(g.sum) / float64(g.n)
	inUse := 2*g.maxInFlight >= g.limit()
	g.sum, g.n, g.maxInFlight = 0, 0, 0

	minLatency := g.minCur
	if g.minPrev > 0 && g.minPrev < minLatency {
		minLatency = g.minPrev
	}
	gradient := 1.0
	if mean > 0 {
		gradient = math.Max(0.5, math.Min(1, g.cfg.Tolerance*float64(minLatency)/mean))
	}
	next := g.estimate*gradient + float64(g.cfg.Queue)
	if next > g.estimate && !inUse {
		return g.limit() // a limit nobody reaches proves nothing: hold it
	}
	next = g.estimate*(1-g.cfg.Smoothing) + next*g.cfg.Smoothing
	g.estimate = math.Min(float64(g.cfg.Max), math.Max(float64(g.cfg.Min), next))
	return g.limit()
}

func (g *Gradient) limit() int { return int(g.estimate) }
