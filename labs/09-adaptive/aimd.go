package adaptive

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
type AIMD struct{} // TODO(lab 09): the fields you need

// NewAIMD validates cfg and returns an AIMD.
//
// TODO(lab 09): fill in the defaults (Increase 1, Backoff 0.9), then refuse,
// with an error wrapping ErrInvalidConfig: Min < 1, Max < Min, Initial
// outside [Min, Max], Increase < 1, Backoff outside (0, 1).
func NewAIMD(cfg AIMDConfig) (*AIMD, error) {
	return nil, ErrNotImplemented
}

// InitialLimit is cfg.Initial.
func (a *AIMD) InitialLimit() int { return 0 }

// Update takes one sample and returns the new limit.
//
// TODO(lab 09): a drop → limit·Backoff, rounded down, never below Min.
// Successes grow the limit once per round trip: once a full limit's worth of
// them is back, the limit grows by Increase (never above Max) if at least
// one of them was admitted with half the limit or more in use
// (Sample.InFlight), and a new round trip begins either way.
func (a *AIMD) Update(s Sample) int {
	return 0
}
