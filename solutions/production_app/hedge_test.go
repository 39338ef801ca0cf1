package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRetryBudgetRefusesTheRetryAndSaysSoInMetrics(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-retry-budget=0.01", "-retry-budget-min=0", "-failure-threshold=100",
		"-provider", "name=alpha,latency=1ms,error-rate=1,errors=500")
	assert.Contains(t, metrics(t, a.url), `gateway_retry_budget_exhausted_total{kind="retry",provider="alpha"} 0`,
		"the series starts at zero")
	code, body := post(t, a.url+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"ping"}]}`)
	assert.Equal(t, http.StatusBadGateway, code, "the last attempt's error, at once: %s", body)
	page := metrics(t, a.url)
	assert.Contains(t, page, `gateway_retry_budget_exhausted_total{kind="retry",provider="alpha"} 1`)
	assert.Contains(t, page, `gateway_provider_attempts_total{model="alpha-1",outcome="error",provider="alpha"} 1`,
		"one call: the retry was refused before it began")
}

func TestHedgingExportsItsCountersAndStillAnswers(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-hedge-delay=1s", "-retry-budget=0.2",
		"-provider", "name=alpha,latency=1ms", "-provider", "name=beta,latency=1ms")
	code, body := post(t, a.url+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"ping"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"alpha-1"`, "a hedged provider still names its model")
	assert.Contains(t, a.stderr.String(), `"hedge_delay":"1s"`, "the startup line says hedging is on")
	assert.Contains(t, a.stderr.String(), `"retry_budget":0.2`)
	code, body = post(t, a.url+"/v1/chat/completions", `{"model":"auto","stream":true,"messages":[{"role":"user","content":"ping"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "data: [DONE]", "a hedged provider still streams")

	page := metrics(t, a.url)
	for _, series := range []string{
		`gateway_hedges_total{provider="alpha"} 0`,
		`gateway_hedge_wins_total{provider="beta"} 0`,
		`gateway_retry_budget_exhausted_total{kind="hedge",provider="alpha"} 0`,
		`gateway_retry_budget_exhausted_total{kind="retry",provider="beta"} 0`,
	} {
		assert.Contains(t, page, series)
	}
	problems, err := promlint.New(strings.NewReader(page)).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		assert.NotContains(t, []string{"gateway_hedges_total", "gateway_hedge_wins_total", "gateway_retry_budget_exhausted_total"}, p.Metric, "promlint: %s", p.Text)
	}
}

func TestHedgesAskTheGatewaysRetryBudget(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-hedge-delay=10ms", "-retry-budget=0.01", "-retry-budget-min=0",
		"-provider", "name=alpha,latency=200ms")
	code, body := post(t, a.url+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"ping"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	page := metrics(t, a.url)
	assert.Contains(t, page, `gateway_retry_budget_exhausted_total{kind="hedge",provider="alpha"} 1`,
		"one request deposits 0.01 of a retry: the hedge at 10 ms is refused by the budget the retries use")
	assert.Contains(t, page, `gateway_hedges_total{provider="alpha"} 0`)
}

func TestHedgeAndBudgetFlagsAreChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a percentile without a delay", []string{"-hedge-percentile=0.95"}, "-hedge-percentile needs -hedge-delay too"},
		{"a percentile of 1", []string{"-hedge-delay=100ms", "-hedge-percentile=1"}, "-hedge-percentile must be in (0, 1)"},
		{"a negative delay", []string{"-hedge-delay=-1s"}, "-hedge-delay must not be negative, got -1s"},
		{"a budget over 1", []string{"-retry-budget=1.5"}, "-retry-budget is the share of requests that may be retried, in [0, 1]"},
		{"a budget that is not a number", []string{"-retry-budget=NaN"}, "-retry-budget is the share"},
		{"a negative budget minimum", []string{"-retry-budget=0.1", "-retry-budget-min=-1"}, "-retry-budget-min must not be negative"},
		{"a zero budget window", []string{"-retry-budget=0.1", "-retry-budget-window=0s"}, "-retry-budget-window must be positive"},
		{"a budget minimum without a budget", []string{"-retry-budget-min=5"}, "-retry-budget-min does nothing without -retry-budget"},
		{"a budget window with a zero budget", []string{"-retry-budget=0", "-retry-budget-window=5s"}, "-retry-budget-window does nothing without -retry-budget"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut testkit.LogBuffer
			assert.Equal(t, 2, run(t.Context(), tc.args, &out, &errOut, nil), "%v", tc.args)
			assert.Contains(t, errOut.String(), tc.want, "%v", tc.args)
		})
	}
}
