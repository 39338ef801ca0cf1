package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/providers/openaicompat"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/internal/testkit"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests put a real OpenAI-compatible provider between the gateway and
// a recording upstream on loopback, and check that what the caller sent is
// what the upstream got, and what the upstream answered is what the caller
// got — byte for byte, except the model the route chose. The corpus of
// real-shaped requests and answers is in ../chatapi/testdata.

const corpus = "../chatapi/testdata"

// recording is a scripted upstream that keeps every body it was sent.
type recording struct {
	mu     sync.Mutex
	bodies [][]byte
	answer func(w http.ResponseWriter, body []byte)
}

func (u *recording) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	u.mu.Lock()
	u.bodies = append(u.bodies, b)
	u.mu.Unlock()
	u.answer(w, b)
}

func (u *recording) last(t *testing.T) []byte {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	require.NotEmpty(t, u.bodies, "the upstream was never called")
	return u.bodies[len(u.bodies)-1]
}

type passRig struct {
	srv *Server
	up  *recording
	log *testkit.LogBuffer
}

// newPassRig serves the public model "gpt-4o-corpus" from upstream model
// "up-model-1" of one OpenAI-compatible provider.
func newPassRig(t *testing.T, answer func(w http.ResponseWriter, body []byte)) *passRig {
	t.Helper()
	up := &recording{answer: answer}
	hs := httptest.NewServer(up)
	t.Cleanup(hs.Close)
	p, err := openaicompat.New(openaicompat.Config{Name: "up", BaseURL: hs.URL + "/v1", Model: "up-default"})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	cfg := baseConfig()
	cfg.Retry.MaxAttempts = 1
	cfg.Routes = []router.Route{{Name: "gpt-4o-corpus", Targets: []router.Target{{Provider: "up", Model: "up-model-1"}}}}
	gw, err := router.New(cfg, p)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gw.Close(context.Background()) })
	log := &testkit.LogBuffer{}
	srv := New(Options{Router: gw, Drainer: drain.New(), Logger: slog.New(slog.NewJSONHandler(log, nil)),
		Stream: router.StreamLimits{FirstToken: 5 * time.Second, Idle: 5 * time.Second}})
	return &passRig{srv: srv, up: up, log: log}
}

func (r *passRig) post(body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	r.srv.ServeHTTP(rec, req)
	return rec
}

func readCorpus(t *testing.T, pattern string) map[string][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(corpus, pattern))
	require.NoError(t, err)
	require.NotEmpty(t, files, pattern)
	out := map[string][]byte{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		out[filepath.Base(f)] = b
	}
	return out
}

// writeSSE answers with a recorded stream, flushing after each event.
func writeSSE(w http.ResponseWriter, stream []byte) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, ev := range strings.SplitAfter(string(stream), "\n\n") {
		_, _ = io.WriteString(w, ev)
		w.(http.Flusher).Flush()
	}
}

// dataEvents is the data of every event in an SSE body, in order.
func dataEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	for d, err := range chatapi.Events(bytes.NewReader(body)) {
		require.NoError(t, err)
		out = append(out, string(d))
	}
	return out
}

func TestCallersRequestReachesTheUpstreamByteForByte(t *testing.T) {
	streams := readCorpus(t, "streams/plain-with-comment.sse")
	answer := readCorpus(t, "answers/tool-calls.json")["tool-calls.json"]
	r := newPassRig(t, func(w http.ResponseWriter, body []byte) {
		if bytes.Contains(body, []byte(`"stream":true`)) {
			writeSSE(w, streams["plain-with-comment.sse"])
			return
		}
		_, _ = w.Write(answer)
	})
	for name, body := range readCorpus(t, "requests/*.json") {
		t.Run(name, func(t *testing.T) {
			rec := r.post(body)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			got := r.up.last(t)
			back := bytes.Replace(got, []byte(`"up-model-1"`), []byte(`"gpt-4o-corpus"`), 1)
			// A stream asks for its usage, so that what it used can be
			// counted; the caller who did not ask never sees it.
			back = bytes.Replace(back, []byte(`{"stream_options":{"include_usage":true},`), []byte(`{`), 1)
			back = bytes.Replace(back, []byte(`"stream_options":{"include_usage":true,`), []byte(`"stream_options":{`), 1)
			assert.Equal(t, string(body), string(back),
				"the upstream gets the caller's request as sent — every message, part and parameter, known or not — with only the model rewritten, and a stream's usage asked for")
		})
	}
}

func TestUpstreamsAnswerReachesTheCallerByteForByte(t *testing.T) {
	request := readCorpus(t, "requests/tools-round-trip.json")["tools-round-trip.json"]
	for name, answer := range readCorpus(t, "answers/*.json") {
		t.Run(name, func(t *testing.T) {
			r := newPassRig(t, func(w http.ResponseWriter, _ []byte) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write(answer)
			})
			rec := r.post(request)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			assert.Equal(t, string(answer), rec.Body.String(),
				"tool calls, finish_reason, logprobs, system_fingerprint, usage details and unknown fields come back as the upstream sent them")
			assert.Equal(t, "application/json", rec.Header().Get("Content-Type"))
		})
	}
}

