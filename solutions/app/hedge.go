package app

import (
	"context"
	"errors"
	"fmt"

	bridge "github.com/production-go/gateway-lab/solutions/06-bridge"
	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	hedging "github.com/production-go/gateway-lab/solutions/10-hedging"
	"github.com/production-go/gateway-lab/solutions/httpapi"
)

// hedgeWindow is how many answered calls per provider -hedge-percentile
// is taken over.
const hedgeWindow = 100

// retryBudget is lab 10's Budget when -retry-budget is set, else nil. The
// gateway asks it before each retry; the hedges below ask it too.
func (s *Service) retryBudget() (*hedging.Budget, error) {
	c := s.Config.RetryBudget
	switch {
	case !(c.Percent >= 0 && c.Percent <= 1): // NaN too
		return nil, fmt.Errorf("-retry-budget is the share of requests that may be retried, in [0, 1] (e.g. 0.1; 0: off), got %v", c.Percent)
	case c.Percent == 0:
		return nil, nil
	case c.MinPerSec < 0:
		return nil, fmt.Errorf("-retry-budget-min must not be negative, got %d", c.MinPerSec)
	case c.TTL <= 0:
		return nil, fmt.Errorf("-retry-budget-window must be positive (e.g. 10s), got %v", c.TTL)
	}
	b, err := hedging.NewBudget(hedging.BudgetConfig{TTL: c.TTL, MinRetriesPerSec: c.MinPerSec, PercentCanRetry: c.Percent})
	if err != nil {
		return nil, fmt.Errorf("-retry-budget: %w", err)
	}
	return b, nil
}

// hedgeProviders puts each provider that honours its context behind lab
// 10's hedger when -hedge-delay is set. A hedge goes to the same provider
// — another of its replicas, most likely, behind its load balancer — and
// not to the route's next target: which targets a request may use, in
// which order, is the gateway's plan, and a hedge that left the route
// would break its promise. A provider that ignores its context is not
// hedged: the loser could not be stopped, only waited for.
func (s *Service) hedgeProviders(ps []gateway.Provider, budget *hedging.Budget) ([]gateway.Provider, error) {
	c := s.Config.Hedge
	switch {
	case c.Delay < 0:
		return nil, fmt.Errorf("-hedge-delay must not be negative, got %v", c.Delay)
	case !(c.Percentile >= 0 && c.Percentile < 1):
		return nil, fmt.Errorf("-hedge-percentile must be in (0, 1) (e.g. 0.95; 0: off), got %v", c.Percentile)
	case c.Percentile > 0 && c.Delay == 0:
		return nil, fmt.Errorf("-hedge-percentile needs -hedge-delay too: the delay used until %d calls are in (e.g. -hedge-delay=150ms)", hedgeWindow)
	case c.Delay == 0:
		return ps, nil
	}
	cfg := hedging.Config{Delay: c.Delay, Percentile: c.Percentile, MaxHedges: 1}
	if c.Percentile > 0 {
		cfg.LatencyWindow = hedgeWindow
	}
	out := make([]gateway.Provider, len(ps))
	for i, p := range ps {
		out[i] = p
		if h, ok := p.(gateway.ContextHonourer); !ok || !h.HonoursContext() {
			continue
		}
		// One Hedger per provider, with no budget of its own: the gateway
		// already deposited this request's share when its first attempt
		// began, so each hedge withdraws from the shared budget itself.
		h, err := hedging.New(cfg)
		if err != nil {
			return nil, fmt.Errorf("-hedge-delay, -hedge-percentile: %w", err)
		}
		// Two targets, both p: attempt 0 is "p", the hedge "p (hedge)".
		out[i] = &hedgedProvider{wrapped: wrapped{p}, h: h, budget: budget, m: s.Metrics, targets: []string{p.Name(), p.Name() + " (hedge)"}}
	}
	return out, nil
}

// hedgedProvider calls p, and p again if the first call is slower than the
// hedge delay; the first success wins and the other call is cancelled and
// waited for before Generate returns.
type hedgedProvider struct {
	wrapped
	h       *hedging.Hedger
	budget  *hedging.Budget // nil: hedges are not budgeted
	m       *httpapi.Metrics
	targets []string // the first call's name and the hedge's, for Do (attempt k goes to targets[k mod 2])
}

// errHedgeRefused stands for a hedge the budget did not allow: it fails at
// once, and Do goes on waiting for the call it would have hedged.
var errHedgeRefused = errors.New("hedge refused by the retry budget")

type answer struct {
	c     gateway.Completion
	hedge bool
}

func (h *hedgedProvider) Generate(ctx context.Context, req gateway.Request) (gateway.Completion, error) {
	var (
		firstErr  error // the unhedged call's; Do waits for it before returning
		hedgeRuns bool
	)
	name := h.p.Name()
	a, err := hedging.Do(ctx, h.h, h.targets, func(ctx context.Context, target string) (answer, error) {
		if target == h.targets[0] { // attempt 0: Do names each attempt's target, whichever goroutine runs first
			c, err := h.call(ctx, req)
			firstErr = err
			return answer{c: c}, err
		}
		if !h.budget.Withdraw(name) { // a nil budget allows every hedge
			h.m.HedgeRefused(name)
			return answer{}, errHedgeRefused
		}
		hedgeRuns = true
		h.m.HedgeStarted(name)
		c, err := h.call(ctx, req)
		return answer{c: c, hedge: true}, err
	})
	switch {
	case err == nil && a.hedge:
		h.m.HedgeWon(name)
	case err != nil && !hedgeRuns && firstErr != nil:
		// No hedge ran and the one call failed: its error, as if unhedged.
		// (Do's error when the call never ran, or answered only after the
		// context ended.)
		return gateway.Completion{}, firstErr
	}
	return a.c, err
}

// call is one call to p on one of Do's goroutines, where the gateway's own
// recover cannot reach: a panic becomes an error wrapping bridge.ErrPanic,
// as it would without hedging, so it fails the request and no breaker
// counts it.
func (h *hedgedProvider) call(ctx context.Context, req gateway.Request) (c gateway.Completion, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("gateway: provider %s: %w: %v", h.p.Name(), bridge.ErrPanic, v)
		}
	}()
	return h.p.Generate(ctx, req)
}

// Stream is not hedged: two streams would race their first chunks, and
// only one may ever reach the client. The gateway's first-token limit and
// its fail-over before the first byte cover a slow start. A provider that
// cannot stream answers whole — hedged — as one chunk.
func (h *hedgedProvider) Stream(ctx context.Context, req gateway.Request, emit func(gateway.Chunk) error) (gateway.Completion, error) {
	return h.streamOrWhole(ctx, req, emit, h.Generate, func(sp gateway.StreamingProvider) (gateway.Completion, error) {
		return sp.Stream(ctx, req, emit)
	})
}
