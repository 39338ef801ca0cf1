package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/production-go/gateway-lab/internal/testkit/promtest"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var counter = promtest.Counter

func newMetrics(t *testing.T) (*telemetry.Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return telemetry.New(reg), reg
}

func TestSeriesWhoseLabelsAreKnownStartAtZero(t *testing.T) {
	_, reg := newMetrics(t)
	for _, reason := range router.RejectReasons {
		assert.True(t, promtest.Has(t, reg, "gateway_admission_rejections_total", "reason", string(reason)), reason)
	}
	for _, layer := range []telemetry.TimeoutLayer{telemetry.LayerQueue, telemetry.LayerAttempt, telemetry.LayerFirstToken, telemetry.LayerIdle, telemetry.LayerTotal} {
		assert.True(t, promtest.Has(t, reg, "gateway_timeouts_total", "layer", string(layer)), layer)
	}
	for _, kind := range []string{"input", "output"} {
		assert.True(t, promtest.Has(t, reg, "gateway_tokens_total", "kind", kind), kind)
	}
}

func TestRejectionsAreCountedByReasonAndOverloadIsAQueueTimeout(t *testing.T) {
	m, reg := newMetrics(t)
	m.Rejected("acme", router.RejectOverloaded)
	m.Rejected("acme", router.RejectRateLimited)
	m.Rejected("acme", router.RejectRateLimited)
	assert.Equal(t, 1.0, counter(t, reg, "gateway_admission_rejections_total", "reason", "overloaded"))
	assert.Equal(t, 2.0, counter(t, reg, "gateway_admission_rejections_total", "reason", "rate_limited"))
	assert.Equal(t, 1.0, counter(t, reg, "gateway_timeouts_total", "layer", "queue"), "no slot within the queue wait is a timeout of the queue")
}

func TestAttemptsAreCountedByTargetOutcomeAndReason(t *testing.T) {
	m, reg := newMetrics(t)
	big := router.Target{Provider: "up", Model: "big"}
	m.Attempt(big, 1, time.Second, nil)
	m.Attempt(big, 2, time.Second, chatapi.NewUpstreamError("up", 503, nil, 0))
	m.Attempt(big, 3, time.Second, fmt.Errorf("x: %w", router.ErrFirstTokenTimeout))
	m.Attempt(big, 3, time.Second, fmt.Errorf("x: %w", router.ErrStreamIdle))
	m.Attempt(big, 1, time.Second, fmt.Errorf("attempt: %w", context.DeadlineExceeded))
	for outcome, want := range map[llm.Outcome]float64{llm.OutcomeOK: 1, llm.OutcomeError: 1, llm.OutcomeTimeout: 3} {
		assert.Equal(t, want, counter(t, reg, "gateway_provider_attempts_total", "provider", "up", "model", "big", "outcome", string(outcome)), outcome)
	}
	assert.Equal(t, 3.0, counter(t, reg, "gateway_provider_retries_total", "provider", "up", "model", "big"), "attempts after the first")
	assert.Equal(t, 1.0, counter(t, reg, "gateway_provider_failures_total", "model", "big", "reason", "server_error"))
	assert.Equal(t, 3.0, counter(t, reg, "gateway_provider_failures_total", "model", "big", "reason", "timeout"))
	for layer, want := range map[string]float64{"first_token": 1, "idle": 1, "attempt": 1} {
		assert.Equal(t, want, counter(t, reg, "gateway_timeouts_total", "layer", layer), "each timeout by the limit that ran out: %s", layer)
	}
}

func TestBreakerTransitionsAndLateOutcomes(t *testing.T) {
	m, reg := newMetrics(t)
	m.BreakerChanged(router.Target{Provider: "up", Model: "big"}, breaker.Closed, breaker.Open)
	m.Late(time.Minute, errors.New("boom"))
	m.Late(time.Minute, nil)
	assert.Equal(t, 1.0, counter(t, reg, "gateway_breaker_transitions_total", "model", "big", "from", "closed", "to", "open"))
	assert.Equal(t, 1.0, counter(t, reg, "gateway_late_outcomes_total", "outcome", "error"))
	assert.Equal(t, 1.0, counter(t, reg, "gateway_late_outcomes_total", "outcome", "ok"))
}

func TestRequestsCountTheirOutcome(t *testing.T) {
	m, reg := newMetrics(t)
	m.Request("POST /v1/chat/completions", 200, time.Second)
	m.Request("POST /v1/chat/completions", telemetry.StatusClientClosed, time.Second)
	m.Request("POST /v1/chat/completions", 504, time.Second)
	assert.Equal(t, 1.0, counter(t, reg, "gateway_http_requests_total", "code", "499"))
	assert.Equal(t, 1.0, counter(t, reg, "gateway_cancellations_total"), "a 499 is a client that left")
	assert.Equal(t, 1.0, counter(t, reg, "gateway_timeouts_total", "layer", "total"), "a 504 is the total deadline")
}

