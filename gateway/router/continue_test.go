package router_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// sixty is what every writer below would say, uninterrupted: 60 words.
var sixty = func() []string {
	w := make([]string, 60)
	for i := range w {
		w[i] = fmt.Sprintf("w%02d ", i)
	}
	return w
}()

// fault is how a writer's stream goes wrong after some words.
type fault int

const (
	whole     fault = iota // no fault
	cut                    // the connection drops
	stall                  // the stream goes silent
	garbage                // an event that is not a chunk
	toolsThen              // a tool call first, then a cut
)

// writer streams sixty, a word a chunk, 10ms apart, and breaks with its
// fault after `after` words. Sent a prefill (the last message, an
// assistant's), it continues: the words after the prefill — with the
// prefill itself repeated first when echo is set, as some servers do.
type writer struct {
	name  string
	fault fault
	after int
	echo  bool
	// refuse: it answers a prefill with a 400, as an upstream that does
	// not accept one does.
	refuse bool
	// overrun: it ignores max_tokens, so its fault can come after the
	// limit's last token and before the finish.
	overrun bool

	mu       sync.Mutex
	prefills []string // what each call was sent as a prefill ("" for none)
	bodies   []string
}

func (w *writer) Name() string         { return w.name }
func (w *writer) HonoursContext() bool { return true }
func (w *writer) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (w *writer) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	msgs := req.Chat.Get("messages").Array()
	prefill := ""
	if last := msgs[len(msgs)-1]; last.Get("role").Str == "assistant" {
		prefill = last.Get("content").Str
	}
	w.mu.Lock()
	w.prefills = append(w.prefills, prefill)
	w.bodies = append(w.bodies, string(req.Chat.Body()))
	w.mu.Unlock()
	if prefill != "" && w.refuse {
		return llm.Completion{}, chatapi.NewUpstreamError(w.name, 400, []byte(`{"error":{"message":"assistant prefill is not supported","code":"invalid_prefill"}}`), 0)
	}
	words := sixty
	if prefill != "" {
		full := strings.Join(sixty, "")
		if !strings.HasPrefix(full, prefill) {
			return llm.Completion{}, fmt.Errorf("%s: the prefill %q is not how the sixty starts", w.name, prefill)
		}
		rest := strings.TrimPrefix(full, prefill)
		words = strings.SplitAfter(rest, " ")
		if words[len(words)-1] == "" {
			words = words[:len(words)-1]
		}
		if w.echo {
			words = append([]string{prefill}, words...)
		}
	}
	finish := "stop"
	if n := req.Chat.MaxTokens; n > 0 && n < len(words) && !w.overrun { // a word a token: it writes no more than it was asked for
		words, finish = words[:n], "length"
	}
	role := "assistant"
	if err := emit(llm.Chunk{Raw: chatapi.NewFrame(w.name).Chunk(chatapi.Delta{Role: role}, "")}); err != nil {
		return llm.Completion{}, err
	}
	for i, word := range words {
		if i == w.after && w.fault != whole {
			switch w.fault {
			case stall:
				<-ctx.Done()
				return llm.Completion{}, ctx.Err()
			case cut, toolsThen:
				return llm.Completion{}, fmt.Errorf("%s: connection reset by peer", w.name)
			case garbage:
				return llm.Completion{}, fmt.Errorf("%s: an event that is not a JSON object: malformed", w.name)
			}
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return llm.Completion{}, ctx.Err()
		}
		c := chatapi.NewFrame(w.name).Chunk(chatapi.Delta{Content: &word}, "")
		if w.fault == toolsThen && i == 0 {
			c = []byte(`{"id":"x","object":"chat.completion.chunk","model":"` + w.name + `","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`)
		}
		if err := emit(llm.Chunk{Raw: c}); err != nil {
			return llm.Completion{}, err
		}
	}
	if err := emit(llm.Chunk{Raw: chatapi.NewFrame(w.name).Chunk(chatapi.Delta{}, finish)}); err != nil {
		return llm.Completion{}, err
	}
	u := chatapi.Usage{PromptTokens: 10, CompletionTokens: len(words), TotalTokens: 10 + len(words)}
	if req.Chat.IncludeUsage {
		if err := emit(llm.Chunk{Raw: chatapi.NewFrame(w.name).UsageChunk(u)}); err != nil {
			return llm.Completion{}, err
		}
	}
	return llm.Completion{Model: w.name, Usage: &u}, nil
}

func (w *writer) calls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.prefills...)
}

