package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/production-go/gateway-lab/gateway/tenant"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The HTTP tests call the handler directly (httptest.NewRecorder) inside a
// synctest bubble, so provider latencies and deadlines run on a fake clock.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type rig struct {
	srv *Server
	gw  *router.Router
	reg *prometheus.Registry
}

func baseConfig() router.Config {
	return router.Config{
		Slots:  router.Slots{MaxConcurrent: 8, MaxQueueWait: time.Second},
		Retry:  router.Retry{MaxAttempts: 3, BaseBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, AttemptTimeout: 2 * time.Second, TotalTimeout: 5 * time.Second},
		Health: router.Health{FailureThreshold: 3, RecoveryTimeout: 30 * time.Second},
	}
}

// gated is a tenant gate of lab 02's buckets (rate, burst) and a cap of
// maxInFlight requests per tenant (0: none but the identity's own), its
// refusals counted in the rig's metrics; then each of then.
func gated(rate float64, burst, maxInFlight int, then ...func(*Options)) func(*Options) {
	return func(o *Options) {
		b, err := admission.NewTokenBucket(rate, burst)
		if err != nil {
			panic(err)
		}
		if o.Gate, err = tenant.NewGate(tenant.GateConfig{Limiter: b, MaxInFlight: maxInFlight, Observer: o.Metrics}); err != nil {
			panic(err)
		}
		for _, f := range then {
			f(o)
		}
	}
}

func newRig(t *testing.T, cfg router.Config, providers ...llm.Provider) *rig {
	t.Helper()
	return newRigWith(t, cfg, nil, providers...)
}

// newRigWith builds the server with options adjusted by opts.
func newRigWith(t *testing.T, cfg router.Config, opts func(*Options), providers ...llm.Provider) *rig {
	t.Helper()
	reg := prometheus.NewRegistry()
	r := &rig{reg: reg}
	m := telemetry.New(reg)
	cfg.Observer = m
	gw, err := router.New(cfg, providers...)
	require.NoError(t, err)
	r.gw = gw
	m.WatchRouter(gw)
	o := Options{Router: gw, Drainer: drain.New(), Metrics: m, MetricsPage: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		MaxBodyBytes: 4096, Stream: router.StreamLimits{FirstToken: time.Second, Idle: time.Second}}
	if opts != nil {
		opts(&o)
	}
	r.srv = New(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		_ = gw.Close(ctx)
	})
	return r
}

func simProvider(t *testing.T, cfg sim.Config) *sim.Provider {
	t.Helper()
	p, err := sim.New(cfg)
	require.NoError(t, err)
	return p
}

func (r *rig) do(method, path, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	r.srv.ServeHTTP(rec, req)
	return rec
}

const chatBody = `{"model":"auto","messages":[{"role":"user","content":"why is the sky blue"}]}`

// The OpenAI shapes as a client reads them.
type (
	errorDetail struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	chatMessage struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	chatChoice struct {
		Message      *chatMessage `json:"message"`
		Delta        *chatMessage `json:"delta"`
		FinishReason *string      `json:"finish_reason"`
	}
	chatResponse struct {
		ID      string       `json:"id"`
		Object  string       `json:"object"`
		Model   string       `json:"model"`
		Choices []chatChoice `json:"choices"`
		Usage   *struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
)

func decodeError(t *testing.T, rec *httptest.ResponseRecorder) errorDetail {
	t.Helper()
	var body struct{ Error errorDetail }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), "errors are JSON in the OpenAI shape: %s", rec.Body.String())
	return body.Error
}

// code is an error's code, "" for null.
func (e errorDetail) code() string {
	if e.Code == nil {
		return ""
	}
	return *e.Code
}

func TestChatCompletionReturnsTheOpenAIShape(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha", Latency: 50 * time.Millisecond}))
		rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "acme")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var resp chatResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
		assert.Equal(t, "chat.completion", resp.Object)
		assert.Equal(t, "alpha-1", resp.Model, "model names the upstream model that answered")
		require.Len(t, resp.Choices, 1)
		assert.Contains(t, resp.Choices[0].Message.Content, "[alpha]")
		require.NotNil(t, resp.Usage)
		assert.Positive(t, resp.Usage.TotalTokens)
		assert.NotEmpty(t, rec.Header().Get("X-Request-ID"))
	})
}

