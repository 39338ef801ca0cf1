// Package hedged hedges a provider's slow calls (lab 10): a call still
// running after the hedge delay gets a second one to the same provider —
// another of its replicas, most likely, behind its load balancer — and the
// first answer wins; the other call is cancelled and waited for before
// Generate returns.
//
// A hedge goes to the same provider and not to the route's next target:
// which targets a request may use, in which order, is the router's plan,
// and a hedge that left the route would break its promise. Each hedge
// withdraws from the retry budget the router's retries spend (the router
// deposited this request's share when its first attempt began), so
// hedging cannot multiply an outage either. Streams are not hedged: two
// streams would race their first chunks, and only one may ever reach the
// client.
package hedged

import (
	"context"
	"errors"

	"github.com/production-go/gateway-lab/gateway/llm"
	hedging "github.com/production-go/gateway-lab/solutions/10-hedging"
)

// Observer hears of each hedge, by the provider it went to. Methods must
// be quick and safe for concurrent use.
type Observer interface {
	// Hedged: a hedge was sent.
	Hedged(provider string)
	// HedgeWon: a hedge answered before the call it hedged.
	HedgeWon(provider string)
	// HedgeRefused: the retry budget did not allow a hedge.
	HedgeRefused(provider string)
}

// Provider is a hedged provider.
type Provider struct {
	llm.Wrapped
	h       *hedging.Hedger
	budget  *hedging.Budget // nil: hedges are not budgeted
	obs     Observer
	targets []string // the first call's name and the hedge's, for Do (attempt k goes to targets[k mod 2])
}

// Wrap hedges p with one Hedger of cfg (MaxHedges is set to 1: one hedge
// per call), spending budget (nil: unbudgeted). A provider that does not
// honour its context comes back unwrapped: the losing call could not be
// stopped, only waited for.
func Wrap(p llm.Provider, cfg hedging.Config, budget *hedging.Budget, obs Observer) (llm.Provider, error) {
	if !llm.HonoursContext(p) {
		return p, nil
	}
	cfg.MaxHedges = 1
	h, err := hedging.New(cfg)
	if err != nil {
		return nil, err
	}
	// Two targets, both p: attempt 0 is "p", the hedge "p (hedge)".
	return &Provider{Wrapped: llm.Wrapped{Inner: p}, h: h, budget: budget, obs: obs,
		targets: []string{p.Name(), p.Name() + " (hedge)"}}, nil
}

// errHedgeRefused stands for a hedge the budget did not allow: it fails at
// once, and Do goes on waiting for the call it would have hedged.
var errHedgeRefused = errors.New("hedge refused by the retry budget")

type answer struct {
	c     llm.Completion
	hedge bool
}

// Generate calls the wrapped provider, and again if the first call is
// slower than the hedge delay; the first success wins.
func (p *Provider) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	var (
		firstErr  error // the unhedged call's; Do waits for it before returning
		hedgeRuns bool
	)
	name := p.Name()
	a, err := hedging.Do(ctx, p.h, p.targets, func(ctx context.Context, target string) (answer, error) {
		if target == p.targets[0] { // attempt 0: Do names each attempt's target, whichever goroutine runs first
			c, err := llm.Generate(ctx, p.Inner, req)
			firstErr = err
			return answer{c: c}, err
		}
		if !p.budget.Withdraw(name) { // a nil budget allows every hedge
			p.obs.HedgeRefused(name)
			return answer{}, errHedgeRefused
		}
		hedgeRuns = true
		p.obs.Hedged(name)
		c, err := llm.Generate(ctx, p.Inner, req)
		return answer{c: c, hedge: true}, err
	})
	switch {
	case err == nil && a.hedge:
		p.obs.HedgeWon(name)
	case err != nil && !hedgeRuns && firstErr != nil:
		// No hedge ran and the one call failed: its error, as if unhedged.
		// (Do's error when the call never ran, or answered only after the
		// context ended.)
		return llm.Completion{}, firstErr
	}
	return a.c, err
}

// Stream is not hedged (see the package doc). The router's first-token
// limit and its fail-over before the first byte cover a slow start. A
// provider that cannot stream answers whole — hedged.
func (p *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	return llm.StreamWhole(ctx, p.Inner, req, emit, p.Generate)
}