// outcomes records Observer.Continued.
type outcomes struct {
	router.NopObserver
	mu  sync.Mutex
	got []string
}

func (o *outcomes) Continued(t router.Target, outcome router.ContinueOutcome) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, t.Provider+":"+string(outcome))
}

func (o *outcomes) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got...)
}

// continuing builds a router over primary and fallbacks with one route,
// "chat", through all of them; continues lists those declared to continue.
func continuing(t *testing.T, obs router.Observer, continues []string, ps ...*writer) *router.Router {
	t.Helper()
	cfg := config()
	cfg.Observer = obs
	rt := router.Route{Name: "chat"}
	var providers []llm.Provider
	for _, p := range ps {
		rt.Targets = append(rt.Targets, router.Target{Provider: p.name})
		providers = append(providers, p)
	}
	for _, c := range continues {
		rt.Continue = append(rt.Continue, router.Target{Provider: c})
	}
	cfg.Routes = []router.Route{rt}
	return newGateway(t, cfg, providers...)
}

var limits = router.StreamLimits{FirstToken: time.Second, Idle: time.Second}

// relay streams "chat" for the prompt and returns the text the caller read.
func relay(t *testing.T, g *router.Router, req router.Request) (string, router.Response, error) {
	t.Helper()
	if req.Chat == nil {
		req.Chat = chatapi.NewRequest("tell me", true)
	}
	req.Tenant = "acme"
	require.True(t, g.Resolve("chat", &req))
	var text strings.Builder
	resp, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
		p, err := chatapi.ReadPiece(c.Raw)
		require.NoError(t, err, "the caller is only ever sent chunks: %q", c.Raw)
		text.WriteString(p.Text)
		return nil
	})
	return text.String(), resp, err
}

func TestABrokenStreamIsFinishedByATargetThatContinues(t *testing.T) {
	whole := strings.Join(sixty, "")
	for _, f := range []fault{cut, stall, garbage} {
		synctest.Test(t, func(t *testing.T) {
			primary := &writer{name: "primary", fault: f, after: 40}
			fallback := &writer{name: "fallback"}
			obs := &outcomes{}
			g := continuing(t, obs, []string{"fallback"}, primary, fallback)
			text, _, err := relay(t, g, router.Request{})
			require.NoError(t, err, "fault %d: the fallback finished the sixty", f)
			assert.Equal(t, whole, text, "fault %d: the caller reads one sixty, as if nothing broke", f)
			assert.Equal(t, []string{strings.Join(sixty[:40], "")}, fallback.calls(), "fault %d: the fallback was sent the text so far as a prefill", f)
			assert.Equal(t, []string{"primary:completed"}, obs.list(), "fault %d", f)
		})
	}
}

func TestAContinuationThatRepeatsThePrefillIsNotReadTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 25}
		fallback := &writer{name: "fallback", echo: true}
		g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
		text, _, err := relay(t, g, router.Request{})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), text)
	})
}

func TestOnlyATargetTheRouteDeclaresIsAskedToContinue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 40}
		plain := &writer{name: "plain"} // not declared: a fresh sixty spliced on would garble it
		cont := &writer{name: "cont"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"cont"}, primary, plain, cont)
		text, _, err := relay(t, g, router.Request{})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), text)
		assert.Empty(t, plain.calls(), "a target the route did not declare is never sent a prefill")
		assert.Len(t, cont.calls(), 1)
	})
}

func TestWithNoTargetThatContinuesTheStreamEndsWithItsOwnFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 40}
		plain := &writer{name: "plain"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"primary"}, primary, plain) // only the broken one declared
		text, _, err := relay(t, g, router.Request{})
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		assert.ErrorContains(t, err, "connection reset")
		assert.Equal(t, strings.Join(sixty[:40], ""), text)
		assert.Empty(t, plain.calls())
		assert.Equal(t, []string{"primary:no_target"}, obs.list())
	})
}

func TestAFallbackThatRefusesThePrefillLeavesTheOriginalFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 40}
		fallback := &writer{name: "fallback", refuse: true}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		_, _, err := relay(t, g, router.Request{})
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		assert.ErrorContains(t, err, "connection reset", "the caller hears what cut its stream")
		assert.NotContains(t, err.Error(), "prefill is not supported", "never the prefill's 400 as the final error")
		var ue *chatapi.UpstreamError
		assert.False(t, errors.As(err, &ue), "the error is not the fallback's refusal: %v", err)
		assert.Equal(t, []string{"primary:failed"}, obs.list())
		state, _ := g.TargetState(router.Target{Provider: "fallback"})
		assert.Equal(t, breaker.Closed, state, "a refused prefill is the request's matter, not the fallback's health")
	})
}

