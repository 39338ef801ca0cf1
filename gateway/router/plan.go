package router

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
)

// Health is kept per target — a (provider, upstream model) pair — because
// one model of a provider can be down while another answers.

// normal names a target the way its breaker is keyed: a provider that
// names its default model gets the same key for "" and that model.
func (r *Router) normal(t Target) Target {
	if t.Model == "" {
		t.Model = llm.DefaultModel(r.byName[t.Provider])
	}
	return t
}

// healthOf returns the target's breaker, making it on first use. Targets
// come from configuration (the route table) or a pinned provider's default,
// so the map stays small.
func (r *Router) healthOf(t Target) (*health, *streak, error) {
	r.mu.RLock()
	b, s := r.health[t], r.streaks[t]
	r.mu.RUnlock()
	if b != nil {
		return b, s, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b := r.health[t]; b != nil {
		return b, r.streaks[t], nil
	}
	s = &streak{}
	b, err := r.newBreaker(t)
	if err != nil {
		return nil, nil, err
	}
	r.health[t], r.streaks[t] = b, s
	return b, s, nil
}

// newBreaker makes a target's breaker. Its changes are reported only
// while it is the target's breaker: one a probe replaced (see probe.go)
// may still hear from requests that were using it.
func (r *Router) newBreaker(t Target) (*health, error) {
	h := &health{recovery: r.cfg.Health.RecoveryTimeout, probeTimeout: r.cfg.Retry.AttemptTimeout}
	b, err := breaker.New(breaker.Config{
		FailureThreshold: r.cfg.Health.FailureThreshold,
		RecoveryTimeout:  r.cfg.Health.RecoveryTimeout,
		ProbeTimeout:     r.cfg.Retry.AttemptTimeout,
		IsFailure:        isFailure,
		OnStateChange: func(from, to breaker.State) {
			r.mu.RLock()
			current := r.health[t] == h
			r.mu.RUnlock()
			if to == breaker.Open {
				h.opened.Store(time.Now().UnixNano())
			}
			if !current {
				return
			}
			r.obs.BreakerChanged(t, from, to)
			if to == breaker.Open {
				r.probe(t)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	h.Breaker = b
	return h, nil
}

// TargetState reports the breaker state of one (provider, model) target —
// Closed for a target not used yet — and false for an unknown provider.
func (r *Router) TargetState(t Target) (breaker.State, bool) {
	if r.byName[t.Provider] == nil {
		return breaker.Closed, false
	}
	r.mu.RLock()
	b := r.health[r.normal(t)]
	r.mu.RUnlock()
	if b == nil {
		return breaker.Closed, true
	}
	return b.State(), true
}

// Targets lists every target the router keeps health for, sorted.
func (r *Router) Targets() []Target {
	r.mu.RLock()
	out := make([]Target, 0, len(r.health))
	for t := range r.health {
		out = append(out, t)
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Target) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Model, b.Model))
	})
	return out
}

// step is one target of a request's plan, resolved.
type step struct {
	target    Target
	provider  llm.Provider
	health    *health
	streak    *streak
	direct    bool // the provider honours its context: no bridge needed
	continues bool // the route says its upstream continues a prefill
}

// plan is one request's way through its targets: which one failed last,
// which it has tried, and where the next attempt starts.
type plan struct {
	steps      []step
	tried      []bool
	last       int // index of the step that failed last; -1 before any failure
	pinned     bool
	fallbackOn []string
	retried    []bool // a step tried again at once (RetrySame, WaitRetryAfter)
	retrySame  bool
	waitRA     time.Duration
}

// noRoute is a request's route when it names none, or pins a provider:
// every provider in priority order (or the pinned one), no policies.
var noRoute Route

// targets is the route's targets; none for a nil route.
func (rt *Route) targets() []Target {
	if rt == nil {
		return nil
	}
	return rt.Targets
}

// plan resolves a request's targets into run.plan: the pinned provider
// alone, the route's targets, or every provider in priority order.
func (r *Router) plan(run *run, pinned llm.Provider) error {
	rt := run.req.Route
	if rt == nil || pinned != nil {
		rt = &noRoute
	}
	targets := rt.Targets
	switch {
	case pinned != nil:
		targets = []Target{{Provider: pinned.Name()}}
	case len(targets) == 0:
		targets = r.byOrder
	}
	p := &run.plan
	*p = plan{steps: run.inline[:0], tried: run.tried[:0], last: -1, pinned: pinned != nil, fallbackOn: rt.FallbackOn,
		retried: run.retried[:0], retrySame: rt.RetrySame, waitRA: rt.WaitRetryAfter}
	for _, t := range targets {
		continues := slices.Contains(rt.Continue, t)
		t = r.normal(t)
		b, s, err := r.healthOf(t)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		prov := r.byName[t.Provider]
		p.steps = append(p.steps, step{target: t, provider: prov, health: b, streak: s, direct: llm.HonoursContext(prov), continues: continues})
		p.tried = append(p.tried, false)
		p.retried = append(p.retried, false)
	}
	return nil
}

// pick chooses the step for the next attempt — the first, in route order
// starting after the one that failed last, whose breaker lets a call
// through — and returns its breaker's done. Every breaker open is
// ErrNoHealthyProvider, with the wait until the first one half-opens.
func (p *plan) pick() (int, func(error), error) {
	n := len(p.steps)
	for i := range n {
		k := (p.last + 1 + i) % n
		if done, err := p.steps[k].health.Allow(); err == nil {
			p.tried[k] = true
			return k, done, nil
		}
	}
	return -1, nil, p.noneHealthy()
}

// next is the step pick would choose now, without taking a probe: -1 if
// every breaker refuses (open, or half-open with its probe out).
func (p *plan) next() int {
	n := len(p.steps)
	for i := range n {
		k := (p.last + 1 + i) % n
		if p.steps[k].health.available() {
			return k
		}
	}
	return -1
}

// noneHealthy is the error when every target's breaker is open.
func (p *plan) noneHealthy() error {
	wait := time.Duration(0)
	names := make([]string, len(p.steps))
	for i, s := range p.steps {
		if w := s.health.openFor(); i == 0 || w < wait {
			wait = w
		}
		names[i] = s.target.String()
	}
	return &unhealthyError{retryAfter: wait, targets: names}
}

// unhealthyError is ErrNoHealthyProvider with the time until a breaker
// half-opens, as an llm.RetryAfterer, so the HTTP layer can say Retry-After.
type unhealthyError struct {
	retryAfter time.Duration
	targets    []string
}

func (e *unhealthyError) Error() string {
	return fmt.Sprintf("%v: every target's breaker is open (%v); the first lets a probe through in %s", ErrNoHealthyProvider, e.targets, e.retryAfter)
}
func (e *unhealthyError) Unwrap() error             { return ErrNoHealthyProvider }
func (e *unhealthyError) RetryAfter() time.Duration { return e.retryAfter }

// fallsBackOn reports whether err matches one of a route's fallback_on
// entries: an upstream error code ("context_length_exceeded") or an HTTP
// status ("413").
func fallsBackOn(err error, on []string) bool {
	if len(on) == 0 {
		return false
	}
	code, status := llm.ErrorCode(err), llm.StatusOf(err)
	for _, o := range on {
		if o != "" && (o == code || (status != 0 && o == strconv.Itoa(status))) {
			return true
		}
	}
	return false
}
