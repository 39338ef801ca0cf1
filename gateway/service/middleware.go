package service

import (
	"fmt"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/providers/hedged"
	"github.com/production-go/gateway-lab/gateway/providers/limited"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	hedging "github.com/production-go/gateway-lab/solutions/10-hedging"
)

// hedgeWindow is how many answered calls per provider -hedge-percentile
// is taken over.
const hedgeWindow = 100

// limitProviders puts each provider behind its own adaptive concurrency
// limit (lab 09) when -adaptive-limit names an algorithm, with
// -max-concurrent as the ceiling, and exports each limit.
func (s *Service) limitProviders(ps []llm.Provider) ([]llm.Provider, error) {
	kind := s.Config.AdaptiveLimit
	if kind == "" {
		return ps, nil
	}
	ceiling := s.Config.Router.Slots.MaxConcurrent
	if ceiling < 1 {
		return nil, fmt.Errorf("-adaptive-limit: needs -max-concurrent ≥ 1 as its ceiling, got %d", ceiling)
	}
	out := make([]llm.Provider, len(ps))
	watched := make([]telemetry.Limited, len(ps))
	for i, p := range ps {
		lim, err := limited.NewLimiter(limited.Algorithm(kind), ceiling)
		if err != nil {
			return nil, fmt.Errorf("-adaptive-limit: %w", err)
		}
		lp := limited.New(p, lim)
		out[i], watched[i] = lp, lp
	}
	s.Metrics.WatchLimits(watched)
	return out, nil
}

// retryBudget is lab 10's Budget when -retry-budget is set, else nil. The
// router asks it before each retry; the hedges ask it too.
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

// hedgeProviders hedges each provider that honours its context (package
// hedged) when -hedge-delay is set, spending budget.
func (s *Service) hedgeProviders(ps []llm.Provider, budget *hedging.Budget) ([]llm.Provider, error) {
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
	cfg := hedging.Config{Delay: c.Delay, Percentile: c.Percentile}
	if c.Percentile > 0 {
		cfg.LatencyWindow = hedgeWindow
	}
	out := make([]llm.Provider, len(ps))
	for i, p := range ps {
		h, err := hedged.Wrap(p, cfg, budget, s.Metrics)
		if err != nil {
			return nil, fmt.Errorf("-hedge-delay, -hedge-percentile: %w", err)
		}
		out[i] = h
	}
	return out, nil
}