func TestAnAnswerWithToolCallsIsNeverContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: toolsThen, after: 30}
		fallback := &writer{name: "fallback"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		_, _, err := relay(t, g, router.Request{})
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "a tool call continued as prose would be an sixty with no tool call and no error")
		assert.Empty(t, fallback.calls())
		assert.Equal(t, []string{"primary:not_text"}, obs.list())
	})
}

func TestARequestThatOptsOutIsNotContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 40}
		fallback := &writer{name: "fallback"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		_, _, err := relay(t, g, router.Request{NoContinue: true})
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		assert.Empty(t, fallback.calls())
		assert.Equal(t, []string{"primary:opted_out"}, obs.list())
	})
}

func TestARequestEndingWithItsOwnPrefillIsNotContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 40}
		fallback := &writer{name: "fallback"}
		g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
		chat, err := chatapi.Parse([]byte(`{"stream":true,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"w00 "}]}`))
		require.NoError(t, err)
		_, _, err = relay(t, g, router.Request{Chat: chat})
		require.Error(t, err)
		assert.Empty(t, fallback.calls(), "two assistant prefills would contradict each other")
	})
}

func TestTheContinuationIsSentNothingButThePrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 3}
		fallback := &writer{name: "fallback"}
		g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
		chat, err := chatapi.Parse([]byte(`{"stream":true,"temperature":0.2,"messages":[{"role":"system","content":"Réponds en français."},{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		_, _, err = relay(t, g, router.Request{Chat: chat})
		require.NoError(t, err)
		require.Len(t, fallback.bodies, 1)
		assert.JSONEq(t, `{"stream":true,"temperature":0.2,"messages":[{"role":"system","content":"Réponds en français."},{"role":"user","content":"hi"},{"role":"assistant","content":"w00 w01 w02 "}]}`,
			fallback.bodies[0], "no injected system prompt: the caller's messages as sent, then the prefill")
	})
}

func TestABrokenPrimaryStillCountsAgainstItsBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
		for range 2 { // FailureThreshold
			_, _, err := relay(t, g, router.Request{})
			require.NoError(t, err)
		}
		state, _ := g.TargetState(router.Target{Provider: "primary"})
		assert.Equal(t, breaker.Open, state, "the caller got its sixty, but the primary broke twice")
	})
}

func TestACallerWhoAskedForUsageIsToldItOnceAfterAContinuation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 40}
		fallback := &writer{name: "fallback"}
		g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
		chat, err := chatapi.Parse([]byte(`{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat}
		require.True(t, g.Resolve("chat", &req))
		var usages []chatapi.Usage
		var models []string
		_, err = g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			p, err := chatapi.ReadPiece(c.Raw)
			require.NoError(t, err)
			if p.Usage != nil {
				usages = append(usages, *p.Usage)
			}
			a, _, _ := chatapi.ReadAnswer("t", c.Raw)
			models = append(models, a.Model)
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, []chatapi.Usage{{PromptTokens: 10, CompletionTokens: 60, TotalTokens: 70}}, usages,
			"one usage chunk, at the end: the continuation's usage, and the 40 tokens the cut one sent (it reported no usage) — never fewer completion tokens than the caller read")
		assert.Equal(t, "primary", models[0])
		assert.Equal(t, "fallback", models[len(models)-1], "each chunk names the model that wrote it")
	})
}

func TestTheSplicePointIsASpanEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		cfg := config()
		cfg.Tracer = tp
		primary := &writer{name: "primary", fault: cut, after: 40}
		fallback := &writer{name: "fallback"}
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		_, _, err := relay(t, g, router.Request{})
		require.NoError(t, err)
		var events []string
		for _, s := range exp.GetSpans() {
			for _, e := range s.Events {
				if e.Name != "gateway.stream.continued" {
					continue
				}
				attrs := map[string]string{}
				for _, a := range e.Attributes {
					attrs[string(a.Key)] = a.Value.String()
				}
				events = append(events, s.Name+": "+attrs["gateway.continued.from"]+" → "+attrs["gateway.continued.to"]+" at "+attrs["gateway.continued.at_chars"])
			}
		}
		assert.Equal(t, []string{"gateway.attempt: primary → fallback at 160"}, events,
			"one event, on the broken attempt's span, at the splice: 40 tokens of 4 characters each")
	})
}
