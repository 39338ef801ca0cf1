package openaicompat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/egress"
	"github.com/production-go/gateway-lab/gateway/llm"
	timeouts "github.com/production-go/gateway-lab/solutions/03-timeouts"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// Each test runs a scripted upstream on loopback (httptest) and checks how
// the provider classifies what it gets back. No test waits on a clock.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var (
	req       = llm.Request{Chat: chatapi.NewRequest("hello", false)}
	streamReq = llm.Request{Chat: chatapi.NewRequest("hello", true)}
)

func upstream(t *testing.T, h http.HandlerFunc) *Provider {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	p, err := New(Config{Name: "up", BaseURL: srv.URL + "/v1", Model: "small-1", APIKey: "sk-secret-123"})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func TestGenerateSendsTheRequestAndReadsTheAnswer(t *testing.T) {
	p := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/v1/chat/completions", r.URL.Path)
		assert.Equal(t, "Bearer sk-secret-123", r.Header.Get("Authorization"))
		b, _ := io.ReadAll(r.Body)
		assert.JSONEq(t, `{"model":"small-1","messages":[{"role":"user","content":"hello"}]}`, string(b))
		_, _ = io.WriteString(w, `{"model":"small-1-2026","choices":[{"message":{"role":"assistant","content":"hi there"}}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`)
	})
	c, err := p.Generate(t.Context(), req)
	require.NoError(t, err)
	a, ok, err := chatapi.ReadAnswer("up", c.Raw)
	require.True(t, ok)
	require.NoError(t, err)
	assert.Equal(t, "hi there", a.Text, "the answer is the upstream's own bytes")
	assert.Equal(t, "small-1-2026", c.Model, "the model that actually answered is passed on")
	assert.Equal(t, &llm.Usage{PromptTokens: 9, CompletionTokens: 2, TotalTokens: 11}, c.Usage, "and so is the usage it billed")
}

func TestRateLimitCarriesRetryAfter(t *testing.T) {
	p := upstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"slow down","type":"rate_limit","code":"rate_limited"}}`)
	})
	_, err := p.Generate(t.Context(), req)
	var se *chatapi.UpstreamError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusTooManyRequests, se.Status)
	assert.Equal(t, 2*time.Second, se.RetryAfter())
	assert.Equal(t, llm.ReasonRateLimited, llm.ReasonOf(err))
	var ra timeouts.RetryAfterer
	assert.True(t, errors.As(err, &ra), "the retry loop must see the Retry-After")
	assertRetryable(t, err)
}

func TestParseRetryAfterSecondsAndHTTPDate(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	assert.Equal(t, 7*time.Second, chatapi.ParseRetryAfter("7", now))
	assert.Equal(t, 90*time.Second, chatapi.ParseRetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now))
	assert.Zero(t, chatapi.ParseRetryAfter(now.Add(-time.Minute).Format(http.TimeFormat), now), "a date in the past means now")
	assert.Zero(t, chatapi.ParseRetryAfter("soon", now))
	assert.Zero(t, chatapi.ParseRetryAfter("-3", now))
}

// assertRetryable checks the retry loop would try err again: with a tiny
// budget, a retryable error either gets its second attempt or runs out of
// budget waiting for its Retry-After; a permanent one stops after one.
func assertRetryable(t *testing.T, err error) {
	t.Helper()
	n, res := timeouts.Do(context.Background(), timeouts.Policy{MaxAttempts: 2, TotalTimeout: 50 * time.Millisecond},
		func(context.Context, int) error { return err })
	assert.True(t, n == 2 || errors.Is(res, context.DeadlineExceeded), "%v should be retryable (attempts %d, %v)", err, n, res)
}

func TestServerErrorsAreRetryable(t *testing.T) {
	p := upstream(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) })
	_, err := p.Generate(t.Context(), req)
	var se *chatapi.UpstreamError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusBadGateway, se.Status)
	assertRetryable(t, err)
	assert.Equal(t, llm.ReasonServer, llm.ReasonOf(err))
}

func TestBadRequestCarriesTheUpstreamsTypeCodeAndMessage(t *testing.T) {
	p := upstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"This model's maximum context length is 8192 tokens","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`)
	})
	_, err := p.Generate(t.Context(), req)
	var se *chatapi.UpstreamError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusBadRequest, se.Status)
	assert.Equal(t, "context_length_exceeded", se.Code)
	assert.Equal(t, "invalid_request_error", se.Type)
	assert.Equal(t, "messages", se.Param)
	assert.Equal(t, "This model's maximum context length is 8192 tokens", se.Message, "the reason is kept for the caller")
	assert.NotContains(t, err.Error(), "maximum context length", "but not in Error(), which is what gets logged: it may quote the prompt")
	assert.Equal(t, llm.ReasonClient, llm.ReasonOf(err), "the gateway, not the provider, decides a 4xx is not retried")
	assert.NotContains(t, err.Error(), "sk-secret-123", "the API key never appears in an error")
}

