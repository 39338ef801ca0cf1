package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tokens is the answer every fake upstream below gives, uninterrupted: 60
// tokens, one a chunk.
var tokens = func() []string {
	t := make([]string, 60)
	for i := range t {
		t[i] = fmt.Sprintf("t%02d ", i)
	}
	return t
}()

// sseUpstream is an OpenAI-compatible upstream that streams tokens. With
// a fault it breaks after 40 of them: "cut" drops the connection, "stall"
// goes silent, "garbage" sends an event that is not JSON. Sent an assistant
// prefill as the last message, it streams the rest of the answer — or,
// with refusePrefill, answers 400 as an upstream that does not continue
// prefills does.
func sseUpstream(t *testing.T, name, fault string, refusePrefill bool) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	prefills := []string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Role, Content string }
		}
		if !assert.NoError(t, json.NewDecoder(r.Body).Decode(&req)) {
			return
		}
		last := req.Messages[len(req.Messages)-1]
		prefill := ""
		if last.Role == "assistant" {
			prefill = last.Content
		}
		mu.Lock()
		prefills = append(prefills, prefill)
		mu.Unlock()
		if prefill != "" && refusePrefill {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"the last message must be a user's","type":"invalid_request_error","code":"invalid_prefill"}}`)
			return
		}
		rest := tokens
		if prefill != "" {
			n := strings.Count(prefill, " ")
			require.Equal(t, strings.Join(tokens[:n], ""), prefill, "%s was sent a prefill that is how the answer starts", name)
			rest = tokens[n:]
		}
		w.Header().Set("Content-Type", "text/event-stream")
		flush := w.(http.Flusher).Flush
		send := func(data string) {
			_, _ = fmt.Fprintf(w, "data: %s\n\n", data)
			flush()
		}
		send(`{"id":"c","object":"chat.completion.chunk","model":"` + name + `-1","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`)
		for i, tok := range rest {
			if i == 40 && prefill == "" {
				switch fault {
				case "cut":
					panic(http.ErrAbortHandler) // the connection drops mid-answer
				case "stall":
					<-r.Context().Done()
					return
				case "garbage":
					send(`{"choices":[{"delta":{"content":`)
				}
			}
			send(`{"id":"c","object":"chat.completion.chunk","model":"` + name + `-1","choices":[{"index":0,"delta":{"content":"` + tok + `"}}]}`)
		}
		send(`{"id":"c","object":"chat.completion.chunk","model":"` + name + `-1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
		send(`[DONE]`)
	}))
	t.Cleanup(srv.Close)
	return srv, &prefills
}

// streamText posts a streamed chat request and returns the text the
// caller read, whether the stream ended with [DONE], and any error event.
func streamText(t *testing.T, url string, header http.Header) (text string, done bool, errEvent string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"chat","stream":true,"messages":[{"role":"user","content":"count"}]}`))
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var b strings.Builder
	for event, err := range chatapi.Events(resp.Body) {
		require.NoError(t, err)
		data := string(event)
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string }
			}
			Error *struct{ Message, Code string }
		}
		require.NoError(t, json.Unmarshal([]byte(data), &chunk), "the caller is sent only JSON: %s", data)
		if chunk.Error != nil {
			errEvent = chunk.Error.Message
			continue
		}
		for _, c := range chunk.Choices {
			b.WriteString(c.Delta.Content)
		}
	}
	return b.String(), done, errEvent
}

func startContinuing(t *testing.T, primary, fallback *httptest.Server) *instance {
	t.Helper()
	file := t.TempDir() + "/routes.json"
	require.NoError(t, os.WriteFile(file, []byte(`{"routes":[{"model":"chat","targets":[{"provider":"primary"},{"provider":"fallback","continue":true}]}]}`), 0o644))
	return start(t, "-readiness-delay=0", "-stream-idle-timeout=300ms", "-routes", file,
		"-upstream", "name=primary,url="+primary.URL+"/v1,model=primary-1",
		"-upstream", "name=fallback,url="+fallback.URL+"/v1,model=fallback-1")
}

func TestABrokenStreamEndsWithTheWholeAnswerFromAFallbackThatContinues(t *testing.T) {
	whole := strings.Join(tokens, "")
	for _, fault := range []string{"cut", "stall", "garbage"} {
		t.Run(fault, func(t *testing.T) {
			primary, _ := sseUpstream(t, "primary", fault, false)
			fallback, prefills := sseUpstream(t, "fallback", "", false)
			a := startContinuing(t, primary, fallback)
			text, done, errEvent := streamText(t, a.url, nil)
			assert.Empty(t, errEvent)
			assert.True(t, done, "the answer is whole, and says so")
			assert.Equal(t, whole, text, "the text is identical to an uninterrupted answer")
			assert.Equal(t, []string{strings.Join(tokens[:40], "")}, *prefills, "the fallback was asked once, to continue the 40 tokens sent")
			assert.Contains(t, metrics(t, a.url), `gateway_stream_continuations_total{model="primary-1",outcome="completed",provider="primary"} 1`)
		})
	}
}

