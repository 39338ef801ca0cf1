package app

import (
	"context"
	"fmt"

	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	adaptive "github.com/production-go/gateway-lab/solutions/09-adaptive"
	"github.com/prometheus/client_golang/prometheus"
)

// limitProviders puts each provider behind its own adaptive concurrency
// limit (lab 09) when -adaptive-limit names an algorithm, and exports each
// limit as gateway_provider_concurrency_limit{provider}. The limit sits
// inside the attempt: an attempt that cannot get a permit before its
// deadline fails as a timeout, and the gateway retries or falls back as for
// any other. The gateway's own -max-concurrent stays the ceiling.
func (s *Service) limitProviders(ps []gateway.Provider, reg prometheus.Registerer) ([]gateway.Provider, error) {
	kind := s.Config.AdaptiveLimit
	if kind == "" {
		return ps, nil
	}
	ceiling := s.Config.Gateway.MaxConcurrent
	if ceiling < 1 {
		return nil, fmt.Errorf("-adaptive-limit: needs -max-concurrent ≥ 1 as its ceiling, got %d", ceiling)
	}
	initial := max(1, ceiling/2)
	out := make([]gateway.Provider, len(ps))
	limits := make(map[string]*adaptive.Limiter, len(ps))
	for i, p := range ps {
		var alg adaptive.Algorithm
		var err error
		switch kind {
		case "aimd":
			alg, err = adaptive.NewAIMD(adaptive.AIMDConfig{Min: 1, Max: ceiling, Initial: initial})
		case "gradient":
			alg, err = adaptive.NewGradient(adaptive.GradientConfig{Min: 1, Max: ceiling, Initial: initial})
		default:
			return nil, fmt.Errorf("-adaptive-limit: %q is not one of aimd, gradient (or empty: off)", kind)
		}
		if err != nil {
			return nil, fmt.Errorf("-adaptive-limit: %w", err)
		}
		lim, err := adaptive.New(alg)
		if err != nil {
			return nil, fmt.Errorf("-adaptive-limit: %w", err)
		}
		limits[p.Name()] = lim
		out[i] = &limitedProvider{wrapped: wrapped{p}, lim: lim}
	}
	reg.MustRegister(limitCollector{limits: limits, desc: prometheus.NewDesc("gateway_provider_concurrency_limit",
		"The adaptive concurrency limit (-adaptive-limit) on calls to each provider.", []string{"provider"}, nil)})
	return out, nil
}

// limitedProvider calls p with a permit from lim.
type limitedProvider struct {
	wrapped
	lim *adaptive.Limiter
}

func (l *limitedProvider) Generate(ctx context.Context, req gateway.Request) (gateway.Completion, error) {
	tok, err := l.lim.Acquire(ctx)
	if err != nil {
		return gateway.Completion{}, fmt.Errorf("%s: waiting for an adaptive-limit permit: %w", l.p.Name(), err)
	}
	c, err := l.p.Generate(ctx, req)
	tok.Done(outcome(err))
	return c, err
}

// Stream holds the permit for the whole stream: a stream is one call.
func (l *limitedProvider) Stream(ctx context.Context, req gateway.Request, emit func(gateway.Chunk) error) (gateway.Completion, error) {
	return l.streamOrWhole(ctx, req, emit, l.Generate, func(sp gateway.StreamingProvider) (gateway.Completion, error) {
		tok, err := l.lim.Acquire(ctx)
		if err != nil {
			return gateway.Completion{}, fmt.Errorf("%s: waiting for an adaptive-limit permit: %w", l.p.Name(), err)
		}
		clientGone := false
		c, err := sp.Stream(ctx, req, func(ch gateway.Chunk) error {
			err := emit(ch)
			clientGone = clientGone || err != nil
			return err
		})
		if clientGone {
			tok.Done(adaptive.Ignored) // the client left mid-stream: not the provider's doing
		} else {
			tok.Done(outcome(err))
		}
		return c, err
	})
}

// outcome is adaptive.OutcomeOf in the gateway's terms: the caller's own
// faults (a 4xx other than 408 and 429) and cancellations say nothing about
// the provider's load.
func outcome(err error) adaptive.Outcome {
	switch gateway.ReasonOf(err) {
	case gateway.ReasonNone:
		return adaptive.Success
	case gateway.ReasonCancelled, gateway.ReasonClient:
		return adaptive.Ignored
	}
	return adaptive.Dropped
}

type limitCollector struct {
	limits map[string]*adaptive.Limiter
	desc   *prometheus.Desc
}

func (c limitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c limitCollector) Collect(ch chan<- prometheus.Metric) {
	for name, lim := range c.limits {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(lim.Limit()), name)
	}
}
