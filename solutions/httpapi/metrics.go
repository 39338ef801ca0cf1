package httpapi

import (
	"errors"
	"strconv"
	"time"

	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is the gateway's RED and saturation telemetry. It implements
// gateway.TargetObserver, so the gateway package never imports Prometheus,
// and every provider series carries the upstream model too.
type Metrics struct {
	reg             prometheus.Registerer
	requests        *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	overhead        prometheus.Histogram
	queueWait       prometheus.Histogram
	rejections      *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	attemptDuration *prometheus.HistogramVec
	retries         *prometheus.CounterVec
	failures        *prometheus.CounterVec
	transitions     *prometheus.CounterVec
	timeouts        *prometheus.CounterVec
	cancellations   prometheus.Counter
	streamCuts      *prometheus.CounterVec
	late            *prometheus.CounterVec
	upConnect       *prometheus.HistogramVec
	upHeaders       *prometheus.HistogramVec
	firstChunk      prometheus.Histogram
	chunkGap        prometheus.Histogram
	streamTime      prometheus.Histogram
	tokens          *prometheus.CounterVec
	budgetRefusals  *prometheus.CounterVec
	hedges          *prometheus.CounterVec
	hedgeWins       *prometheus.CounterVec
}

// latencyBuckets span a cached answer (1 ms) to a long generation (60 s).
var latencyBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// overheadBuckets resolve the gateway's own time, from 25 µs to 100 ms.
var overheadBuckets = []float64{.000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .1}

// NewMetrics registers the gateway's metrics with reg. Gauges that read the
// gateway itself are added by WatchGateway, once the gateway exists.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	target := []string{"provider", "model"}
	m := &Metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_http_requests_total", Help: "HTTP requests by route and status code (499: the client left; a stream cut after its 200 counts as its outcome).",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_http_request_duration_seconds", Help: "HTTP request duration by route, queue wait included.", Buckets: latencyBuckets,
		}, []string{"route"}),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gateway_overhead_seconds", Help: "The gateway's own time per answered request: total minus queue wait, upstream calls and backoffs.", Buckets: overheadBuckets,
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gateway_queue_wait_seconds", Help: "Time admitted requests waited for a concurrency slot.", Buckets: latencyBuckets,
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_admission_rejections_total", Help: "Requests refused before any provider call, by reason.",
		}, []string{"reason"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_provider_attempts_total", Help: "Provider calls by provider, upstream model and outcome.",
		}, append(target, "outcome")),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gateway_provider_attempt_duration_seconds", Help: "Provider call duration by provider and upstream model.", Buckets: latencyBuckets,
		}, target),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_provider_retries_total", Help: "Attempts after the first, by the provider and model they went to.",
		}, target),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_provider_failures_total", Help: "Failed provider calls by provider, model and reason: timeout, rate_limited, server_error, client_error, connection, cancelled, other.",
		}, append(target, "reason")),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_breaker_transitions_total", Help: "Circuit breaker state changes by provider and model.",
		}, append(target, "from", "to")),
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_timeouts_total", Help: "Timeouts by layer: queue, attempt, first_token, idle, total.",
		}, []string{"layer"}),
		cancellations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gateway_cancellations_total", Help: "Requests whose client went away before the answer.",
		}),
		streamCuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_stream_cuts_total", Help: "Streams ended by an error after their first chunk, by reason: client_closed, shutdown, upstream.",
		}, []string{"reason"}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gateway_late_outcomes_total", Help: "Provider calls that finished after their attempt gave up on them, by outcome.",
		}, []string{"outcome"}),
	}
	m.upConnect = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gateway_upstream_connect_seconds", Help: "Dial plus TLS handshake to an upstream, for calls that opened a connection.", Buckets: overheadBuckets,
	}, []string{"provider"})
	m.upHeaders = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "gateway_upstream_headers_seconds", Help: "From sending a request to an upstream to its response headers (a stream's time to first token, at the upstream).", Buckets: latencyBuckets,
	}, []string{"provider"})
	m.firstChunk = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "gateway_stream_first_chunk_seconds", Help: "From a stream's start at the gateway to its first chunk to the client: time to first token as the client sees it, queue wait included.", Buckets: latencyBuckets,
	})
	m.chunkGap = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "gateway_stream_chunk_gap_seconds", Help: "Time between two chunks of a stream (inter-token latency).", Buckets: overheadBuckets,
	})
	m.streamTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "gateway_stream_duration_seconds", Help: "From a stream's first chunk to its end.", Buckets: latencyBuckets,
	})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_tokens_total", Help: "Tokens the upstreams reported using, by kind: input (prompt) or output (completion).",
	}, []string{"kind"})
	m.budgetRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_retry_budget_exhausted_total", Help: "Retries and hedges the retry budget refused, by the provider they would have gone to and kind: retry or hedge.",
	}, []string{"provider", "kind"})
	m.hedges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_hedges_total", Help: "Hedges started: second calls to a provider whose first call was slower than the hedge delay.",
	}, []string{"provider"})
	m.hedgeWins = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_hedge_wins_total", Help: "Hedges that answered before the call they hedged.",
	}, []string{"provider"})
	// Series whose labels are known start at zero: a counter that appears
	// only at its first increment hides that increment from rate(), and its
	// dashboard panel reads "no data" instead of 0.
	for _, kind := range []string{"input", "output"} {
		m.tokens.WithLabelValues(kind)
	}
	for _, layer := range []string{"queue", "attempt", "first_token", "idle", "total"} {
		m.timeouts.WithLabelValues(layer)
	}
	for _, reason := range []string{gateway.RejectRateLimited, gateway.RejectTenantBusy, gateway.RejectOverloaded,
		gateway.RejectClosed, gateway.RejectCancelled, gateway.RejectLimiterFailed} {
		m.rejections.WithLabelValues(reason)
	}
	reg.MustRegister(m.tokens, m.requests, m.duration, m.overhead, m.queueWait, m.rejections, m.attempts, m.attemptDuration,
		m.retries, m.failures, m.transitions, m.timeouts, m.cancellations, m.streamCuts, m.late,
		m.upConnect, m.upHeaders, m.firstChunk, m.chunkGap, m.streamTime, m.budgetRefusals, m.hedges, m.hedgeWins)
	return m
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
			m.budgetRefusals.WithLabelValues(p, "retry")
			if hedging {
				m.budgetRefusals.WithLabelValues(p, "hedge")
			}
		}
	}
}