func TestAFallbackThatRefusesThePrefillEndsTheStreamWithTheRealFailure(t *testing.T) {
	primary, _ := sseUpstream(t, "primary", "cut", false)
	fallback, prefills := sseUpstream(t, "fallback", "", true)
	a := startContinuing(t, primary, fallback)
	text, done, errEvent := streamText(t, a.url, nil)
	assert.Equal(t, strings.Join(tokens[:40], ""), text)
	assert.False(t, done, "no [DONE] after a cut answer")
	require.NotEmpty(t, errEvent, "the stream ends with an error event")
	assert.NotContains(t, errEvent, "the last message must be a user's", "never the prefill's 400 as the final error")
	assert.Len(t, *prefills, 1)
	assert.Contains(t, metrics(t, a.url), `gateway_stream_continuations_total{model="primary-1",outcome="failed",provider="primary"} 1`)
}

func TestACallerCanOptOutOfContinuation(t *testing.T) {
	primary, _ := sseUpstream(t, "primary", "cut", false)
	fallback, prefills := sseUpstream(t, "fallback", "", false)
	a := startContinuing(t, primary, fallback)
	_, done, errEvent := streamText(t, a.url, http.Header{"X-Gateway-Continuation": {"off"}})
	assert.False(t, done)
	assert.NotEmpty(t, errEvent)
	assert.Empty(t, *prefills, "asked not to, the gateway does not continue")

	code, body := postWith(t, a.url+"/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"x"}]}`,
		http.Header{"X-Gateway-Continuation": {"maybe"}})
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, "X-Gateway-Continuation")
}

func postWith(t *testing.T, url, body string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header = header
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAnUpstreamBackFromAnOutageIsProbedBackIntoService(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	probed := make(chan bool, 1000) // each probe, and whether it found the primary up
	primary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		isProbe := r.Method == http.MethodGet && r.URL.Path == "/v1/models"
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"down","type":"server_error"}}`)
		} else if isProbe {
			_, _ = io.WriteString(w, `{"object":"list","data":[]}`)
		} else {
			_, _ = io.WriteString(w, `{"model":"primary-1","choices":[{"index":0,"message":{"role":"assistant","content":"from primary"},"finish_reason":"stop"}]}`)
		}
		if isProbe {
			probed <- !down.Load()
		}
	}))
	defer primary.Close()
	fallback := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"model":"fallback-1","choices":[{"index":0,"message":{"role":"assistant","content":"from fallback"},"finish_reason":"stop"}]}`)
	}))
	defer fallback.Close()
	a := start(t, "-readiness-delay=0", "-rate=1000", "-burst=1000", "-failure-threshold=1", "-recovery-timeout=1h", "-probe-interval=20ms", "-probe-max-interval=50ms",
		"-upstream", "name=primary,url="+primary.URL+"/v1,model=primary-1,probe=models",
		"-upstream", "name=fallback,url="+fallback.URL+"/v1,model=fallback-1",
		"-route", "chat=primary,fallback")
	ask := func() string {
		code, body := post(t, a.url+"/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, code, body)
		return body
	}
	nextProbe := func() bool {
		t.Helper()
		select {
		case up := <-probed:
			return up
		case <-time.After(10 * time.Second): // a watchdog: probes come every 50 ms at most
			require.FailNow(t, "the open breaker's upstream is not probed in the background")
			return false
		}
	}
	assert.Contains(t, ask(), "from fallback", "the primary is down: its breaker opens, the fallback answers")
	assert.Contains(t, ask(), "from fallback")
	assert.False(t, nextProbe(), "probed while down")
	down.Store(false)
	for !nextProbe() { // a probe that started before the primary came back
	}
	// The probe that found it up closes the breaker as soon as its answer
	// is read; ask until the router has seen it (each ask is a real request:
	// no sleeps, and a bound).
	back := false
	for range 200 {
		if strings.Contains(ask(), "from primary") {
			back = true
			break
		}
	}
	require.True(t, back, "traffic is back on the primary")
	page := metrics(t, a.url)
	assert.Contains(t, page, `gateway_health_probes_total{model="primary-1",outcome="ok",provider="primary"} 1`, "a probe found the primary back")
	assert.Contains(t, page, `gateway_breaker_state{model="primary-1",provider="primary"} 0`, "and closed its breaker, an hour before its recovery timeout")
}
