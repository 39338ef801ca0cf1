package router

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/production-go/gateway-lab/gateway/llm"
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

// streak follows a target's current run of failures — since its last
// success — for Config.IsolateTenantFailures: which tenants' requests
// have provoked one. Provoked failures count towards the breaker only once
// two tenants have had them in the run: one tenant alone, however many it
// provokes, and whatever other failures the run holds, never opens the
// breaker — nor keeps it open by failing the probe.
type streak struct {
	mu    sync.Mutex
	first string // the first tenant with a provoked failure in the run
	two   bool   // a second tenant has had one too
}

// reset starts a new run, after a success.
func (s *streak) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.first, s.two = "", false
}

// verdict is what a failed attempt of tenant tells its target's breaker,
// given what breakerVerdict made of err.
func (s *streak) verdict(tenant string, err, verdict error) error {
	switch {
	case verdict == nil:
		s.reset() // the breaker counts it a success
		return nil
	case !isFailure(verdict), !provoked(err):
		return verdict // neutral already, or a failure whoever asked
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.first == "":
		s.first = tenant
	case s.first != tenant:
		s.two = true
	}
	if !s.two {
		return errNeutral // the breaker hears nothing of it
	}
	return verdict
}
