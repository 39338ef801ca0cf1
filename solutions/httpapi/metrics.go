package httpapi

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is the gateway's RED and saturation telemetry. It implements
// gateway.Observer, so the gateway package never imports Prometheus.
type Metrics struct {
	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	queueWait       prometheus.Histogram
	rejections      *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	attemptDuration *prometheus.HistogramVec
	retries         *prometheus.CounterVec
	failures        *prometheus.CounterVec
	breakerState    *prometheus.GaugeVec
	transitions     *prometheus.CounterVec
	timeouts        *prometheus.CounterVec
	cancellations   prometheus.Counter
	late            *prometheus.CounterVec
}

// Gauges reads saturation on scrape.
type Gauges struct {
	InFlight func() int
	Capacity func() int
}

// latencyBuckets span a cached answer (1 ms) to a long generation (60 s).
var latencyBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// NewMetrics registers the gateway's metrics with reg.
func NewMetrics(reg prometheus.Registerer, g Gauges) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_http_requests_total", Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_http_request_duration_seconds", Help: "HTTP request duration by route, queue wait included.", Buckets: latencyBuckets,
		}, []string{"route"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gateway_queue_wait_seconds", Help: "Time admitted requests waited for a concurrency slot.", Buckets: latencyBuckets,
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_admission_rejections_total", Help: "Requests refused before any provider call, by reason.",
		}, []string{"reason"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_provider_attempts_total", Help: "Provider calls by provider and outcome.",
		}, []string{"provider", "outcome"}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_provider_attempt_duration_seconds", Help: "Provider call duration by provider.", Buckets: latencyBuckets,
		}, []string{"provider"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_provider_retries_total", Help: "Attempts after the first, by the provider they went to.",
		}, []string{"provider"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_provider_failures_total", Help: "Failed provider calls by provider and reason: timeout, rate_limited, server_error, client_error, connection, cancelled, other.",
		}, []string{"provider", "reason"}),
		breakerState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gateway_breaker_state", Help: "Circuit breaker state by provider: 0 closed, 1 open, 2 half-open.",
		}, []string{"provider"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_breaker_transitions_total", Help: "Circuit breaker state changes by provider.",
		}, []string{"provider", "from", "to"}),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_timeouts_total", Help: "Timeouts by layer: queue, attempt, total.",
		}, []string{"layer"}),
		cancellations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_cancellations_total", Help: "Requests whose client went away before the answer.",
		}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_late_outcomes_total", Help: "Provider calls that finished after their attempt gave up on them, by outcome.",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.requests, m.duration, m.queueWait, m.rejections, m.attempts, m.attemptDuration,
		m.retries, m.failures, m.breakerState, m.transitions, m.timeouts, m.cancellations, m.late)
	if g.InFlight != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_requests_in_flight", Help: "Admitted requests holding a concurrency slot.",
		}, func() float64 { return float64(g.InFlight()) }))
	}
	if g.Capacity != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_concurrency_capacity", Help: "Concurrency slots (MaxConcurrent).",
		}, func() float64 { return float64(g.Capacity()) }))
	}
	return m
}

// Admitted implements gateway.Observer.
func (m *Metrics) Admitted(_ string, queueWait time.Duration) {
	m.queueWait.Observe(queueWait.Seconds())
}

// Rejected implements gateway.Observer.
func (m *Metrics) Rejected(_, reason string) {
	m.rejections.WithLabelValues(reason).Inc()
	if reason == "overloaded" {
		m.timeouts.WithLabelValues("queue").Inc()
	}
}

// Attempt implements gateway.Observer.
func (m *Metrics) Attempt(provider string, attempt int, took time.Duration, err error) {
	m.attempts.WithLabelValues(provider, outcome(err)).Inc()
	m.attemptDuration.WithLabelValues(provider).Observe(took.Seconds())
	if attempt > 1 {
		m.retries.WithLabelValues(provider).Inc()
	}
	if err != nil {
		m.failures.WithLabelValues(provider, failureReason(err)).Inc()
	}
	if errors.Is(err, context.DeadlineExceeded) {
		m.timeouts.WithLabelValues("attempt").Inc()
	}
}

// failureReason buckets a provider error for the failures metric; the next
// attempt (a retry, or a fail-over to the next provider) happened because of it.
func failureReason(err error) string {
	var sc statusCoder
	var netErr net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.As(err, &sc) && sc.StatusCode() == 429:
		return "rate_limited"
	case errors.As(err, &sc) && sc.StatusCode() >= 500:
		return "server_error"
	case errors.As(err, &sc) && sc.StatusCode() >= 400:
		return "client_error"
	case errors.As(err, &netErr), strings.Contains(err.Error(), "connection reset"):
		return "connection"
	}
	return "other"
}

// BreakerChanged implements gateway.Observer.
func (m *Metrics) BreakerChanged(provider, from, to string) {
	m.transitions.WithLabelValues(provider, from, to).Inc()
	m.breakerState.WithLabelValues(provider).Set(map[string]float64{"closed": 0, "open": 1, "half-open": 2}[to])
}

// Late implements gateway.Observer.
func (m *Metrics) Late(_ time.Duration, err error) { m.late.WithLabelValues(outcome(err)).Inc() }

// InitProviders sets each provider's breaker gauge to closed, so dashboards
// see every provider before its first transition.
func (m *Metrics) InitProviders(names []string) {
	for _, n := range names {
		m.breakerState.WithLabelValues(n).Set(0)
	}
}

func (m *Metrics) observeRequest(route string, code int, took time.Duration) {
	m.requests.WithLabelValues(route, codeLabel(code)).Inc()
	m.duration.WithLabelValues(route).Observe(took.Seconds())
	switch code {
	case statusClientClosed:
		m.cancellations.Inc()
	case 504:
		m.timeouts.WithLabelValues("total").Inc()
	}
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return "error"
}