// RetryRefused implements gateway.RetryBudgetObserver.
func (m *Metrics) RetryRefused(provider string) {
	m.budgetRefusals.WithLabelValues(provider, "retry").Inc()
}

// HedgeRefused counts a hedge the retry budget did not allow.
func (m *Metrics) HedgeRefused(provider string) {
	m.budgetRefusals.WithLabelValues(provider, "hedge").Inc()
}

// HedgeStarted counts a hedge sent to provider.
func (m *Metrics) HedgeStarted(provider string) { m.hedges.WithLabelValues(provider).Inc() }

// HedgeWon counts a hedge that answered before the call it hedged.
func (m *Metrics) HedgeWon(provider string) { m.hedgeWins.WithLabelValues(provider).Inc() }

// ObserveUpstream records where an upstream call's time went before its
// body: connect (0 for a pooled connection: not recorded) and headers.
func (m *Metrics) ObserveUpstream(provider string, connect, headers time.Duration) {
	if connect > 0 {
		m.upConnect.WithLabelValues(provider).Observe(connect.Seconds())
	}
	m.upHeaders.WithLabelValues(provider).Observe(headers.Seconds())
}

// WatchGateway adds the metrics read from the gateway on each scrape:
// in-flight requests, capacity, and every target's breaker state —
// computed when read, as the breaker computes it, so an open breaker whose
// recovery time has passed shows half-open without waiting for a request.
func (m *Metrics) WatchGateway(g *gateway.Gateway) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_requests_in_flight", Help: "Admitted requests holding a concurrency slot.",
		}, func() float64 { return float64(g.InFlight()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gateway_concurrency_capacity", Help: "Concurrency slots (MaxConcurrent).",
		}, func() float64 { return float64(g.Capacity()) }),
		breakerCollector{g: g, desc: prometheus.NewDesc("gateway_breaker_state",
			"Circuit breaker state by provider and upstream model: 0 closed, 1 open, 2 half-open.", []string{"provider", "model"}, nil)},
	)
}

