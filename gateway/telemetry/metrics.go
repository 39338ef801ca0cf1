// Package telemetry is the gateway's Prometheus metrics and its
// OpenTelemetry tracing set-up: RED and saturation for the HTTP layer, the
// router's admissions, attempts, breakers and late calls (it implements
// router.Observer), hedges and retry-budget refusals (hedged.Observer),
// stream timing, tokens, adaptive limits, and secure_app's refusals.
//
// Every label value comes from a typed vocabulary (router.RejectReason,
// llm.Reason, llm.Outcome, breaker.State, policy.Limit, identity.Reason,
// StreamCut, TimeoutLayer), never from free strings or error text, so a
// label's values are a closed set. Series whose labels are known in
// advance start at zero: a counter that appears only at its first
// increment hides that increment from rate(), and its dashboard panel
// reads "no data" instead of 0.
package telemetry

import (
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is the gateway's telemetry. Its methods are safe for concurrent
// use.
type Metrics struct {
	reg prometheus.Registerer
	httpMetrics
	routerMetrics
	streamMetrics
	hedgeMetrics
}

// latencyBuckets span a cached answer (1 ms) to a long generation (60 s).
var latencyBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// gapBuckets resolve a stream's inter-chunk gaps, from a millisecond up to
// the idle limit's range (-stream-idle-timeout, 10 s by default).
var gapBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// connectBuckets resolve dial plus TLS, from half a millisecond up to the
// dial and handshake timeouts (3 s each by default).
var connectBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// overheadBuckets resolve the gateway's own time, from 25 µs to 100 ms.
var overheadBuckets = []float64{.000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .1}

// New registers the gateway's metrics with reg. Gauges that read the
// router itself are added by WatchRouter, once the router exists.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reg: reg, httpMetrics: newHTTPMetrics(), routerMetrics: newRouterMetrics(),
		streamMetrics: newStreamMetrics(), hedgeMetrics: newHedgeMetrics()}
	reg.MustRegister(m.httpMetrics.collectors()...)
	reg.MustRegister(m.routerMetrics.collectors()...)
	reg.MustRegister(m.streamMetrics.collectors()...)
	reg.MustRegister(m.hedgeMetrics.collectors()...)
	return m
}

func counter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func histogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// TimeoutLayer names which limit ended a request or an attempt.
type TimeoutLayer string

// The layers.
const (
	LayerQueue      TimeoutLayer = "queue"       // no slot within the queue wait
	LayerAttempt    TimeoutLayer = "attempt"     // one attempt's own timeout
	LayerFirstToken TimeoutLayer = "first_token" // a stream's first chunk did not come in time
	LayerIdle       TimeoutLayer = "idle"        // a stream went silent
	LayerTotal      TimeoutLayer = "total"       // the whole request's deadline (a 504)
)

// httpMetrics are the HTTP layer's RED metrics.
type httpMetrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	overhead      prometheus.Histogram
	cancellations prometheus.Counter
	timeouts      *prometheus.CounterVec
	tokens        *prometheus.CounterVec
}

func newHTTPMetrics() httpMetrics {
	m := httpMetrics{
		requests: counter("gateway_http_requests_total",
			"HTTP requests by route and status code (499: the client left; a stream cut after its 200 counts as its outcome).", "route", "code"),
		duration: histogram("gateway_http_request_duration_seconds", "HTTP request duration by route, queue wait included.", latencyBuckets, "route"),
		overhead: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gateway_overhead_seconds",
			Help: "The gateway's own time per answered request: total minus queue wait, upstream calls and backoffs.", Buckets: overheadBuckets}),
		cancellations: prometheus.NewCounter(prometheus.CounterOpts{Name: "gateway_cancellations_total",
			Help: "Requests whose client went away before the answer."}),
		timeouts: counter("gateway_timeouts_total", "Timeouts by layer: queue, attempt, first_token, idle, total.", "layer"),
		tokens:   counter("gateway_tokens_total", "Tokens the upstreams reported using, by kind: input (prompt) or output (completion).", "kind"),
	}
	for _, kind := range []string{"input", "output"} {
		m.tokens.WithLabelValues(kind)
	}
	for _, layer := range []TimeoutLayer{LayerQueue, LayerAttempt, LayerFirstToken, LayerIdle, LayerTotal} {
		m.timeouts.WithLabelValues(string(layer))
	}
	return m
}

