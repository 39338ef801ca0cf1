package simhttp

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const hello = `{"model":"mock-1","messages":[{"role":"user","content":"why is the sky blue"}]}`

func newHandler(t *testing.T, cfg sim.Config, opts Options) http.Handler {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "mock"
	}
	p, err := sim.New(cfg)
	require.NoError(t, err)
	return Handler(p, opts)
}

// call serves one request on h and returns the recorded answer and how
// long it took (fake time inside a synctest bubble).
func call(h http.Handler, method, path, body string, hdr ...string) (*httptest.ResponseRecorder, time.Duration) {
	r := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(w, r)
	return w, time.Since(start)
}

func TestAnswersAfterTheConfiguredLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, sim.Config{Latency: 120 * time.Millisecond}, Options{})
		w, took := call(h, "POST", "/v1/chat/completions", hello)
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		assert.Equal(t, 120*time.Millisecond, took, "a whole answer takes the latency (no jitter, no chunk delay)")
		assert.Equal(t, "application/json", w.Header().Get("Content-Type"))
		assert.Equal(t, "chat.completion", gjson.Get(w.Body.String(), "object").String())
		assert.Equal(t, "mock-1", gjson.Get(w.Body.String(), "model").String(), "the model asked for is the model reported")
		assert.NotEmpty(t, gjson.Get(w.Body.String(), "choices.0.message.content").String())
		assert.Positive(t, gjson.Get(w.Body.String(), "usage.total_tokens").Int(), "usage is reported, as a real upstream does")
	})
}

func TestStreamsServerSentEventsChunkDelayApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, sim.Config{Latency: 50 * time.Millisecond, ChunkDelay: 10 * time.Millisecond}, Options{})
		body := `{"model":"mock-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
		w, took := call(h, "POST", "/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, "text/event-stream", w.Header().Get("Content-Type"))
		var events []string
		for d, err := range chatapi.Events(w.Body) {
			require.NoError(t, err)
			events = append(events, string(d))
		}
		require.GreaterOrEqual(t, len(events), 4, "a role chunk, words, a finish chunk, usage and [DONE]")
		assert.Equal(t, "[DONE]", events[len(events)-1], "a stream ends with [DONE]")
		words := 0
		for _, e := range events[:len(events)-1] {
			assert.Equal(t, "chat.completion.chunk", gjson.Get(e, "object").String(), "every event is an OpenAI chunk: %s", e)
			if gjson.Get(e, "choices.0.delta.content").String() != "" {
				words++
			}
		}
		assert.Positive(t, gjson.Get(events[len(events)-2], "usage.total_tokens").Int(), "include_usage adds a usage chunk")
		assert.Equal(t, 50*time.Millisecond+time.Duration(words-1)*10*time.Millisecond, took, "latency, then chunk-delay between words")
	})
}

func TestFailuresAreAnsweredAsARealUpstreamWould(t *testing.T) {
	for _, tc := range []struct {
		kind             sim.Kind
		code, retryAfter string
		status           int
	}{
		{sim.KindRateLimited, "rate_limit_exceeded", "2", http.StatusTooManyRequests},
		{sim.KindServer, "internal_error", "", http.StatusInternalServerError},
		{sim.KindBadRequest, "context_length_exceeded", "", http.StatusBadRequest},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h := newHandler(t, sim.Config{ErrorRate: 1, ErrorKinds: []sim.Kind{tc.kind}, RetryAfter: 1500 * time.Millisecond}, Options{})
				w, _ := call(h, "POST", "/v1/chat/completions", hello)
				assert.Equal(t, tc.status, w.Code)
				assert.Equal(t, tc.code, gjson.Get(w.Body.String(), "error.code").String(), w.Body.String())
				assert.Equal(t, tc.retryAfter, w.Header().Get("Retry-After"), "Retry-After in whole seconds, rounded up")
			})
		})
	}
}

func TestOutageWindowAnswers503OnlyInsideIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, sim.Config{Outages: []sim.Window{{Start: 10 * time.Second, End: 20 * time.Second}}}, Options{})
		w, _ := call(h, "POST", "/v1/chat/completions", hello)
		assert.Equal(t, http.StatusOK, w.Code, "before the window")
		time.Sleep(10 * time.Second)
		w, _ = call(h, "POST", "/v1/chat/completions", hello)
		assert.Equal(t, http.StatusServiceUnavailable, w.Code, "inside the window")
		assert.Equal(t, "service_unavailable", gjson.Get(w.Body.String(), "error.code").String())
		time.Sleep(10 * time.Second)
		w, _ = call(h, "POST", "/v1/chat/completions", hello)
		assert.Equal(t, http.StatusOK, w.Code, "after the window")
	})
}

func TestSlowWindowAddsItsExtraLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, sim.Config{Latency: 100 * time.Millisecond,
			Slowdowns: []sim.Slowdown{{Window: sim.Window{Start: 5 * time.Second, End: 10 * time.Second}, Extra: 800 * time.Millisecond, Share: 1}}}, Options{})
		_, took := call(h, "POST", "/v1/chat/completions", hello)
		assert.Equal(t, 100*time.Millisecond, took, "before the brown-out")
		time.Sleep(5 * time.Second)
		_, took = call(h, "POST", "/v1/chat/completions", hello)
		assert.Equal(t, 900*time.Millisecond, took, "inside the brown-out every call (share 1) is 800 ms slower")
	})
}

func TestTimeoutDrawHoldsTheCallUntilTheCallerGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, sim.Config{ErrorRate: 1, ErrorKinds: []sim.Kind{sim.KindTimeout}}, Options{})
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		r := httptest.NewRequestWithContext(ctx, "POST", "/v1/chat/completions", strings.NewReader(hello))
		w := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(w, r)
		assert.Equal(t, 3*time.Second, time.Since(start), "no answer until the caller's deadline")
	})
}

func TestResetClosesTheConnectionWithoutAnAnswer(t *testing.T) {
	p, err := sim.New(sim.Config{Name: "mock", ErrorRate: 1, ErrorKinds: []sim.Kind{sim.KindReset}})
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(p, Options{}))
	defer srv.Close()
	resp, err := srv.Client().Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(hello))
	if err == nil {
		_ = resp.Body.Close()
	}
	require.Error(t, err, "a reset is a connection closed with no status line")
	assert.ErrorIs(t, err, io.EOF)
}

func TestAPIKeyIsRequiredWhenSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, sim.Config{}, Options{APIKey: "k1"})
		w, _ := call(h, "POST", "/v1/chat/completions", hello)
		assert.Equal(t, http.StatusUnauthorized, w.Code, "no key")
		w, _ = call(h, "POST", "/v1/chat/completions", hello, "Authorization", "Bearer k2")
		assert.Equal(t, http.StatusUnauthorized, w.Code, "wrong key")
		w, _ = call(h, "POST", "/v1/chat/completions", hello, "Authorization", "Bearer k1")
		assert.Equal(t, http.StatusOK, w.Code, "right key")
		w, _ = call(h, "GET", "/healthz", "")
		assert.Equal(t, http.StatusOK, w.Code, "the health check needs no key")
	})
}

func TestModelsHealthAndBadRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHandler(t, sim.Config{Model: "mock-large"}, Options{})
		w, _ := call(h, "GET", "/healthz", "")
		assert.Equal(t, http.StatusOK, w.Code)
		w, _ = call(h, "GET", "/v1/models", "")
		assert.Equal(t, "mock-large", gjson.Get(w.Body.String(), "data.0.id").String())
		w, _ = call(h, "POST", "/v1/chat/completions", `{"model":"x"}`)
		assert.Equal(t, http.StatusBadRequest, w.Code, "no messages: the upstream refuses it as OpenAI does")
		assert.Equal(t, "invalid_request_error", gjson.Get(w.Body.String(), "error.type").String())
		w, _ = call(h, "POST", "/v1/chat/completions", strings.Repeat("x", MaxBodyBytes+1))
		assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	})
}
