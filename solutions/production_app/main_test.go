package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// These tests start the real service on a loopback port with simulated
// providers, and stop it by cancelling its context (what SIGTERM does).
// Every request has a client timeout, and run must return on its own.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type instance struct {
	url            string
	stop           context.CancelFunc
	code           chan int
	stdout, stderr *testkit.LogBuffer
}

func start(t *testing.T, args ...string) *instance {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, stop := context.WithCancel(t.Context())
	a := &instance{url: "http://" + ln.Addr().String(), stop: stop, code: make(chan int, 1), stdout: &testkit.LogBuffer{}, stderr: &testkit.LogBuffer{}}
	go func() { a.code <- run(ctx, args, a.stdout, a.stderr, ln) }()
	t.Cleanup(func() {
		stop()
		select {
		case <-a.code:
		case <-time.After(30 * time.Second): // a watchdog, not a timing assertion
			t.Error("run did not return after its context was cancelled")
		}
	})
	return a
}

var client = &http.Client{Timeout: 20 * time.Second}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant-ID", "test")
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestServesChatCompletionsWithSimulatedProviders(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-provider", "name=alpha,latency=5ms", "-provider", "name=beta,latency=5ms")
	code, body := post(t, a.url+"/v1/chat/completions", `{"model":"auto","messages":[{"role":"user","content":"ping"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	var resp struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &resp))
	assert.Equal(t, "alpha-1", resp.Model)
	assert.Contains(t, a.stdout.String(), "gateway listening on "+a.url)
	assert.Contains(t, a.stdout.String(), "try:  curl", "the startup line says what to run next")
	assert.NotContains(t, a.stderr.String(), "ping", "logs never contain prompts")

	for _, page := range []struct{ name, path string }{
		{"health", "/healthz"}, {"readiness", "/readyz"}, {"metrics", "/metrics"}, {"model list", "/v1/models"},
	} {
		t.Run(page.name, func(t *testing.T) {
			path := page.path
			resp, err := client.Get(a.url + path)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		})
	}
}

func TestSIGTERMDrainsInFlightRequests(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-drain-grace=10s", "-provider", "name=slow,latency=400ms")
	const n = 6
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			codes[i], _ = post(t, a.url+"/v1/generate", `{"prompt":"drain me"}`)
		})
	}
	// Wait until every request is in flight: the gauge says so.
	require.Eventually(t, func() bool {
		resp, err := client.Get(a.url + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "gateway_requests_in_flight 6")
	}, 10*time.Second, 5*time.Millisecond, "the requests never got in flight")
	a.stop() // SIGTERM
	wg.Wait()
	for i, c := range codes {
		assert.Equal(t, http.StatusOK, c, "in-flight request %d must finish during the drain", i)
	}
	assert.Equal(t, 0, <-a.code, "a clean drain exits 0")
	a.code <- 0 // for the cleanup
	assert.Contains(t, a.stdout.String(), "stopped: drained=true cut=0")
}

func TestProxiesToAnOpenAICompatibleUpstream(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "Bearer sk-upstream", r.Header.Get("Authorization"), "the key comes from the environment")
		_, _ = io.WriteString(w, `{"model":"up-model-7","choices":[{"message":{"role":"assistant","content":"from upstream"}}],"usage":{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42}}`)
	}))
	defer up.Close()
	t.Setenv("TEST_UP_KEY", "sk-upstream")
	a := start(t, "-readiness-delay=0", "-upstream", "name=up,url="+up.URL+"/v1,model=up-model,key-env=TEST_UP_KEY")
	code, body := post(t, a.url+"/v1/chat/completions", `{"model":"up","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, "from upstream")
	assert.Contains(t, body, `"model":"up-model-7"`)
	assert.Contains(t, body, `"total_tokens":42`, "the upstream's usage is passed through, not re-estimated")
	assert.NotContains(t, a.stderr.String()+a.stdout.String(), "sk-upstream", "secrets are never logged")
}

func TestRouteTableFromFlagsAndFile(t *testing.T) {
	file := t.TempDir() + "/routes.json"
	require.NoError(t, os.WriteFile(file, []byte(`{"routes":[{"model":"cheap","targets":[{"provider":"beta","model":"beta-mini"}]}]}`), 0o644))
	a := start(t, "-readiness-delay=0", "-provider", "name=alpha,latency=1ms,error-rate=1", "-provider", "name=beta,latency=1ms",
		"-route", "chat=alpha:alpha-large,beta:beta-small", "-routes", file)
	code, body := post(t, a.url+"/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"model":"beta-small"`, "alpha is down: the route's fallback answered with its upstream model")
	code, body = post(t, a.url+"/v1/chat/completions", `{"model":"cheap","messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, code, body)
	assert.Contains(t, body, `"model":"beta-mini"`)

	var out, errOut testkit.LogBuffer
	assert.Equal(t, 2, run(t.Context(), []string{"-route", "chat=gamma"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), `unknown provider "gamma"`)
}

func TestBadFlagsAreClearErrors(t *testing.T) {
	var out, errOut testkit.LogBuffer
	assert.Equal(t, 2, run(t.Context(), []string{"-provider", "name=x,latency=soon"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "latency=soon")
	errOut = testkit.LogBuffer{}
	assert.Equal(t, 2, run(t.Context(), []string{"-max-concurrent", "0"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "invalid config")
	errOut = testkit.LogBuffer{}
	assert.Equal(t, 0, run(t.Context(), []string{"-h"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "GATEWAY_<FLAG>", "-h explains the environment variables")
	errOut = testkit.LogBuffer{}
	assert.Equal(t, 2, run(t.Context(), []string{"-upstream", "name=u,url=http://x/v1,model=m,key-env=NOPE_NOT_SET"}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "NOPE_NOT_SET")
	t.Setenv("GATEWAY_MAX_ATTEMPTS", "lots")
	errOut = testkit.LogBuffer{}
	assert.Equal(t, 2, run(t.Context(), nil, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "GATEWAY_MAX_ATTEMPTS")
}

func TestDrainCutsAreHonestErrors(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-drain-grace=300ms", "-provider", "name=slow,latency=1h")
	type result struct {
		code int
		body string
	}
	plain := make(chan result, 1)
	go func() {
		c, b := post(t, a.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"never answered"}]}`)
		plain <- result{c, b}
	}()
	require.Eventually(t, func() bool { return strings.Contains(metrics(t, a.url), "gateway_requests_in_flight 1") },
		10*time.Second, 5*time.Millisecond)
	a.stop() // SIGTERM; the grace ends with the request still waiting
	r := <-plain
	assert.Equal(t, http.StatusServiceUnavailable, r.code, "a request cut by the drain is told so, never a 200 with an empty body")
	assert.Contains(t, r.body, `"code":"draining"`, "in the OpenAI error shape")
	assert.Equal(t, 0, <-a.code)
	a.code <- 0
	assert.Contains(t, a.stdout.String(), "stopped: drained=false cut=1")
	assert.Contains(t, a.stderr.String(), `"status":503`, "and the request log says 503, not 499")
}

func TestStreamCutByTheDrainSaysShutdown(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-drain-grace=300ms", "-provider", "name=slow,latency=1ms,chunk-delay=1h")
	req, err := http.NewRequest(http.MethodPost, a.url+"/v1/chat/completions",
		strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"two words"}]}`))
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var rest []string
	first := true
	for d, err := range chatapi.Events(resp.Body) {
		require.NoError(t, err)
		if first {
			a.stop() // the first chunk arrived: shut down with the stream open
			first = false
			continue
		}
		rest = append(rest, string(d))
	}
	require.False(t, first, "the first chunk arrives")
	require.NotEmpty(t, rest)
	assert.Contains(t, rest[len(rest)-1], `"code":"draining"`, "the cut stream ends with an error event that says why")
	assert.NotContains(t, rest, "[DONE]")
	assert.Equal(t, 0, <-a.code)
	a.code <- 0
	assert.Contains(t, a.stderr.String(), `"msg":"stream cut after the first byte","outcome":503,"code":"draining"`,
		"logged as a shutdown cut, not as a client that left")
}

func TestSlowBodiesAreCutAtTheBodyTimeout(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-body-timeout=300ms", "-provider", "name=alpha,latency=1ms")
	host := strings.TrimPrefix(a.url, "http://")
	const n = 20
	var wg sync.WaitGroup
	statuses := make([]string, n)
	for i := range n {
		wg.Go(func() {
			conn, err := net.Dial("tcp", host)
			if !assert.NoError(t, err) {
				return
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // a watchdog, not a timing assertion
			// A tenant each: one tenant's slow uploads count against its
			// in-flight cap like any request of its (-max-per-tenant).
			_, _ = fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: slow-%d\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", i)
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if assert.NoError(t, err, "the server answers instead of holding the connection") {
				statuses[i] = strings.TrimSpace(line)
			}
			_, err = io.Copy(io.Discard, br)
			assert.NoError(t, err, "and then closes it, rather than waiting for the rest of the body")
		})
	}
	wg.Wait()
	for i, s := range statuses {
		assert.Equal(t, "HTTP/1.1 408 Request Timeout", s, "connection %d", i)
	}
}

func metrics(t *testing.T, url string) string {
	t.Helper()
	resp, err := client.Get(url + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestRouteOverTwoModelsOfOneUpstreamFailsOver(t *testing.T) {
	var bigCalls, smallCalls sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req struct{ Model string }
		_ = json.Unmarshal(b, &req)
		if req.Model == "big" {
			bigCalls.Store(len(b), true)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"message":"big is overloaded","type":"server_error","code":"overloaded"}}`)
			return
		}
		smallCalls.Store(len(b), true)
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","model":"`+req.Model+`","choices":[{"index":0,"message":{"role":"assistant","content":"from small"},"finish_reason":"stop"}]}`)
	}))
	defer up.Close()
	a := start(t, "-readiness-delay=0", "-failure-threshold=2", "-upstream", "name=up,url="+up.URL+"/v1,model=small",
		"-route", "chat=up:big,up:small")
	for i := range 4 {
		code, body := post(t, a.url+"/v1/chat/completions", `{"model":"chat","messages":[{"role":"user","content":"hi"}]}`)
		require.Equal(t, http.StatusOK, code, body)
		assert.Contains(t, body, `"model":"small"`, "request %d: big is down, the route's next target on the same upstream answers", i)
	}
	page := metrics(t, a.url)
	assert.Contains(t, page, `gateway_breaker_state{model="big",provider="up"} 2`, "big's breaker is open")
	assert.Contains(t, page, `gateway_breaker_state{model="small",provider="up"} 0`, "small's is not: health is per model")
	code, body := post(t, a.url+"/v1/chat/completions", `{"model":"up","messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusOK, code, "the provider pinned by name (its default model, small) still answers: %s", body)
}

// A request refused before its body is read — a bad tenant, no such path, a
// wrong method, a declared size over the limit — gets its answer at once
// and its connection closed: nothing waits for the rest of a body nobody
// will read.
func TestRefusalsDoNotWaitForTheBody(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-body-timeout=30s", "-max-body-bytes=50000", "-provider", "name=alpha,latency=1ms")
	host := strings.TrimPrefix(a.url, "http://")
	for _, c := range []struct {
		name, head string
		status     string
	}{
		{"bad tenant", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Tenant-ID: " + strings.Repeat("t", 65) + "\r\nContent-Length: 40000\r\n\r\n{", "400"},
		{"no such path", "POST /v1/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: 40000\r\n\r\n{", "404"},
		{"wrong method", "PUT /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40000\r\n\r\n{", "405"},
		{"declared too big", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n{", "413"},
		{"compressed", "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nContent-Length: 40000\r\n\r\n{", "415"},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", host)
			require.NoError(t, err)
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second)) // a watchdog, not a timing assertion
			_, err = io.WriteString(conn, c.head)
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err, "answered without waiting for the body")
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, c.status, strconv.Itoa(resp.StatusCode), "%s", body)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), "in the OpenAI error shape: %s", body)
			_, err = conn.Read(make([]byte, 1))
			assert.ErrorIs(t, err, io.EOF, "and the connection is closed, not held for the rest of the body")
		})
	}
}
