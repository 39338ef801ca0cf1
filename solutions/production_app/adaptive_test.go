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

func TestAdaptiveLimitWrapsEachProviderAndExportsItsLimit(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-adaptive-limit=aimd", "-max-concurrent=8",
		"-provider", "name=alpha,latency=5ms", "-provider", "name=beta,latency=5ms")
	page := metrics(t, a.url)
	assert.Contains(t, page, `gateway_provider_concurrency_limit{provider="alpha"} 4`, "each provider starts at half of -max-concurrent")
	assert.Contains(t, page, `gateway_provider_concurrency_limit{provider="beta"} 4`)
	problems, err := promlint.New(strings.NewReader(page)).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		assert.NotEqual(t, "gateway_provider_concurrency_limit", p.Metric, "promlint: %s", p.Text)
	}

	code, body := post(t, a.url+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"ping"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"alpha-1"`, "the wrapped provider still names its model")

	code, body = post(t, a.url+"/v1/chat/completions", `{"model":"auto","stream":true,"messages":[{"role":"user","content":"ping"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "data: [DONE]", "a wrapped provider still streams")

	assert.Contains(t, metrics(t, a.url), `gateway_provider_concurrency_limit{provider="alpha"} 4`,
		"two successes at 1 of 4 permits in use neither grow nor cut the limit")
}

func TestAdaptiveLimitRejectsAnUnknownAlgorithm(t *testing.T) {
	var out, errOut testkit.LogBuffer
	assert.Equal(t, 2, run(t.Context(), []string{"-adaptive-limit", "vegas"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "aimd, gradient")
}
