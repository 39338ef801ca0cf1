package router

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/production-go/gateway-lab/solutions/llm"
)

// provoked reports whether a failure is one a tenant's own request can
// cause on a healthy upstream: a timeout (a long answer), or a 403, 408 or
// 429 (a filter, a request over the upstream's limits).
func provoked(err error) bool {
	switch llm.StatusOf(err) {
	case http.StatusForbidden, http.StatusRequestTimeout, http.StatusTooManyRequests:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// streak follows a target's current run of failures for
// Config.IsolateTenantFailures: how long it is, and whether one tenant
// alone made it. It mirrors the breaker's own count closely enough —
// concurrent attempts may report in either order — to keep one tenant's
// timeouts one short of the threshold.
type streak struct {
	mu     sync.Mutex
	fails  int
	tenant string // the tenant of every failure so far, while it is one
	mixed  bool   // failures from more than one tenant
}

// reset starts a new run, after a success. (A run that opened the breaker
// needs no reset of its own: the breaker ends Open only by a success.)
func (s *streak) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fails, s.tenant, s.mixed = 0, "", false
}

// verdict is what a failed attempt of tenant tells its target's breaker,
// given what breakerVerdict made of err: a timeout that would let one
// tenant alone reach threshold is neutral instead.
func (s *streak) verdict(tenant string, err, verdict error, threshold int) error {
	if verdict == nil {
		s.reset() // the breaker counts it a success
		return nil
	}
	if errors.Is(verdict, context.Canceled) {
		return verdict // neutral: the run goes on as it was
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	alone := !s.mixed && (s.fails == 0 || s.tenant == tenant)
	if alone && s.fails+1 >= threshold && provoked(err) {
		return context.Canceled // the breaker hears nothing of it
	}
	if s.fails == 0 {
		s.tenant = tenant
	} else if s.tenant != tenant {
		s.mixed = true
	}
	s.fails++
	return verdict
}