func TestFallbackIsVisibleInTheModelField(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(),
			simProvider(t, sim.Config{Name: "alpha", ErrorRate: 1}),
			simProvider(t, sim.Config{Name: "beta", Model: "beta-large"}))
		rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var resp chatResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
		assert.Equal(t, "beta-large", resp.Model, "a caller (and a cost dashboard) can see the fallback served the request")
		page := r.do(http.MethodGet, "/metrics", "").Body.String()
		assert.Contains(t, page, `gateway_provider_failures_total{model="alpha-1",provider="alpha",reason="server_error"} 1`, "the failure that caused the fail-over is counted by reason")
		assert.Contains(t, page, `gateway_provider_retries_total{model="beta-large",provider="beta"} 1`, "and the retry by the target it went to")
	})
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(body string) []string {
	var out []string
	for d := range chatapi.Events(strings.NewReader(body)) {
		out = append(out, string(d))
	}
	return out
}

func TestStreamingHappyPathEndsWithDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha", Latency: 20 * time.Millisecond, ChunkDelay: 5 * time.Millisecond}))
		rec := r.do(http.MethodPost, "/v1/chat/completions",
			`{"model":"auto","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`)
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
		events := sseEvents(rec.Body.String())
		require.Greater(t, len(events), 3)
		assert.Equal(t, "[DONE]", events[len(events)-1], "a complete stream ends with [DONE]")
		var text strings.Builder
		for _, e := range events[:len(events)-1] {
			var c chatResponse
			require.NoError(t, json.Unmarshal([]byte(e), &c), e)
			if len(c.Choices) > 0 && c.Choices[0].Delta != nil {
				text.WriteString(c.Choices[0].Delta.Content)
			}
		}
		assert.Contains(t, text.String(), "[alpha] You asked about: hello there.")
	})
}

// brokenStream sends two chunks and then fails.
type brokenStream struct{ name string }

func (b brokenStream) Name() string         { return b.name }
func (b brokenStream) HonoursContext() bool { return true } // streamed on the request's goroutine
func (b brokenStream) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}
func (b brokenStream) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	for _, c := range []string{"Half", " an"} {
		if err := emit(llm.Chunk{Raw: chatapi.NewFrame("alpha-1").Chunk(chatapi.Delta{Content: &c}, "")}); err != nil {
			return llm.Completion{}, err
		}
		time.Sleep(10 * time.Millisecond)
	}
	return llm.Completion{}, errors.New("upstream connection reset mid-stream")
}

func TestMidStreamFailureEndsWithAnErrorEventAndNoDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		beta := simProvider(t, sim.Config{Name: "beta"})
		r := newRig(t, baseConfig(), brokenStream{"alpha"}, beta)
		rec := r.do(http.MethodPost, "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, rec.Code, "the status was sent with the first chunk")
		events := sseEvents(rec.Body.String())
		require.NotEmpty(t, events)
		assert.NotContains(t, events, "[DONE]", "a cut stream must not end like a complete one")
		assert.Contains(t, events[len(events)-1], `"error"`, "it ends with an error event")
		assert.NotContains(t, rec.Body.String(), "[beta]", "after the first byte there is no silent switch to another provider")
	})
}

// silent accepts the call and never says anything.
type silent struct{ name string }

func (s silent) Name() string { return s.name }
func (s silent) Generate(ctx context.Context, _ llm.Request) (llm.Completion, error) {
	<-ctx.Done()
	return llm.Completion{}, ctx.Err()
}

func TestSilentUpstreamTimesOutInsteadOfHanging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := baseConfig()
		cfg.Retry.MaxAttempts = 2
		r := newRig(t, cfg, silent{"alpha"}, silent{"beta"})
		start := time.Now()
		rec := r.do(http.MethodPost, "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		assert.Equal(t, http.StatusGatewayTimeout, rec.Code, "no first token from anyone: a timeout before the first byte is a proper 504")
		assert.Less(t, time.Since(start), 3*time.Second, "the first-token limit (1 s per attempt) ends it, not the 5 s total")
		assert.Equal(t, "deadline_exceeded", decodeError(t, rec).code())
	})
}

func TestSilentProviderIsFailedOverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := baseConfig()
		cfg.Retry.BaseBackoff, cfg.Retry.MaxBackoff = time.Second, time.Second
		r := newRig(t, cfg, silent{"alpha"}, simProvider(t, sim.Config{Name: "beta"}))
		start := time.Now()
		rec := r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Contains(t, rec.Body.String(), `"provider":"beta"`)
		assert.Equal(t, 2*time.Second, time.Since(start),
			"alpha said nothing for its whole 2 s attempt: the fail-over to beta starts at once, with no backoff on top")
	})
}

