package router

import (
	"sync/atomic"
	"time"

	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
)

// health is a target's breaker (lab 04's, through its own API) with the
// two things the gateway needs that the lab's breaker does not say: when
// it last opened, so that a request refused because every target is open
// can be told how long to wait (Retry-After), and whether its half-open
// probe is out, so that the plan does not count on a target that will
// refuse the next call. The breaker reports its openings through
// OnStateChange (newBreaker records them here); the probe is taken
// through Allow below.
type health struct {
	*breaker.Breaker
	recovery     time.Duration
	probeTimeout time.Duration // the breaker's ProbeTimeout
	opened       atomic.Int64  // time.Now().UnixNano() of the last opening; 0 before the first
	probeAt      atomic.Int64  // time.Now().UnixNano() when the probe out now was taken; 0 when none is
}

// Allow is the breaker's, noting a half-open probe taken until it reports.
func (h *health) Allow() (func(error), error) {
	done, err := h.Breaker.Allow()
	if err != nil || h.State() != breaker.HalfOpen {
		return done, err // refused, or admitted while closed
	}
	at := time.Now().UnixNano()
	h.probeAt.Store(at) // half-open admits one call: this one is the probe
	return func(err error) {
		h.probeAt.CompareAndSwap(at, 0)
		done(err)
	}, nil
}

// available reports whether the breaker would admit a call now: closed,
// or half-open with its probe not out.
func (h *health) available() bool {
	switch h.State() {
	case breaker.Closed:
		return true
	case breaker.HalfOpen:
		return h.probeLeft() == 0
	}
	return false
}

// probeLeft is how long the half-open probe out now may still take before
// the breaker gives it up (ProbeTimeout); 0 when none is out.
func (h *health) probeLeft() time.Duration {
	at := h.probeAt.Load()
	if at == 0 {
		return 0
	}
	return max(0, h.probeTimeout-time.Since(time.Unix(0, at)))
}

// openFor is how long the breaker will still refuse every call: the time
// until it half-opens, or until its probe out now is given up; 0 when it
// would admit one. Between an opening and its callback, a moment, the
// opening is not recorded yet: the whole recovery time is the answer then,
// never 0.
func (h *health) openFor() time.Duration {
	switch h.State() {
	case breaker.HalfOpen:
		return h.probeLeft()
	case breaker.Open:
	default:
		return 0
	}
	at := h.opened.Load()
	if at == 0 {
		return h.recovery
	}
	return max(0, h.recovery-time.Since(time.Unix(0, at)))
}
