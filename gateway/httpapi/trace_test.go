package httpapi

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/providers/openaicompat"
	"github.com/production-go/gateway-lab/gateway/router"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A request that fails over: its span tree, in the GenAI conventions, joined
// to the caller's trace, passed on to the upstream, with no prompt in it.
func TestTraceOfARequestThatRetriedAndFailedOver(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	var (
		mu      sync.Mutex
		parents = map[string]string{} // model → traceparent the upstream received
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		model := "small"
		if bytes.Contains(b, []byte(`"model":"big"`)) {
			model = "big"
		}
		mu.Lock()
		parents[model] = r.Header.Get("Traceparent")
		mu.Unlock()
		if model == "big" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"small-2026","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}`)
	}))
	defer up.Close()
	p, err := openaicompat.New(openaicompat.Config{Name: "up", BaseURL: up.URL + "/v1", Model: "small", Tracer: tp})
	require.NoError(t, err)
	defer p.Close()
	cfg := baseConfig()
	cfg.Tracer = tp
	cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "up", Model: "big"}, {Provider: "up", Model: "small"}}}}
	gw, err := router.New(cfg, p)
	require.NoError(t, err)
	defer func() { _ = gw.Close(context.Background()) }()
	srv := New(Options{Router: gw, Drainer: drain.New(), Tracer: tp, Stream: router.StreamLimits{FirstToken: time.Second, Idle: time.Second}})

	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions",
		strings.NewReader(`{"model":"chat","messages":[{"role":"user","content":"SECRET-PROMPT-TEXT"}]}`))
	req.Header.Set("Traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())

	spans := exp.GetSpans()
	byName := map[string][]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], s)
		assert.Equal(t, callerTrace, s.SpanContext.TraceID().String(), "%s joins the caller's trace", s.Name)
		for _, a := range s.Attributes {
			assert.NotContains(t, a.Value.String(), "SECRET-PROMPT-TEXT", "no prompt text in %s.%s", s.Name, a.Key)
		}
	}
	require.Len(t, byName["POST /v1/chat/completions"], 1)
	root := byName["POST /v1/chat/completions"][0]
	assert.Equal(t, trace.SpanKindServer, root.SpanKind)
	assert.Equal(t, "00f067aa0ba902b7", root.Parent.SpanID().String(), "the server span's parent is the caller's span")
	attrs := map[string]string{}
	for _, a := range root.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	assert.Equal(t, "chat", attrs["gen_ai.operation.name"])
	assert.Equal(t, "chat", attrs["gen_ai.request.model"])
	assert.Equal(t, "small-2026", attrs["gen_ai.response.model"])
	assert.Equal(t, "up", attrs["gen_ai.provider.name"])
	assert.Equal(t, "7", attrs["gen_ai.usage.input_tokens"])
	assert.Equal(t, "1", attrs["gen_ai.usage.output_tokens"])

	require.Len(t, byName["gateway.admission"], 1)
	assert.Equal(t, root.SpanContext.SpanID(), byName["gateway.admission"][0].Parent.SpanID())
	attempts := byName["gateway.attempt"]
	require.Len(t, attempts, 2, "one span per attempt")
	clients := map[string]tracetest.SpanStub{}
	for _, c := range append(byName["chat big"], byName["chat small"]...) {
		clients[c.Name] = c
		assert.Equal(t, trace.SpanKindClient, c.SpanKind)
	}
	for i, model := range []string{"big", "small"} {
		a := attempts[i]
		assert.Equal(t, root.SpanContext.SpanID(), a.Parent.SpanID(), "attempts hang under the request")
		c, ok := clients["chat "+model]
		require.True(t, ok, "a client span for the call to %s", model)
		assert.Equal(t, a.SpanContext.SpanID(), c.Parent.SpanID(), "the upstream call hangs under its attempt")
		mu.Lock()
		got := parents[model]
		mu.Unlock()
		assert.Equal(t, "00-"+callerTrace+"-"+c.SpanContext.SpanID().String()+"-01", got,
			"the upstream is sent the client span's trace context (W3C traceparent)")
	}
	assert.Equal(t, codes.Error, attempts[0].Status.Code, "the failed attempt is marked failed")
	assert.Equal(t, "server_error", attempts[0].Status.Description)
	assert.Equal(t, codes.Unset, attempts[1].Status.Code)
}