func TestDeadlineIs504WithinTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), silent{"alpha"})
		start := time.Now()
		rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody)
		assert.Equal(t, http.StatusGatewayTimeout, rec.Code)
		assert.LessOrEqual(t, time.Since(start), 5*time.Second, "the answer comes within TotalTimeout")
	})
}

func TestRateLimitedIs429WithRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, baseConfig(), gated(0.5, 1, 0), simProvider(t, sim.Config{Name: "alpha"}))
		require.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "acme").Code)
		rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "acme")
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "2", rec.Header().Get("Retry-After"), "one token per 2 s: Retry-After in whole seconds, rounded up")
		assert.Equal(t, "rate_limited", decodeError(t, rec).code())
		assert.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "other").Code, "other tenants are unaffected")
	})
}

func TestSaturatedIs503AndQueueWaitIsMeasured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := baseConfig()
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, 200*time.Millisecond
		r := newRig(t, cfg, simProvider(t, sim.Config{Name: "alpha", Latency: 150 * time.Millisecond}))
		var wg sync.WaitGroup
		codes := make([]int, 3)
		for i := range codes {
			wg.Go(func() { codes[i] = r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`).Code })
		}
		wg.Wait()
		assert.ElementsMatch(t, []int{200, 200, 503}, codes, "one runs, one waits 150 ms and runs, one waits 200 ms and is refused")
		count, sum := histogram(t, r.reg, "gateway_queue_wait_seconds")
		assert.Equal(t, uint64(2), count, "both admitted requests are in the queue-wait histogram")
		assert.InDelta(t, 0.15, sum, 0.001, "and the one that queued waited 150 ms")
	})
}

func histogram(t *testing.T, reg *prometheus.Registry, name string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0, 0
}

func TestBadInputIsRefusedClearly(t *testing.T) {
	for _, c := range []struct {
		name, body string
		status     int
		code       string
		param      string
		mentions   string
	}{
		{"too large", `{"messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "request_too_large", "", "4096"},
		{"malformed JSON", `{"messages":[`, 400, "invalid_json", "", "byte"},
		{"not an object", `[1,2]`, 400, "invalid_type", "", "JSON object"},
		{"messages not an array", `{"messages":"hi"}`, 400, "invalid_type", "messages", "messages must be an array"},
		{"no messages", `{"model":"auto","messages":[]}`, 400, "invalid_value", "messages", "at least one"},
		{"messages missing", `{"model":"auto"}`, 400, "missing_required_parameter", "messages", "messages is required"},
		{"message not an object", `{"messages":["hi"]}`, 400, "invalid_type", "messages[0]", "messages[0] must be an object"},
		{"bad role", `{"messages":[{"role":"user","content":"a"},{"role":"robot","content":"hi"}]}`, 400, "invalid_value", "messages[1].role", "robot"},
		{"no role", `{"messages":[{"content":"hi"}]}`, 400, "missing_required_parameter", "messages[0].role", "required"},
		{"content a number", `{"messages":[{"role":"user","content":42}]}`, 400, "invalid_type", "messages[0].content", "string, an array of content parts, or null"},
		{"model a number", `{"model":4,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "model", "model must be a string"},
		{"stream a string", `{"stream":"yes","messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_type", "stream", "true or false"},
		{"max_tokens zero", `{"max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "max_tokens", "at least 1"},
		{"max_tokens fractional", `{"max_tokens":1.5,"messages":[{"role":"user","content":"hi"}]}`, 400, "invalid_value", "max_tokens", "whole number"},
		{"model twice", `{"model":"alpha","model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, 400, "duplicate_field", "model", "more than once"},
		{"unknown model", `{"model":"gpt-99","messages":[{"role":"user","content":"hi"}]}`, 404, "model_not_found", "model", "gpt-99"},
		{"empty body", ``, 400, "invalid_json", "", "empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha"}))
				rec := r.do(http.MethodPost, "/v1/chat/completions", c.body)
				assert.Equal(t, c.status, rec.Code, c.name)
				e := decodeError(t, rec)
				assert.Equal(t, c.code, e.code(), c.name)
				if c.param != "" && assert.NotNil(t, e.Param, "%s: param names the field", c.name) {
					assert.Equal(t, c.param, *e.Param, c.name)
				}
				assert.Contains(t, e.Message, c.mentions, "%s: the message names what is wrong", c.name)
				assert.NotContains(t, e.Message, "httpapi", "%s: no Go identifiers in messages", c.name)
				assert.NotContains(t, e.Message, "[]", "%s: no Go types in messages", c.name)
			})
		})
	}
}