func TestARefusalThatQuotesTheGatewaysKeyReachesNoOneWithIt(t *testing.T) {
	const escaped = `\u0073k-secret\u002d123` // sk-secret-123, as JSON may spell it
	for _, tc := range []struct {
		name   string
		status int
		body   string
		stream bool
	}{
		{"a 400", http.StatusBadRequest, `{"error":{"message":"bad request for key sk-secret-123 (` + escaped + `)","type":"invalid_request_error","code":"k_` + escaped + `"}}`, false},
		{"an error object in a 200", http.StatusOK, `{"error":{"message":"key ` + escaped + `","code":"k_sk-secret-123"}}`, false},
		{"a key cut in two by the size limit", http.StatusNotFound, `{"error":{"message":"` + strings.Repeat("x", chatapi.MaxMessageBytes-18) + `Bearer sk-secret-123"}}`, false},
		{"an error event in a stream", http.StatusOK, "data: {\"error\":{\"message\":\"key " + escaped + "\",\"code\":\"k_sk-secret-123\"}}\n\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := upstream(t, func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			var err error
			if tc.stream {
				_, err = p.Stream(t.Context(), streamReq, func(llm.Chunk) error { return nil })
			} else {
				_, err = p.Generate(t.Context(), req)
			}
			var se *chatapi.UpstreamError
			require.ErrorAs(t, err, &se)
			assert.NotContains(t, se.Message+se.Code+se.Type+se.Param+err.Error(), "sk-secret-123", "the key is in no field the caller or the log reads")
			assert.NotContains(t, se.Message, "sk-se", "nor any start of it")
			assert.Contains(t, se.Message, "[the gateway's key]", "the rest of the refusal is kept")
			assert.Equal(t, tc.status == http.StatusOK, se.InBody, "an error in a 200 is marked: the upstream had the request")
		})
	}
}

func TestUpstreamErrorTextIsBounded(t *testing.T) {
	p := upstream(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		echo := strings.Repeat("my secret prompt ", 100) // an upstream that quotes the request in its code
		_, _ = io.WriteString(w, `{"error":{"message":"`+strings.Repeat("é", 4000)+`","code":"`+echo+`","type":"`+echo+`","param":"`+echo+`"}}`)
	})
	_, err := p.Generate(t.Context(), req)
	var se *chatapi.UpstreamError
	require.ErrorAs(t, err, &se)
	assert.LessOrEqual(t, len(se.Message), chatapi.MaxMessageBytes+len("…"))
	assert.True(t, utf8.ValidString(se.Message), "cut at a character boundary")
	for _, f := range []string{se.Code, se.Type, se.Param} {
		assert.LessOrEqual(t, len(f), chatapi.MaxCodeBytes+len("…"), "an identifier is short: a logged code cannot carry a prompt")
	}
}

func sse(w http.ResponseWriter, lines ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, l := range lines {
		_, _ = fmt.Fprintf(w, "%s\n\n", l)
		w.(http.Flusher).Flush()
	}
}

func collect(t *testing.T, p *Provider) ([]string, llm.Completion, error) {
	t.Helper()
	var chunks []string
	c, err := p.Stream(t.Context(), streamReq, func(c llm.Chunk) error {
		a, ok, err := chatapi.ReadAnswer("up", c.Raw)
		require.True(t, ok, "only whole JSON objects are relayed")
		require.NoError(t, err)
		if a.Text != "" {
			chunks = append(chunks, a.Text)
		}
		return nil
	})
	return chunks, c, err
}