type breakerCollector struct {
	g    *gateway.Gateway
	desc *prometheus.Desc
}

func (c breakerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c breakerCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.g.Targets() {
		v := map[string]float64{"closed": 0, "open": 1, "half-open": 2}[c.g.TargetState(t)]
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, t.Provider, t.Model)
	}
}

// Admitted implements gateway.Observer.
func (m *Metrics) Admitted(_ string, queueWait time.Duration) {
	m.queueWait.Observe(queueWait.Seconds())
}

// Rejected implements gateway.Observer.
func (m *Metrics) Rejected(_, reason string) {
	m.rejections.WithLabelValues(reason).Inc()
	if reason == gateway.RejectOverloaded {
		m.timeouts.WithLabelValues("queue").Inc()
	}
}

// Attempt implements gateway.Observer (TargetAttempt is what the gateway calls).
func (m *Metrics) Attempt(provider string, attempt int, took time.Duration, err error) {
	m.TargetAttempt(gateway.Target{Provider: provider}, attempt, took, err)
}

// TargetAttempt implements gateway.TargetObserver.
func (m *Metrics) TargetAttempt(t gateway.Target, attempt int, took time.Duration, err error) {
	m.attempts.WithLabelValues(t.Provider, t.Model, gateway.Outcome(err)).Inc()
	m.attemptDuration.WithLabelValues(t.Provider, t.Model).Observe(took.Seconds())
	if attempt > 1 {
		m.retries.WithLabelValues(t.Provider, t.Model).Inc()
	}
	reason := gateway.ReasonOf(err)
	if reason != gateway.ReasonNone {
		m.failures.WithLabelValues(t.Provider, t.Model, string(reason)).Inc()
	}
	if reason == gateway.ReasonTimeout {
		m.timeouts.WithLabelValues(timeoutLayer(err)).Inc()
	}
}

// timeoutLayer names which limit ended an attempt: a stream's first-token
// or idle limit, or the attempt's own timeout.
func timeoutLayer(err error) string {
	switch {
	case errors.Is(err, gateway.ErrFirstTokenTimeout):
		return "first_token"
	case errors.Is(err, gateway.ErrStreamIdle):
		return "idle"
	}
	return "attempt"
}

// BreakerChanged implements gateway.Observer (TargetBreakerChanged is what the gateway calls).
func (m *Metrics) BreakerChanged(provider, from, to string) {
	m.TargetBreakerChanged(gateway.Target{Provider: provider}, from, to)
}

// TargetBreakerChanged implements gateway.TargetObserver.
func (m *Metrics) TargetBreakerChanged(t gateway.Target, from, to string) {
	m.transitions.WithLabelValues(t.Provider, t.Model, from, to).Inc()
}

// Late implements gateway.Observer.
func (m *Metrics) Late(_ time.Duration, err error) {
	m.late.WithLabelValues(gateway.Outcome(err)).Inc()
}

func (m *Metrics) observeRequest(route string, code int, took time.Duration) {
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(route).Observe(took.Seconds())
	switch code {
	case statusClientClosed:
		m.cancellations.Inc()
	case 504:
		m.timeouts.WithLabelValues("total").Inc()
	}
}

// tokensUsed counts an answer's tokens as its upstream reported them (an
// upstream that reported none adds nothing: no guess is counted).
func (m *Metrics) tokensUsed(u *gateway.Usage) {
	if u == nil {
		return
	}
	m.tokens.WithLabelValues("input").Add(float64(max(u.PromptTokens, 0)))
	m.tokens.WithLabelValues("output").Add(float64(max(u.CompletionTokens, 0)))
}

func (m *Metrics) streamCut(reason string) { m.streamCuts.WithLabelValues(reason).Inc() }