// What a real OpenAI client sends must never be refused: fields the gateway
// does not know, content parts, null content with tool calls.
func TestRealShapedRequestsAreAccepted(t *testing.T) {
	for name, body := range map[string]string{
		"unknown and future fields": `{"messages":[{"role":"user","content":"hi"}],"temperature":0.2,"seed":7,"logprobs":true,"top_logprobs":2,"metadata":{"k":"v"},"reasoning_effort":"low","parallel_tool_calls":false,"x_future":{"a":[1,2]}}`,
		"content parts":             `{"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"low"}}]}]}`,
		"image only":                `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`,
		"tool round trip":           `{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_1","content":"sunny"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{}}}}]}`,
		"developer and names":       `{"messages":[{"role":"developer","content":"be brief"},{"role":"user","name":"ann","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":""}]}`,
		"nulls":                     `{"model":"auto","stream":null,"stream_options":null,"max_tokens":null,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha"}))
				rec := r.do(http.MethodPost, "/v1/chat/completions", body)
				assert.Equal(t, http.StatusOK, rec.Code, "%s: %s", name, rec.Body.String())
			})
		})
	}
}

func TestGenerateEndpointReportsAttemptsAndQueueWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha", Latency: 40 * time.Millisecond}))
		rec := r.do(http.MethodPost, "/v1/generate", `{"prompt":"hello","provider":"alpha"}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var resp generateResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
		assert.Equal(t, "alpha", resp.Provider)
		assert.Equal(t, 1, resp.Attempts)
		assert.Equal(t, 0.0, resp.QueueWaitMS)
		assert.Equal(t, 40.0, resp.LatencyMS)
	})
}

func TestRouteTableMapsAPublicNameToTargetsInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alpha := simProvider(t, sim.Config{Name: "alpha", ErrorRate: 1}) // the primary is down
		beta := simProvider(t, sim.Config{Name: "beta"})
		cfg := baseConfig()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "alpha", Model: "alpha-large"}, {Provider: "beta", Model: "beta-small"}}}}
		r := newRig(t, cfg, alpha, beta)
		rec := r.do(http.MethodPost, "/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		var resp chatResponse
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &resp))
		assert.Equal(t, "beta-small", resp.Model, "the fallback target answered, and the response says which upstream model it was")
		models := r.do(http.MethodGet, "/v1/models", "")
		assert.Contains(t, models.Body.String(), `"id":"chat"`, "/v1/models lists the route's public name")
	})
}

func TestModelsListsPublicNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha"}), simProvider(t, sim.Config{Name: "beta"}))
		rec := r.do(http.MethodGet, "/v1/models", "")
		require.Equal(t, http.StatusOK, rec.Code)
		var list modelList
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
		var ids []string
		for _, m := range list.Data {
			ids = append(ids, m.ID)
		}
		assert.Equal(t, []string{"auto", "alpha", "beta"}, ids)
	})
}

func TestMetricNamesPassPromlint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha"}))
		r.do(http.MethodPost, "/v1/chat/completions", chatBody)
		problems, err := testutil.GatherAndLint(r.reg)
		require.NoError(t, err)
		assert.Empty(t, problems, "metric names and help must pass promlint")
		page := r.do(http.MethodGet, "/metrics", "")
		assert.Contains(t, page.Body.String(), `gateway_http_requests_total{code="200",route="POST /v1/chat/completions"} 1`)
		assert.Contains(t, page.Body.String(), "gateway_requests_in_flight 0")
		assert.Contains(t, page.Body.String(), `gateway_breaker_state{model="alpha-1",provider="alpha"} 0`)
	})
}

func TestTenantIDsAreKeptApartAndBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, baseConfig(), gated(0.001, 1, 0), simProvider(t, sim.Config{Name: "alpha"}))
		assert.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`).Code, "no header: the anonymous tenant")
		assert.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "anonymous").Code,
			"a client calling itself \"anonymous\" does not share the header-less callers' quota")
		assert.Equal(t, http.StatusTooManyRequests, r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`).Code, "the anonymous quota is spent")

		long := strings.Repeat("t", MaxTenantBytes+1)
		rec := r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", long)
		assert.Equal(t, http.StatusBadRequest, rec.Code, "a tenant id one byte too long is refused, not cut into a collision")
		assert.Equal(t, "invalid_tenant", decodeError(t, rec).code())
		assert.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", long[:MaxTenantBytes]).Code,
			"exactly MaxTenantBytes is fine")
		rec = r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "acme\x7f")
		assert.Equal(t, http.StatusBadRequest, rec.Code, "control characters are refused")
		rec = r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "abc\u00a0")
		assert.Equal(t, http.StatusBadRequest, rec.Code, "a trailing no-break space is not trimmed into another tenant's name")
		req := httptest.NewRequest(http.MethodPost, "/v1/generate", strings.NewReader(`{"prompt":"hi"}`))
		req.Header.Add("X-Tenant-ID", "a")
		req.Header.Add("X-Tenant-ID", "b")
		two := httptest.NewRecorder()
		r.srv.ServeHTTP(two, req)
		assert.Equal(t, http.StatusBadRequest, two.Code, "two tenant headers: which to charge is not ours to guess")
	})
}

func TestOneTenantOverItsInFlightCapGets429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := baseConfig()
		cfg.Slots.MaxConcurrent = 4
		r := newRigWith(t, cfg, gated(1000, 1000, 1), simProvider(t, sim.Config{Name: "alpha", Latency: time.Second}))
		done := make(chan int, 1)
		go func() { done <- r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "greedy").Code }()
		synctest.Wait()
		rec := r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "greedy")
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "too_many_concurrent_requests", decodeError(t, rec).code())
		assert.Equal(t, "1", rec.Header().Get("Retry-After"))
		assert.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "patient").Code)
		assert.Equal(t, http.StatusOK, <-done)
	})
}

func TestEveryChunkOfASimulatedStreamNamesTheSameModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha", Model: "alpha-large", ChunkDelay: time.Millisecond}))
		rec := r.do(http.MethodPost, "/v1/chat/completions", `{"stream":true,"messages":[{"role":"user","content":"hello there"}]}`)
		require.Equal(t, http.StatusOK, rec.Code)
		events := sseEvents(rec.Body.String())
		require.Greater(t, len(events), 3)
		ids := map[string]bool{}
		for _, e := range events[:len(events)-1] {
			var c chatResponse
			require.NoError(t, json.Unmarshal([]byte(e), &c), e)
			assert.Equal(t, "alpha-large", c.Model, "every chunk names the model that answers, from the first: %s", e)
			ids[c.ID] = true
		}
		assert.Len(t, ids, 1, "one id for the whole answer")
		assert.NotContains(t, rec.Body.String(), `"usage"`, "no usage chunk unless stream_options.include_usage asks for one")
	})
}

func TestDrainRefusalIsAnOpenAIError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := drain.New()
		r := newRigWith(t, baseConfig(), func(o *Options) { o.Drainer = d }, simProvider(t, sim.Config{Name: "alpha"}))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		d.Drain(ctx)
		rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody)
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
		assert.Equal(t, "application/json", rec.Header().Get("Content-Type"), "every error on /v1/chat/completions is JSON, the drain's too")
		assert.Equal(t, "draining", decodeError(t, rec).code())
		assert.Equal(t, "close", rec.Header().Get("Connection"))
		assert.Equal(t, "1", rec.Header().Get("Retry-After"), "and says when to retry, as every 503 does")
	})
}

func TestOverheadIsMeasuredAndCanBeShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, baseConfig(), func(o *Options) { o.OverheadHeader = true }, simProvider(t, sim.Config{Name: "alpha", Latency: 300 * time.Millisecond}))
		rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody)
		require.Equal(t, http.StatusOK, rec.Code)
		assert.Equal(t, "0.000", rec.Header().Get("X-Gateway-Overhead-Ms"),
			"in fake time the gateway's own work takes no time: the 300 ms upstream call is not overhead")
		count, _ := histogram(t, r.reg, "gateway_overhead_seconds")
		assert.Equal(t, uint64(1), count)
	})
}

