package openaicompat

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probeSeen is what an upstream saw of one probe.
type probeSeen struct {
	method, path, auth string
	body               map[string]any
}

func probing(t *testing.T, kind ProbeKind, status int) (*Provider, *[]probeSeen) {
	t.Helper()
	var seen []probeSeen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := probeSeen{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization")}
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			assert.NoError(t, json.Unmarshal(b, &s.body))
		}
		seen = append(seen, s)
		w.WriteHeader(status)
		_, _ = io.WriteString(w, `{}`)
	}))
	t.Cleanup(srv.Close)
	p, err := New(Config{Name: "up", BaseURL: srv.URL + "/v1", Model: "small-1", APIKey: "sk-1", Probe: kind})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p, &seen
}

func TestTheDefaultProbeAsksTheTargetsModelForOneToken(t *testing.T) {
	p, seen := probing(t, "", http.StatusOK)
	require.NoError(t, p.Probe(t.Context(), "big-2"))
	require.Len(t, *seen, 1)
	s := (*seen)[0]
	assert.Equal(t, http.MethodPost, s.method)
	assert.Equal(t, "/v1/chat/completions", s.path)
	assert.Equal(t, "Bearer sk-1", s.auth)
	assert.Equal(t, "big-2", s.body["model"], "the probe asks the model whose breaker is open, not the upstream's default")
	assert.EqualValues(t, 1, s.body["max_completion_tokens"], "one token: a probe costs next to nothing")

	require.NoError(t, p.Probe(t.Context(), ""))
	assert.Equal(t, "small-1", (*seen)[1].body["model"], "no model: the upstream's default")
}

func TestAProbeFailsOnAnythingButA2xx(t *testing.T) {
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusNotFound} {
		p, _ := probing(t, ProbeChat, status)
		assert.Error(t, p.Probe(t.Context(), "m"), "%d", status)
	}
}

func TestTheModelsProbeListsModelsAndTheOffProbeNeverCalls(t *testing.T) {
	p, seen := probing(t, ProbeModels, http.StatusOK)
	require.NoError(t, p.Probe(t.Context(), "m"))
	assert.Equal(t, []probeSeen{{method: http.MethodGet, path: "/v1/models", auth: "Bearer sk-1"}}, *seen)

	off, seen := probing(t, ProbeOff, http.StatusOK)
	assert.ErrorIs(t, off.Probe(t.Context(), "m"), llm.ErrNoProbe)
	assert.Empty(t, *seen)

	_, err := ParseSpec("name=a,url=http://x/v1,model=m,probe=sometimes", func(string) string { return "" })
	assert.ErrorIs(t, err, ErrInvalidConfig)
	cfg, err := ParseSpec("name=a,url=http://x/v1,model=m,probe=models,prefill=vllm", func(string) string { return "" })
	require.NoError(t, err)
	assert.Equal(t, ProbeModels, cfg.Probe)
	assert.EqualValues(t, "vllm", cfg.Prefill)
}
