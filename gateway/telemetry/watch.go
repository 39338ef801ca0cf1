package telemetry

import (
	"github.com/production-go/gateway-lab/gateway/router"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	"github.com/prometheus/client_golang/prometheus"
)

// WatchRouter adds the metrics read from the router on each scrape:
// in-flight requests, capacity, and every target's breaker state —
// computed when read, as the breaker computes it, so an open breaker whose
// recovery time has passed shows half-open without waiting for a request.
func (m *Metrics) WatchRouter(r *router.Router) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_requests_in_flight", Help: "Admitted requests holding a concurrency slot.",
		}, func() float64 { return float64(r.InFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_concurrency_capacity", Help: "Concurrency slots (MaxConcurrent).",
		}, func() float64 { return float64(r.Capacity()) }),
		breakerCollector{r: r, desc: prometheus.NewDesc("gateway_breaker_state",
			"Circuit breaker state by provider and upstream model, ordered by severity so that max over replicas shows the worst: 0 closed, 1 half-open, 2 open.", []string{"provider", "model"}, nil)},
	)
}

type breakerCollector struct {
	r    *router.Router
	desc *prometheus.Desc
}

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.r.Targets() {
		s, _ := c.r.TargetState(t)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, gaugeOf(s), t.Provider, t.Model)
	}
}

// gaugeOf is a breaker state as the gauge's help text and the dashboard
// read it, whatever order the breaker package declares its states in:
// ordered by severity, so that max by (provider, model) across replicas is
// the worst of them — one replica half-open must not hide another open.
func gaugeOf(s breaker.State) float64 {
	switch s {
	case breaker.HalfOpen:
		return 1
	case breaker.Open:
		return 2
	}
	return 0
}

// WatchHedging starts the hedging and retry-budget series of each provider
// at zero, for a gateway that hedges or has a retry budget.
func (m *Metrics) WatchHedging(providers []string, hedging, budget bool) {
	for _, p := range providers {
		if hedging {
			m.hedges.WithLabelValues(p)
			m.hedgeWins.WithLabelValues(p)
		}
		if budget {
			m.budgetRefusals.WithLabelValues(p, string(KindRetry))
			if hedging {
				m.budgetRefusals.WithLabelValues(p, string(KindHedge))
			}
		}
	}
}

// Limited is a provider behind an adaptive concurrency limit
// (*limited.Provider is one).
type Limited interface {
	Name() string
	Limit() int
}

// WatchLimits exports each provider's adaptive concurrency limit as
// gateway_provider_concurrency_limit{provider}, read on each scrape.
func (m *Metrics) WatchLimits(ps []Limited) {
	m.reg.MustRegister(limitCollector{ps: ps, desc: prometheus.NewDesc("gateway_provider_concurrency_limit",
		"The adaptive concurrency limit (-adaptive-limit) on calls to each provider.", []string{"provider"}, nil)})
}

type limitCollector struct {
	ps   []Limited
	desc *prometheus.Desc
}

func (c limitCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c limitCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.ps {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(p.Limit()), p.Name())
	}
}