func TestHedgesAndBudgetRefusalsAreCountedByKind(t *testing.T) {
	m, reg := newMetrics(t)
	m.WatchHedging([]string{"alpha"}, true, true)
	for _, s := range [][]string{{"gateway_hedges_total", "provider", "alpha"}, {"gateway_hedge_wins_total", "provider", "alpha"},
		{"gateway_retry_budget_exhausted_total", "kind", "retry"}, {"gateway_retry_budget_exhausted_total", "kind", "hedge"}} {
		assert.True(t, promtest.Has(t, reg, s[0], s[1:]...), "%v starts at zero", s)
	}
	m.Hedged("alpha")
	m.HedgeWon("alpha")
	m.HedgeRefused("alpha")
	m.RetryRefused("alpha")
	m.RetryRefused("alpha")
	assert.Equal(t, 1.0, counter(t, reg, "gateway_hedges_total", "provider", "alpha"))
	assert.Equal(t, 1.0, counter(t, reg, "gateway_hedge_wins_total", "provider", "alpha"))
	assert.Equal(t, 1.0, counter(t, reg, "gateway_retry_budget_exhausted_total", "provider", "alpha", "kind", "hedge"))
	assert.Equal(t, 2.0, counter(t, reg, "gateway_retry_budget_exhausted_total", "provider", "alpha", "kind", "retry"))
}

func TestTokensAreCountedAsReportedAndNeverGuessed(t *testing.T) {
	m, reg := newMetrics(t)
	m.Tokens(&llm.Usage{PromptTokens: 3, CompletionTokens: 5, TotalTokens: 8})
	m.Tokens(nil)
	m.Tokens(&llm.Usage{PromptTokens: -1, CompletionTokens: -2})
	assert.Equal(t, 3.0, counter(t, reg, "gateway_tokens_total", "kind", "input"))
	assert.Equal(t, 5.0, counter(t, reg, "gateway_tokens_total", "kind", "output"), "a negative count from an upstream adds nothing")
}

type limit struct {
	name string
	n    int
}

func (l limit) Name() string { return l.name }
func (l limit) Limit() int   { return l.n }

func TestWatchedGaugesAreReadOnEachScrape(t *testing.T) {
	m, reg := newMetrics(t)
	m.WatchLimits([]telemetry.Limited{limit{"alpha", 7}})
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gateway_provider_concurrency_limit The adaptive concurrency limit (-adaptive-limit) on calls to each provider.
# TYPE gateway_provider_concurrency_limit gauge
gateway_provider_concurrency_limit{provider="alpha"} 7
`), "gateway_provider_concurrency_limit"))
}

func TestMetricNamesPassPromlint(t *testing.T) {
	m, reg := newMetrics(t)
	m.WatchLimits([]telemetry.Limited{limit{"alpha", 7}})
	telemetry.NewGuard(false).Register(reg)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestGuardCountsRefusalsByTheirTypedReason(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail_open=%v", failOpen), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			g := telemetry.NewGuard(failOpen)
			g.Register(reg)
			mode := map[bool]string{false: "failed_closed", true: "failed_open"}[failOpen]
			for _, l := range []policy.Limit{policy.LimitRate, policy.LimitTokens, policy.LimitInFlight} {
				assert.True(t, promtest.Has(t, reg, "gateway_redis_limit_errors_total", "limit", string(l), "mode", mode), "%s starts at zero", l)
			}
			g.AuthRefused(identity.ReasonSignature)
			g.TierRefused(policy.LimitModel)
			g.LimitFailed(policy.LimitTokens)
			assert.Equal(t, 1.0, counter(t, reg, "gateway_auth_refusals_total", "reason", "signature invalid"))
			assert.Equal(t, 1.0, counter(t, reg, "gateway_tier_refusals_total", "limit", "model"))
			assert.Equal(t, 1.0, counter(t, reg, "gateway_redis_limit_errors_total", "limit", "tokens", "mode", mode))
		})
	}
}

func TestTracingIsOffUnlessAnEndpointIsSet(t *testing.T) {
	tp, err := telemetry.Tracing(func(string) string { return "" })
	require.NoError(t, err)
	assert.Nil(t, tp, "no endpoint, no exporter, nothing to pay")
	telemetry.ShutdownTracing(nil) // a no-op, not a panic
}

// failing always fails with a 503.
type failing struct{ name string }

func (f failing) Name() string { return f.name }
func (failing) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, chatapi.NewUpstreamError("x", 503, nil, 0)
}

func TestTheBreakerGaugeReadsZeroOneTwoForClosedHalfOpenOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, reg := newMetrics(t)
		r, err := router.New(router.Config{
			Slots:  router.Slots{MaxConcurrent: 4},
			Retry:  router.Retry{MaxAttempts: 1, AttemptTimeout: time.Second, TotalTimeout: time.Second},
			Health: router.Health{FailureThreshold: 1, RecoveryTimeout: 10 * time.Second},

			Observer: m, Routes: []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "down"}, {Provider: "up", Model: "m"}}}}},
			failing{"down"}, failing{"up"})
		require.NoError(t, err)
		defer func() { require.NoError(t, r.Close(context.Background())) }()
		m.WatchRouter(r)
		req := router.Request{Tenant: "t", Provider: "down", Chat: chatapi.NewRequest("hi", false)}
		_, err = r.Generate(t.Context(), req)
		require.Error(t, err)
		time.Sleep(5 * time.Second)
		req.Provider = "up"
		_, err = r.Generate(t.Context(), req)
		require.Error(t, err)
		time.Sleep(5 * time.Second) // down's recovery time is up; up's is half gone
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gateway_breaker_state Circuit breaker state by provider and upstream model, ordered by severity so that max over replicas shows the worst: 0 closed, 1 half-open, 2 open.
# TYPE gateway_breaker_state gauge
gateway_breaker_state{model="",provider="down"} 1
gateway_breaker_state{model="",provider="up"} 2
gateway_breaker_state{model="m",provider="up"} 0
`), "gateway_breaker_state"))
	})
}