func TestUpstreamsStreamReachesTheCallerEventForEvent(t *testing.T) {
	request := readCorpus(t, "requests/stream-tools-usage.json")["stream-tools-usage.json"]
	for name, stream := range readCorpus(t, "streams/*.sse") {
		t.Run(name, func(t *testing.T) {
			r := newPassRig(t, func(w http.ResponseWriter, _ []byte) { writeSSE(w, stream) })
			rec := r.post(request)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			assert.Equal(t, "text/event-stream", rec.Header().Get("Content-Type"))
			assert.Equal(t, dataEvents(t, stream), dataEvents(t, rec.Body.Bytes()),
				"every chunk's data as the upstream sent it, in order, ending with [DONE]")
		})
	}
}

func TestStreamThatFinishedButNeverSaidDoneIsComplete(t *testing.T) {
	stream := readCorpus(t, "streams/plain-with-comment.sse")["plain-with-comment.sse"]
	cut := bytes.TrimSuffix(stream, []byte("data: [DONE]\n\n"))
	require.NotEqual(t, stream, cut)
	r := newPassRig(t, func(w http.ResponseWriter, _ []byte) { writeSSE(w, cut) })
	rec := r.post([]byte(`{"model":"gpt-4o-corpus","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	events := dataEvents(t, rec.Body.Bytes())
	require.NotEmpty(t, events)
	assert.Equal(t, "[DONE]", events[len(events)-1], "a finish_reason then a clean close is a whole answer: the caller gets [DONE]")
	assert.NotContains(t, rec.Body.String(), `"error"`)
}

func TestStreamCutBeforeItFinishedEndsWithAnErrorEvent(t *testing.T) {
	stream := readCorpus(t, "streams/plain-with-comment.sse")["plain-with-comment.sse"]
	i := bytes.Index(stream, []byte(`"finish_reason":"stop"`))
	cut := stream[:bytes.LastIndex(stream[:i], []byte("data: "))]
	r := newPassRig(t, func(w http.ResponseWriter, _ []byte) { writeSSE(w, cut) })
	rec := r.post([]byte(`{"model":"gpt-4o-corpus","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	events := dataEvents(t, rec.Body.Bytes())
	require.NotEmpty(t, events)
	assert.NotContains(t, events, "[DONE]", "a stream cut before its finish_reason must not look complete")
	assert.Contains(t, events[len(events)-1], `"error"`, "it ends with an error event")
}

func TestUpstreamRefusalKeepsItsStatusTypeAndCode(t *testing.T) {
	const secretish = "your prompt mentions PROJECT-ZEBRA"
	r := newPassRig(t, func(w http.ResponseWriter, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"This model's maximum context length is 8192 tokens; `+secretish+`","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`)
	})
	rec := r.post([]byte(`{"model":"gpt-4o-corpus","messages":[{"role":"user","content":"PROJECT-ZEBRA"}]}`))
	require.Equal(t, http.StatusBadRequest, rec.Code, "the upstream's status class is kept: the caller's request was at fault")
	var body struct{ Error errorDetail }
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	assert.Equal(t, "context_length_exceeded", body.Error.code())
	assert.Equal(t, "invalid_request_error", body.Error.Type)
	require.NotNil(t, body.Error.Param)
	assert.Equal(t, "messages", *body.Error.Param)
	assert.Contains(t, body.Error.Message, "maximum context length", "the upstream's reason reaches the caller")
	assert.NotContains(t, body.Error.Message, "openaicompat", "but not the gateway's internal error chain")
	assert.NotContains(t, r.log.String(), "PROJECT-ZEBRA", "the upstream's text may quote the prompt: it is never logged")
	assert.Contains(t, r.log.String(), "context_length_exceeded", "the code is logged")
}

func TestUpstreamRateLimitIs429WithItsRetryAfter(t *testing.T) {
	r := newPassRig(t, func(w http.ResponseWriter, _ []byte) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
	})
	rec := r.post([]byte(`{"model":"gpt-4o-corpus","messages":[{"role":"user","content":"hi"}]}`))
	assert.Equal(t, http.StatusTooManyRequests, rec.Code)
	assert.Equal(t, "7", rec.Header().Get("Retry-After"), "the caller learns when the upstream will take it again")
}

// TestAnUpstreamThatRefusesTheGatewaysKeyIsA502: an upstream 401, 403 or
// 407 is about the gateway's own credentials, and its message may quote
// part of the key. The caller gets a 502 in the gateway's words; the
// operator gets an error-level log line with the status, never the text.
func TestAnUpstreamThatRefusesTheGatewaysKeyIsA502(t *testing.T) {
	const leak = "sk-proj-AbCd****WXYZ"
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			r := newPassRig(t, func(w http.ResponseWriter, _ []byte) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = io.WriteString(w, `{"error":{"message":"Incorrect API key provided: `+leak+`","type":"invalid_request_error","code":"invalid_api_key"}}`)
			})
			rec := r.post([]byte(`{"model":"gpt-4o-corpus","messages":[{"role":"user","content":"hi"}]}`))
			assert.Equal(t, http.StatusBadGateway, rec.Code, "the caller's request was not at fault")
			assert.Equal(t, "upstream_auth_failed", decodeError(t, rec).code())
			assert.NotContains(t, rec.Body.String(), leak, "no part of the gateway's key reaches the caller")
			assert.NotContains(t, r.log.String(), leak, "nor the log")
			assert.Contains(t, r.log.String(), `"level":"ERROR"`, "an operator must fix the key: the log says so loudly")
		})
	}
}
