package httpapi

import (
	"net/http"
	"testing"
	"testing/synctest"

	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/internal/testkit/promtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

func TestTokensTheUpstreamReportedAreCountedByKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha"}))
		tokens := func(kind string) float64 { return counter(t, r.reg, "gateway_tokens_total", "kind", kind) }
		assert.True(t, promtest.Has(t, r.reg, "gateway_tokens_total", "kind", "input"), "both kinds exist at zero before any request, so a dashboard's rate() has a series")
		rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody)
		require.Equal(t, http.StatusOK, rec.Code)
		in, out := gjson.Get(rec.Body.String(), "usage.prompt_tokens").Float(), gjson.Get(rec.Body.String(), "usage.completion_tokens").Float()
		require.Positive(t, out)
		stream := r.do(http.MethodPost, "/v1/chat/completions", `{"model":"auto","stream":true,"messages":[{"role":"user","content":"why is the sky blue"}]}`)
		require.Equal(t, http.StatusOK, stream.Code)
		assert.InDelta(t, 2*in, tokens("input"), 0, "input tokens of a whole answer and a stream")
		assert.InDelta(t, 2*out, tokens("output"), 0, "output tokens of a whole answer and a stream")
	})
}
