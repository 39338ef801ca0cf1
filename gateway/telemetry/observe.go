package telemetry

import (
	"errors"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/tenant"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics implements the router's and the hedges' observers.
var (
	_ router.Observer = (*Metrics)(nil)
	_ tenant.Observer = (*Metrics)(nil)
)

// Admitted implements router.Observer.
func (m *Metrics) Admitted(_ string, queueWait time.Duration) {
	m.queueWait.Observe(queueWait.Seconds())
}

// Refused implements tenant.Observer: the tenant gate's refusals count in
// the same gateway_rejected_total as the router's, by reason.
func (m *Metrics) Refused(_ tenant.Identity, limit policy.Limit) {
	reason := router.RejectRateLimited
	if limit == policy.LimitInFlight {
		reason = router.RejectTenantBusy
	}
	m.rejections.WithLabelValues(string(reason)).Inc()
}

// LimitFailed implements tenant.Observer.
func (m *Metrics) LimitFailed() {
	m.rejections.WithLabelValues(string(router.RejectLimiterFailed)).Inc()
}

// Rejected implements router.Observer.
func (m *Metrics) Rejected(_ string, reason router.RejectReason) {
	m.rejections.WithLabelValues(string(reason)).Inc()
	if reason == router.RejectOverloaded {
		m.timeout(LayerQueue)
	}
}

// Attempt implements router.Observer.
func (m *Metrics) Attempt(t router.Target, attempt int, took time.Duration, err error) {
	reason := llm.ReasonOf(err) // once: the outcome is its short form
	m.attempts.WithLabelValues(t.Provider, t.Model, string(reason.Outcome())).Inc()
	m.attemptDuration.WithLabelValues(t.Provider, t.Model).Observe(took.Seconds())
	if attempt > 1 {
		m.retries.WithLabelValues(t.Provider, t.Model).Inc()
	}
	if reason != llm.ReasonNone {
		m.failures.WithLabelValues(t.Provider, t.Model, string(reason)).Inc()
	}
	if reason == llm.ReasonTimeout {
		m.timeout(timeoutLayer(err))
	}
}

// timeoutLayer names which limit ended an attempt: a stream's first-token
// or idle limit, or the attempt's own timeout.
func timeoutLayer(err error) TimeoutLayer {
	switch {
	case errors.Is(err, router.ErrFirstTokenTimeout):
		return LayerFirstToken
	case errors.Is(err, router.ErrStreamIdle):
		return LayerIdle
	}
	return LayerAttempt
}

// BreakerChanged implements router.Observer.
func (m *Metrics) BreakerChanged(t router.Target, from, to breaker.State) {
	m.transitions.WithLabelValues(t.Provider, t.Model, from.String(), to.String()).Inc()
}

// Late implements router.Observer.
func (m *Metrics) Late(_ time.Duration, err error) {
	m.late.WithLabelValues(string(llm.OutcomeOf(err))).Inc()
}

// RetryRefused implements router.Observer.
func (m *Metrics) RetryRefused(provider string) {
	m.budgetRefusals.WithLabelValues(provider, string(KindRetry)).Inc()
}

// Continued implements router.Observer.
func (m *Metrics) Continued(t router.Target, outcome router.ContinueOutcome) {
	m.continuations.WithLabelValues(t.Provider, t.Model, string(outcome)).Inc()
}

// Probed implements router.Observer.
func (m *Metrics) Probed(t router.Target, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "failed"
	}
	m.probes.WithLabelValues(t.Provider, t.Model, outcome).Inc()
}

// BudgetKind says what the retry budget refused.
type BudgetKind string

// The kinds.
const (
	KindRetry BudgetKind = "retry" // a retry or fail-over of the router's
	KindHedge BudgetKind = "hedge" // a hedge
)

// hedgeMetrics count hedges and what the retry budget refused.
type hedgeMetrics struct {
	budgetRefusals *prometheus.CounterVec
	hedges         *prometheus.CounterVec
	hedgeWins      *prometheus.CounterVec
}

func newHedgeMetrics() hedgeMetrics {
	return hedgeMetrics{
		budgetRefusals: counter("gateway_retry_budget_exhausted_total",
			"Retries and hedges the retry budget refused, by the provider they would have gone to and kind: retry or hedge.", "provider", "kind"),
		hedges: counter("gateway_hedges_total",
			"Hedges started: second calls to a provider whose first call was slower than the hedge delay.", "provider"),
		hedgeWins: counter("gateway_hedge_wins_total", "Hedges that answered before the call they hedged.", "provider"),
	}
}

func (m hedgeMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.budgetRefusals, m.hedges, m.hedgeWins}
}

// Hedged implements hedged.Observer.
func (m *Metrics) Hedged(provider string) { m.hedges.WithLabelValues(provider).Inc() }

// HedgeWon implements hedged.Observer.
func (m *Metrics) HedgeWon(provider string) { m.hedgeWins.WithLabelValues(provider).Inc() }

// HedgeRefused implements hedged.Observer.
func (m *Metrics) HedgeRefused(provider string) {
	m.budgetRefusals.WithLabelValues(provider, string(KindHedge)).Inc()
}
