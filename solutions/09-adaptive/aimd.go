package adaptive

import (
	"fmt"
	"math"
)

// AIMDConfig configures an AIMD algorithm. Zero Increase and Backoff take
// the defaults; Min, Max and Initial must be set.
type AIMDConfig struct {
	// Min is the floor: a limit this low still lets samples through, so
	// the limit can recover. At least 1.
	Min int
	// Max is the ceiling. At least Min.
	Max int
	// Initial is the starting limit, within [Min, Max].
	Initial int
	// Increase is added once per round trip: after Limit successes in a
	// row, the limit grows by Increase. Default 1.
	Increase int
	// Backoff multiplies the limit on a drop, in (0, 1). Default 0.9.
	Backoff float64
}

// AIMD is additive increase, multiplicative decrease: TCP's congestion
// avoidance applied to a concurrency limit.
type AIMD struct {
	cfg         AIMDConfig
	limit       int
	successes   int // since the last change
	maxInFlight int // the most permits in use among those successes
}

// NewAIMD validates cfg and returns an AIMD.
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	if cfg.Increase == 0 {
		cfg.Increase = 1
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
	case cfg.Increase < 1:
		return nil, fmt.Errorf("%w: Increase %d, want at least 1", ErrInvalidConfig, cfg.Increase)
	case !(cfg.Backoff > 0 && cfg.Backoff < 1):
		return nil, fmt.Errorf("%w: Backoff %v, want in (0, 1)", ErrInvalidConfig, cfg.Backoff)
	}
	return &AIMD{cfg: cfg, limit: cfg.Initial}, nil
}

// InitialLimit is cfg.Initial.
func (a *AIMD) InitialLimit() int { return a.cfg.Initial }

// Update cuts the limit by Backoff on a drop, and adds Increase once a full
// limit's worth of successes has come back — one round trip — if at least
// half the limit was in use during it: a limit nobody reaches proves nothing
// about the provider.
func (a *AIMD) Update(s Sample) int {
	if s.Dropped {
		a.successes, a.maxInFlight = 0, 0
		a.limit = max(a.cfg.Min, int(math.Floor(float64(a.limit)*a.cfg.Backoff)))
		return a.limit
	}
	a.successes++
	a.maxInFlight = max(a.maxInFlight, s.InFlight)
	if a.successes >= a.limit {
		if 2*a.maxInFlight >= a.limit {
			a.limit = min(a.cfg.Max, a.limit+a.cfg.Increase)
		}
		a.successes, a.maxInFlight = 0, 0
	}
	return a.limit
}