func (m httpMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.overhead, m.cancellations, m.timeouts, m.tokens}
}

// StatusClientClosed is the status logged and counted, never sent, for a
// request whose client went away (nginx's 499).
const StatusClientClosed = chatapi.StatusClientClosed

// Request records one HTTP request: its route, the status it ended with
// and how long it took.
func (m *Metrics) Request(route string, status int, took time.Duration) {
	m.requests.WithLabelValues(route, itoa(status)).Inc()
	m.duration.WithLabelValues(route).Observe(took.Seconds())
	switch status {
	case StatusClientClosed:
		m.cancellations.Inc()
	case 504:
		m.timeout(LayerTotal)
	}
}

// Overhead records the gateway's own share of an answered request's time.
func (m *Metrics) Overhead(own time.Duration) { m.overhead.Observe(own.Seconds()) }

func (m *Metrics) timeout(layer TimeoutLayer) { m.timeouts.WithLabelValues(string(layer)).Inc() }

// routerMetrics are what the router reports through router.Observer.
type routerMetrics struct {
	queueWait       prometheus.Histogram
	rejections      *prometheus.CounterVec
	attempts        *prometheus.CounterVec
	attemptDuration *prometheus.HistogramVec
	retries         *prometheus.CounterVec
	failures        *prometheus.CounterVec
	transitions     *prometheus.CounterVec
	late            *prometheus.CounterVec
	upConnect       *prometheus.HistogramVec
	upHeaders       *prometheus.HistogramVec
	continuations   *prometheus.CounterVec
	probes          *prometheus.CounterVec
}

func newRouterMetrics() routerMetrics {
	target := []string{"provider", "model"}
	m := routerMetrics{
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gateway_queue_wait_seconds",
			Help: "Time admitted requests waited for a concurrency slot.", Buckets: latencyBuckets}),
		rejections: counter("gateway_admission_rejections_total", "Requests refused before any provider call, by reason.", "reason"),
		attempts: counter("gateway_provider_attempts_total", "Provider calls by provider, upstream model and outcome.",
			append(target, "outcome")...),
		attemptDuration: histogram("gateway_provider_attempt_duration_seconds", "Provider call duration by provider and upstream model.",
			latencyBuckets, target...),
		retries: counter("gateway_provider_retries_total", "Attempts after the first, by the provider and model they went to.", target...),
		failures: counter("gateway_provider_failures_total",
			"Failed provider calls by provider, model and reason: timeout, rate_limited, server_error, client_error, connection, cancelled, other.",
			append(target, "reason")...),
		transitions: counter("gateway_breaker_transitions_total", "Circuit breaker state changes by provider and model.",
			append(target, "from", "to")...),
		late: counter("gateway_late_outcomes_total", "Provider calls that finished after their attempt gave up on them, by outcome.", "outcome"),
		upConnect: histogram("gateway_upstream_connect_seconds", "Dial plus TLS handshake to an upstream, for calls that opened a connection.",
			connectBuckets, "provider"),
		upHeaders: histogram("gateway_upstream_headers_seconds",
			"From sending a request to an upstream to its response headers (a stream's time to first token, at the upstream).",
			latencyBuckets, "provider"),
		continuations: counter("gateway_stream_continuations_total",
			"Streams that broke after their first byte, by the provider and model that broke them and what became of them: "+
				"completed (continued on another target), failed, no_target, not_text, opted_out, at_limit.",
			append(target, "outcome")...),
		probes: counter("gateway_health_probes_total",
			"Background health probes of targets whose breaker is open, by provider, model and outcome (ok closes the breaker, failed).",
			append(target, "outcome")...),
	}
	for _, reason := range router.RejectReasons {
		m.rejections.WithLabelValues(string(reason))
	}
	return m
}

func (m routerMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.queueWait, m.rejections, m.attempts, m.attemptDuration, m.retries, m.failures,
		m.transitions, m.late, m.upConnect, m.upHeaders, m.continuations, m.probes}
}

// UpstreamTiming records where an upstream call's time went before its
// body: connect (0 for a pooled connection: not recorded) and headers.
func (m *Metrics) UpstreamTiming(provider string, connect, headers time.Duration) {
	if connect > 0 {
		m.upConnect.WithLabelValues(provider).Observe(connect.Seconds())
	}
	m.upHeaders.WithLabelValues(provider).Observe(headers.Seconds())
}