func TestStreamRelaysDeltasUntilDone(t *testing.T) {
	p := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		assert.Contains(t, string(b), `"stream":true`)
		sse(w, `data: {"model":"small-1-2026","choices":[{"delta":{"role":"assistant"}}]}`,
			`data: {"choices":[{"delta":{"content":"Hel"}}]}`, `: keep-alive comment`,
			`data: {"choices":[{"delta":{"content":"lo"}}]}`,
			`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`, `data: [DONE]`)
	})
	chunks, c, err := collect(t, p)
	require.NoError(t, err)
	assert.Equal(t, []string{"Hel", "lo"}, chunks)
	assert.Equal(t, "small-1-2026", c.Model)
	assert.Equal(t, 5, c.Usage.TotalTokens)
}

func TestStreamWithoutDoneIsTruncatedNotWaitedOn(t *testing.T) {
	p := upstream(t, func(w http.ResponseWriter, _ *http.Request) {
		sse(w, `data: {"choices":[{"delta":{"content":"partial"}}]}`) // then the handler returns: a clean HTTP end
	})
	chunks, _, err := collect(t, p)
	assert.ErrorIs(t, err, ErrTruncated, "a clean HTTP end before any finish_reason is a cut stream, reported at once")
	assert.Equal(t, []string{"partial"}, chunks)
}

func TestMalformedChunkIsACleanErrorNotGarbage(t *testing.T) {
	p := upstream(t, func(w http.ResponseWriter, _ *http.Request) {
		sse(w, `data: {"choices":[{"delta":{"content":"ok"}}]}`, `data: {"choices":[{"delta":{"content":`, `data: [DONE]`)
	})
	chunks, _, err := collect(t, p)
	assert.ErrorIs(t, err, ErrMalformed)
	assert.Equal(t, []string{"ok"}, chunks, "nothing of the malformed chunk is passed on")
}

func TestRedirectsAreNotFollowed(t *testing.T) {
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		t.Error("the redirect was followed to another host")
	}))
	t.Cleanup(elsewhere.Close)
	target := strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1) + "/steal"
	p := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			http.Redirect(w, r, target, http.StatusTemporaryRedirect)
			return
		}
		t.Error("the redirect was followed on the same host")
	})
	_, err := p.Generate(t.Context(), req)
	assert.ErrorContains(t, err, "refusing redirect")
	same := upstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			http.Redirect(w, r, "/v1/other", http.StatusTemporaryRedirect)
			return
		}
		t.Error("the redirect was followed on the same host")
	})
	_, err = same.Generate(t.Context(), req)
	assert.ErrorContains(t, err, "refusing redirect", "an API endpoint has no business redirecting a POST, even on its own host")
}

func TestDialControlRefusesAnUpstreamThatResolvesToLoopback(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("the guarded provider reached a loopback upstream")
	}))
	t.Cleanup(srv.Close)
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/v1"
	p, err := New(Config{Name: "up", BaseURL: url, Model: "m", DialControl: egress.Control})
	require.NoError(t, err)
	t.Cleanup(p.Close)
	_, err = p.Generate(t.Context(), req)
	assert.ErrorIs(t, err, egress.ErrForbidden, "checked after DNS: an allowed name that resolves to 127.0.0.1 is refused")
	assert.Equal(t, llm.ReasonConnection, llm.ReasonOf(err))
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no name", Config{Name: "", BaseURL: "https://x/v1", Model: "m"}},
		{"a URL that is not http or https", Config{Name: "a", BaseURL: "ftp://x/v1", Model: "m"}},
		{"credentials in the URL", Config{Name: "a", BaseURL: "https://user:pw@x/v1", Model: "m"}},
		{"no model", Config{Name: "a", BaseURL: "https://x/v1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			_, err := New(c)
			assert.ErrorIs(t, err, ErrInvalidConfig, "%+v", c)
		})
	}
}

