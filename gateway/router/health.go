package router

import (
	"sync/atomic"
	"time"

	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
)

// health is a target's breaker (lab 04's, through its own API) with the
// one thing the gateway needs that the lab's breaker does not say: when it
// last opened, so that a request refused because every target is open can
// be told how long to wait (Retry-After). The breaker reports its openings
// through OnStateChange; newBreaker records them here.
type health struct {
	*breaker.Breaker
	recovery time.Duration
	opened   atomic.Int64 // time.Now().UnixNano() of the last opening; 0 before the first
}

// openFor is how long the breaker will still refuse every call: the time
// until it half-opens, and 0 when it is not open. Between an opening and
// its callback, a moment, the opening is not recorded yet: the whole
// recovery time is the answer then, never 0.
func (h *health) openFor() time.Duration {
	if h.State() != breaker.Open {
		return 0
	}
	at := h.opened.Load()
	if at == 0 {
		return h.recovery
	}
	return max(0, h.recovery-time.Since(time.Unix(0, at)))
}
