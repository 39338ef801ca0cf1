package telemetry

import (
	"github.com/production-go/gateway-lab/gateway/guard"
	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/prometheus/client_golang/prometheus"
)

// Guard is what secure_app's guard reports: who was refused and why, and
// which shared limit's Redis failed. It implements guard.Observer.
type Guard struct {
	authRefusals  *prometheus.CounterVec
	limitRefusals *prometheus.CounterVec
	redisErrors   *prometheus.CounterVec
	readOn        *prometheus.CounterVec
	mode          string // failed_open or failed_closed: what a Redis failure does here
}

// NewGuard makes the guard's metrics; Register adds them to a registry.
// failOpen says what a Redis failure does in this deployment, for the
// redis errors' mode label.
func NewGuard(failOpen bool) *Guard {
	g := &Guard{
		authRefusals: counter("gateway_auth_refusals_total",
			"Requests refused with 401, by the precise reason (never sent to the caller).", "reason"),
		limitRefusals: counter("gateway_tier_refusals_total",
			"Requests refused by their tier's policy, by limit: model, prompt_bytes, in_flight, tokens, tier.", "limit"),
		redisErrors: counter("gateway_redis_limit_errors_total",
			"Redis failures of the shared limits, by limit and by what was done: failed_open or failed_closed.", "limit", "mode"),
		readOn: counter("gateway_calls_read_on_total",
			"Metered upstream calls whose caller left, read on for their usage, by how they ended: billed (the usage came), unbilled (charged the reservation), refused (too many at once: cut).", "outcome"),
		mode: "failed_closed",
	}
	for _, o := range guard.ReadOnOutcomes {
		g.readOn.WithLabelValues(string(o))
	}
	if failOpen {
		g.mode = "failed_open"
	}
	for _, limit := range policy.Limits {
		if limit.Shared() {
			g.redisErrors.WithLabelValues(string(limit), g.mode)
		}
		if limit != policy.LimitRate { // a rate refusal is the router's (gateway_admission_rejections_total)
			g.limitRefusals.WithLabelValues(string(limit))
		}
	}
	return g
}

// Register adds the guard's metrics to reg.
func (g *Guard) Register(reg prometheus.Registerer) {
	reg.MustRegister(g.authRefusals, g.limitRefusals, g.redisErrors, g.readOn)
}

// AuthRefused counts a request refused with 401, by its precise reason.
func (g *Guard) AuthRefused(reason identity.Reason) {
	g.authRefusals.WithLabelValues(string(reason)).Inc()
}

// TierRefused counts a request its tier's policy refused, by limit.
func (g *Guard) TierRefused(limit policy.Limit) {
	g.limitRefusals.WithLabelValues(string(limit)).Inc()
}

// LimitFailed counts a shared limit whose Redis failed.
func (g *Guard) LimitFailed(limit policy.Limit) {
	g.redisErrors.WithLabelValues(string(limit), g.mode).Inc()
}

// ReadOn counts a metered call read on after its caller left, by how it
// ended.
func (g *Guard) ReadOn(outcome guard.ReadOnOutcome) {
	g.readOn.WithLabelValues(string(outcome)).Inc()
}