func TestParseSpecReadsTheKeyFromTheEnvironment(t *testing.T) {
	env := map[string]string{"UP_KEY": "sk-from-env"}
	cfg, err := ParseSpec("name=up,url=https://up.example/v1,model=m1,key-env=UP_KEY,header-timeout=5s", func(k string) string { return env[k] })
	require.NoError(t, err)
	assert.Equal(t, Config{Name: "up", BaseURL: "https://up.example/v1", Model: "m1", APIKey: "sk-from-env", ResponseHeaderTimeout: 5 * time.Second}, cfg)
	_, err = ParseSpec("name=up,url=https://up.example/v1,model=m1,key-env=MISSING", func(string) string { return "" })
	assert.ErrorIs(t, err, ErrInvalidConfig, "a named but empty key variable is an error at start, not a 401 later")
	_, err = ParseSpec("name=up,key=sk-literal", func(string) string { return "" })
	assert.ErrorIs(t, err, ErrInvalidConfig, "keys are never accepted on the command line")
	cfg, err = ParseSpec("name=up,url=https://up.example/v1,stream-usage=false", func(string) string { return "" })
	require.NoError(t, err)
	assert.True(t, cfg.NoStreamUsage, "an upstream that refuses stream_options is told apart")
}

func TestAStreamAsksForItsUsageAndPassesItOnOnlyIfTheCallerDid(t *testing.T) {
	usageChunk := `data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`
	for _, tc := range []struct {
		name        string
		callerAsked bool
		noUsage     bool
		wantAsked   bool
		wantRelayed int
	}{
		{"the caller did not ask", false, false, true, 1},
		{"the caller asked", true, false, true, 2},
		{"an upstream configured not to be asked", false, true, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent []byte
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				sent, _ = io.ReadAll(r.Body)
				sse(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`, usageChunk, "data: [DONE]")
			}))
			t.Cleanup(srv.Close)
			p, err := New(Config{Name: "up", BaseURL: srv.URL + "/v1", Model: "small-1", NoStreamUsage: tc.noUsage})
			require.NoError(t, err)
			t.Cleanup(p.Close)
			body := `{"stream":true,"messages":[{"role":"user","content":"hello"}]}`
			if tc.callerAsked {
				body = `{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello"}]}`
			}
			chat, err := chatapi.Parse([]byte(body))
			require.NoError(t, err)
			var relayed int
			c, err := p.Stream(t.Context(), llm.Request{Chat: chat}, func(llm.Chunk) error { relayed++; return nil })
			require.NoError(t, err)
			asked, _ := chatapi.Parse(sent)
			assert.Equal(t, tc.wantAsked, asked.IncludeUsage, "what the upstream was sent: %s", sent)
			assert.Equal(t, tc.wantRelayed, relayed, "the usage chunk reaches the caller only if the caller asked for it (or the gateway did not)")
			assert.Equal(t, &llm.Usage{PromptTokens: 9, CompletionTokens: 2, TotalTokens: 11}, c.Usage, "the gateway counts it either way")
		})
	}
}

func TestOnTimingIsToldEachCallsConnectAndHeaderTimes(t *testing.T) {
	answer := func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"model":"m","choices":[{"message":{"role":"assistant","content":"hi"}}]}`)
	}
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(answer))
			if scheme == "https" {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			t.Cleanup(srv.Close)
			var mu sync.Mutex
			var got []Timing
			p, err := New(Config{Name: "up", BaseURL: srv.URL + "/v1", Model: "m", OnTiming: func(tm Timing) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, tm)
			}})
			require.NoError(t, err)
			t.Cleanup(p.Close)
			if scheme == "https" {
				p.rt.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
			}
			assert.Equal(t, scheme == "https", p.tls)
			for range 2 {
				_, err := p.Generate(t.Context(), req)
				require.NoError(t, err)
			}
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, got, 2, "once per call")
			assert.Equal(t, "up", got[0].Provider)
			assert.Positive(t, got[0].Connect, "the first call dialled (and, over https, shook hands)")
			assert.Zero(t, got[1].Connect, "the second reused the pooled connection")
			assert.Positive(t, got[0].Headers)
			assert.Positive(t, got[1].Headers)
		})
	}
}