func TestAdmitHookSeesTheRequestAndSettlesWithItsUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			seen    tenant.Admission
			settled []*llm.Usage
			asked   string
		)
		cfg := baseConfig()
		cfg.Routes = []router.Route{{Name: "denied", Targets: []router.Target{{Provider: "alpha"}}}}
		r := newRigWith(t, cfg, func(o *Options) {
			o.Admit = func(ctx context.Context, id tenant.Identity, a tenant.Admission) (context.Context, tenant.Pass, *chatapi.Error) {
				seen = a
				from, _ := tenant.IdentityFrom(ctx)
				asked = from.Tenant
				if a.Model == "denied" {
					return ctx, tenant.Pass{}, &chatapi.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "tokens_per_minute", Message: "over", RetryAfter: 1500 * time.Millisecond}
				}
				return ctx, tenant.Pass{Done: func(u *llm.Usage, err error) {
					assert.NoError(t, err)
					settled = append(settled, u)
				}}, nil
			}
		}, simProvider(t, sim.Config{Name: "alpha"}))

		body := `{"model":"auto","max_tokens":64,"n":2,"messages":[{"role":"user","content":[{"type":"text","text":"count me"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}]}`
		rec := r.do(http.MethodPost, "/v1/chat/completions", body, "X-Tenant-ID", "acme")
		require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		assert.Equal(t, tenant.Admission{Model: "auto", BodyBytes: len(body), MaxTokens: 64, Choices: 2, MediaParts: 1}, seen)
		assert.Equal(t, "acme", asked, "the identity travels in the request's context")
		require.Len(t, settled, 1, "done is called once, when the request ends")
		require.NotNil(t, settled[0], "with the answer's usage")
		assert.Positive(t, settled[0].TotalTokens)

		rec = r.do(http.MethodPost, "/v1/chat/completions", `{"model":"denied","messages":[{"role":"user","content":"hi"}]}`)
		assert.Equal(t, http.StatusTooManyRequests, rec.Code)
		assert.Equal(t, "2", rec.Header().Get("Retry-After"), "an admission refusal's Retry-After, rounded up to whole seconds")
		assert.Equal(t, "tokens_per_minute", decodeError(t, rec).code())
		assert.Len(t, settled, 1, "a refused request has nothing to settle")
	})
}

// countingMeter counts the upstream calls run through it.
type countingMeter struct{ calls atomic.Int64 }

func (m *countingMeter) Call(ctx context.Context, req llm.Request, emit func(llm.Chunk) error, call llm.Call) (llm.Completion, error) {
	m.calls.Add(1)
	return call(ctx, req, emit)
}

func TestAPassesMeterRidesOnEveryUpstreamCallOfItsRequest(t *testing.T) {
	for _, path := range []string{"/v1/chat/completions", "/v1/generate"} {
		for _, stream := range []bool{false, true} {
			if stream && path == "/v1/generate" {
				continue
			}
			t.Run(fmt.Sprintf("%s stream=%v", path, stream), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					m := &countingMeter{}
					r := newRigWith(t, baseConfig(), func(o *Options) {
						o.Admit = func(ctx context.Context, _ tenant.Identity, _ tenant.Admission) (context.Context, tenant.Pass, *chatapi.Error) {
							return ctx, tenant.Pass{Meter: m}, nil
						}
					}, llm.Metered(simProvider(t, sim.Config{Name: "alpha"})))
					body := fmt.Sprintf(`{"stream":%v,"messages":[{"role":"user","content":"hi"}]}`, stream)
					if path == "/v1/generate" {
						body = `{"prompt":"hi"}`
					}
					rec := r.do(http.MethodPost, path, body)
					require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
					assert.Equal(t, int64(1), m.calls.Load(), "the one upstream call ran through the request's meter")
				})
			})
		}
	}
}

func TestGenerateIsAsStrictAsChat(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       int
	}{
		{"a prompt", `{"prompt":"hi"}`, 200},
		{"the auto provider", `{"prompt":"hi","provider":"auto"}`, 200},
		{"a provider by name", `{"prompt":"hi","provider":"alpha"}`, 200},
		{"the prompt twice", `{"prompt":"a","prompt":"b"}`, 400},
		{"a field name in capitals", `{"PROMPT":"hi"}`, 400},
		{"a prompt that is a number", `{"prompt":5}`, 400},
		{"a field generate does not take", `{"prompt":"hi","temperature":1}`, 400},
		{"an unknown provider", `{"prompt":"hi","provider":"nope"}`, 404},
		{"a blank prompt", `{"prompt":"   "}`, 400},
		{"a list, not an object", `["hi"]`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, baseConfig(), simProvider(t, sim.Config{Name: "alpha"}))
				body, want := tc.body, tc.want
				rec := r.do(http.MethodPost, "/v1/generate", body)
				assert.Equal(t, want, rec.Code, "%s: %s", body, rec.Body.String())
				if want != 200 {
					assert.NotContains(t, rec.Body.String(), "gateway:", "%s: no internal error chain in the message", body)
				}
			})
		})
	}
}
