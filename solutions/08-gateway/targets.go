package gateway

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/production-go/gateway-lab/solutions/04-breaker"
)

// normal names a target the way its breaker is keyed: a provider that
// names its default model gets the same key for "" and that model.
func (g *Gateway) normal(t Target) Target {
	if t.Model == "" {
		if dm, ok := g.byName[t.Provider].(DefaultModeler); ok {
			t.Model = dm.DefaultModel()
		}
	}
	return t
}

// breaker returns the target's breaker, making it on first use. Targets
// come from configuration (the route table), so the map stays small.
func (g *Gateway) breaker(t Target) (*breaker.Breaker, error) {
	g.mu.RLock()
	b := g.health[t]
	g.mu.RUnlock()
	if b != nil {
		return b, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if b := g.health[t]; b != nil {
		return b, nil
	}
	b, err := breaker.New(breaker.Config{
		FailureThreshold: g.cfg.FailureThreshold,
		RecoveryTimeout:  g.cfg.RecoveryTimeout,
		ProbeTimeout:     g.cfg.AttemptTimeout,
		OnStateChange:    func(from, to breaker.State) { g.breakerChanged(t, from.String(), to.String()) },
	})
	if err != nil {
		return nil, err
	}
	g.health[t] = b
	return b, nil
}

// AddTargets makes the breakers of a route's targets up front, so they
// exist (and show in metrics) before the first request, and a target
// naming an unknown provider is an error at start, not at the first call.
func (g *Gateway) AddTargets(targets ...Target) error {
	for _, t := range targets {
		if g.byName[t.Provider] == nil {
			return fmt.Errorf("%w: %q (have %v)", ErrUnknownProvider, t.Provider, g.Providers())
		}
		if _, err := g.breaker(g.normal(t)); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
	}
	return nil
}

// Targets lists every target the gateway keeps health for, sorted.
func (g *Gateway) Targets() []Target {
	g.mu.RLock()
	out := make([]Target, 0, len(g.health))
	for t := range g.health {
		out = append(out, t)
	}
	g.mu.RUnlock()
	slices.SortFunc(out, func(a, b Target) int {
		return cmp.Or(cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.Model, b.Model))
	})
	return out
}

func (g *Gateway) breakerChanged(t Target, from, to string) {
	if g.tobs != nil {
		g.tobs.TargetBreakerChanged(t, from, to)
		return
	}
	g.obs.BreakerChanged(t.Provider, from, to)
}

// step is one target of a request's route, resolved.
type step struct {
	target   Target
	provider Provider
	health   *breaker.Breaker
	direct   bool // the provider honours its context: no bridge needed
}

// plan is one request's way through its targets: which one failed last,
// which it has tried, and where the next attempt starts.
type plan struct {
	steps      []step
	tried      []bool
	last       int // index of the step that failed last; -1 before any failure
	pinned     bool
	fallbackOn []string
}

// plan resolves a request's targets into r.plan: the pinned provider
// alone, the route's targets, or every provider in priority order.
func (g *Gateway) plan(r *run, pinned Provider) error {
	var targets []Target
	switch {
	case pinned != nil:
		targets = []Target{{Provider: pinned.Name(), Model: r.req.Model}}
	case len(r.req.Route) > 0:
		targets = r.req.Route
	default:
		targets = g.byOrder
	}
	p := &r.plan
	*p = plan{steps: r.inline[:0], tried: r.tried[:0], last: -1, pinned: pinned != nil, fallbackOn: r.req.FallbackOn}
	for _, t := range targets {
		t = g.normal(t)
		b, err := g.breaker(t)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		prov := g.byName[t.Provider]
		h, ok := prov.(ContextHonourer)
		p.steps = append(p.steps, step{target: t, provider: prov, health: b, direct: ok && h.HonoursContext()})
		p.tried = append(p.tried, false)
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
// every breaker is open.
func (p *plan) next() int {
	n := len(p.steps)
	for i := range n {
		k := (p.last + 1 + i) % n
		if p.steps[k].health.State() != breaker.Open {
			return k
		}
	}
	return -1
}

// noneHealthy is the error when every target's breaker is open.
func (p *plan) noneHealthy() error {
	wait := time.Duration(0)
	for i, s := range p.steps {
		if w := s.health.OpenFor(); i == 0 || w < wait {
			wait = w
		}
	}
	names := make([]string, len(p.steps))
	for i, s := range p.steps {
		names[i] = s.target.String()
	}
	return &unhealthyError{retryAfter: wait, targets: names}
}

// unhealthyError is ErrNoHealthyProvider with the time until a breaker
// half-opens, as a RetryAfterer, so the HTTP layer can say Retry-After.
type unhealthyError struct {
	retryAfter time.Duration
	targets    []string
}

func (e *unhealthyError) Error() string {
	return fmt.Sprintf("%v: every target's breaker is open (%v); the first lets a probe through in %s", ErrNoHealthyProvider, e.targets, e.retryAfter)
}
func (e *unhealthyError) Unwrap() error             { return ErrNoHealthyProvider }
func (e *unhealthyError) RetryAfter() time.Duration { return e.retryAfter }

// String is "provider" or "provider/model".
func (t Target) String() string {
	if t.Model == "" {
		return t.Provider
	}
	return t.Provider + "/" + t.Model
}
