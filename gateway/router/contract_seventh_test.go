package router_test

// Tests for the bugs of two outsiders' seventh banks aimed at the tests'
// gaps (streaming and continuation; the request path, retries and health):
// each passes on the reference and fails with its bug.

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// b7Told is what a caller of Stream read: every event as it came, the
// text, the finishes and the usages it was told, in order.
type b7Told struct {
	events   []string
	text     string
	finishes []string
	usages   []chatapi.Usage
	last     string // "finish" or "usage": what the last chunk told
}

func b7Stream(t *testing.T, g *router.Router, req router.Request, lim router.StreamLimits) (b7Told, router.Response, error) {
	t.Helper()
	if req.Tenant == "" {
		req.Tenant = "acme"
	}
	if req.Chat == nil {
		req.Chat = chatapi.NewRequest("tell me", true)
	}
	if req.Route == nil {
		require.True(t, g.Resolve("chat", &req))
	}
	var got b7Told
	resp, err := g.Stream(t.Context(), req, lim, func(c llm.Chunk) error {
		got.events = append(got.events, string(c.Raw))
		p, err := chatapi.ReadPiece(c.Raw)
		if err != nil {
			return nil // kept in events; a test says whether it may come
		}
		got.text += p.Text
		if p.Finish != "" {
			got.finishes = append(got.finishes, p.Finish)
			got.last = "finish"
		}
		if p.Usage != nil {
			got.usages = append(got.usages, *p.Usage)
			got.last = "usage"
		}
		return nil
	})
	return got, resp, err
}

// b7Both records both Observer.Continued and Observer.Attempt.
type b7Both struct {
	router.NopObserver
	c *outcomes
	a *outcomesOf
}

func (b b7Both) Continued(t router.Target, o router.ContinueOutcome) { b.c.Continued(t, o) }
func (b b7Both) Attempt(t router.Target, n int, took time.Duration, err error) {
	b.a.Attempt(t, n, took, err)
}

func b7Chat(t *testing.T, fields string) *chatapi.Request {
	t.Helper()
	body := `{"model":"chat","stream":true,`
	if fields != "" {
		body += fields + `,`
	}
	chat, err := chatapi.Parse([]byte(body + `"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	return chat
}

// 01. ContinueAtLimit: "the caller had its max_tokens of answer already;
// the answer ends there, with finish_reason "length", as it would have" —
// and as it would have, a caller that asked for the usage is told it, once,
// after the finish (continue.go, whole: "the caller is told, if it asked,
// the usage of every call that wrote it"); Observer.Attempt: the call that
// was cut is no success ("err nil on success").
func TestAnAnswerEndedAtItsLimitStillTellsItsUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 3, overrun: true} // cut after its third token, before the finish
		fallback := &writer{name: "fallback"}
		obs := &outcomes{}
		attempts := &outcomesOf{}
		cfg := config()
		cfg.Observer = b7Both{c: obs, a: attempts}
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		got, _, err := b7Stream(t, g, router.Request{Chat: b7Chat(t, `"max_tokens":3,"stream_options":{"include_usage":true}`)}, limits)
		require.NoError(t, err, "the caller has the whole answer it asked for")
		assert.Equal(t, strings.Join(sixty[:3], ""), got.text)
		assert.Equal(t, []string{"length"}, got.finishes)
		require.Len(t, got.usages, 1, "the caller asked for the usage: it is told it once")
		assert.GreaterOrEqual(t, got.usages[0].CompletionTokens, 3, "no fewer completion tokens than the three it read")
		assert.Equal(t, "usage", got.last, "the usage comes last, after the finish")
		assert.Empty(t, fallback.calls())
		assert.Equal(t, []string{"primary:at_limit"}, obs.list())
		if a := attempts.of("primary"); assert.Len(t, a, 1) {
			assert.Error(t, a[0], "the primary's call was cut: not a success for its metrics and breaker")
		}
	})
}

// b7Charged is a writer behind a billing middleware: every call it makes
// comes back with Charged set to charge (nil: nothing bills).
type b7Charged struct {
	*writer
	charge *llm.Usage
}

func (b *b7Charged) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	c, err := b.writer.Stream(ctx, req, emit)
	if b.charge != nil {
		u := *b.charge
		c.Charged = &u
	}
	return c, err
}

// 02. llm.Completion.Charged: "what a middleware that bills calls charged
// the tenant for this one ... A router that tells a caller the usage of an
// answer several calls wrote sums it, so the caller is told what the tenant
// pays." A continuation billed for more than its upstream reported is told
// at what it was billed.
func TestAContinuationsChargeIsWhatTheCallerIsTold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10} // reports nothing, bills nothing
		fallback := &b7Charged{writer: &writer{name: "fallback"}, charge: &llm.Usage{PromptTokens: 10, CompletionTokens: 64, TotalTokens: 74}}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		got, _, err := b7Stream(t, g, router.Request{Chat: b7Chat(t, `"stream_options":{"include_usage":true}`)}, limits)
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), got.text)
		require.Len(t, got.usages, 1)
		assert.Equal(t, chatapi.Usage{PromptTokens: 10, CompletionTokens: 74, TotalTokens: 84}, got.usages[0],
			"the 10 tokens the cut primary sent, and the 10 + 64 the continuation was billed (its upstream reported 10 + 50)")
	})
}

// b7Styled is a writer whose upstream reads a prefill in its own style.
type b7Styled struct {
	*writer
	style chatapi.PrefillStyle
}

func (b *b7Styled) PrefillStyle() chatapi.PrefillStyle { return b.style }

// 03. architecture.md: the stream "is continued on the route's next target
// declared "continue": true (sent the caller's request plus the text so far
// as an assistant prefill, in the upstream's prefill= style ...)" — the
// style of the upstream that continues, not of the one that broke.
func TestTheContinuationIsSentThePrefillInItsOwnStyle(t *testing.T) {
	for _, c := range []struct {
		name                   string
		primary, fallback      chatapi.PrefillStyle
		continueFinal, prefixd bool
	}{
		{"a vllm fallback after a plain primary", chatapi.PrefillAssistant, chatapi.PrefillVLLM, true, false},
		{"a plain fallback after a vllm primary", chatapi.PrefillVLLM, chatapi.PrefillAssistant, false, false},
		{"a prefix fallback after a vllm primary", chatapi.PrefillVLLM, chatapi.PrefillPrefix, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary := &b7Styled{writer: &writer{name: "primary", fault: cut, after: 3}, style: c.primary}
				fallback := &b7Styled{writer: &writer{name: "fallback"}, style: c.fallback}
				cfg := config()
				cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
					Continue: []router.Target{{Provider: "fallback"}}}}
				g := newGateway(t, cfg, primary, fallback)
				got, _, err := b7Stream(t, g, router.Request{}, limits)
				require.NoError(t, err)
				assert.Equal(t, strings.Join(sixty, ""), got.text)
				require.Len(t, fallback.bodies, 1)
				body := fallback.bodies[0]
				assert.Equal(t, c.continueFinal, gjson.Get(body, "continue_final_message").Bool(), "%s", body)
				assert.Equal(t, c.continueFinal, gjson.Get(body, "add_generation_prompt").Exists(), "%s", body)
				assert.Equal(t, c.prefixd, gjson.Get(body, "messages.@reverse.0.prefix").Bool(), "%s", body)
				assert.Equal(t, "w00 w01 w02 ", gjson.Get(body, "messages.@reverse.0.content").Str)
			})
		})
	}
}

// b7Models is one streaming upstream with several models: "big" says
// "Hello" and drops; any other, sent a prefill, finishes with " world".
// It records the model each call asked for.
type b7Models struct {
	mu     sync.Mutex
	models []string
}

func (*b7Models) Name() string         { return "up" }
func (*b7Models) HonoursContext() bool { return true }
func (*b7Models) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (m *b7Models) Stream(_ context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	m.mu.Lock()
	m.models = append(m.models, req.Model)
	m.mu.Unlock()
	f := chatapi.NewFrame(req.Model)
	if req.Model == "big" {
		hello := "Hello"
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Role: "assistant", Content: &hello}, "")}); err != nil {
			return llm.Completion{}, err
		}
		return llm.Completion{}, errors.New("big: read: connection reset by peer")
	}
	world := " world"
	if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &world}, "stop")}); err != nil {
		return llm.Completion{}, err
	}
	return llm.Completion{Model: req.Model}, nil
}

func (m *b7Models) asked() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.models...)
}

// 04. Target: "a provider and the upstream model to ask it for"; continue.go:
// the stream "is continued ... on the route's next target that declared it
// continues an assistant prefill: that target is sent the caller's request
// plus the answer so far". On a route whose targets share a provider, the
// continuation asks for its own target's model.
func TestAContinuationAsksForItsOwnTargetsModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &b7Models{}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "up", Model: "big"}, {Provider: "up", Model: "small"}},
			Continue: []router.Target{{Provider: "up", Model: "small"}}}}
		g := newGateway(t, cfg, up)
		got, resp, err := b7Stream(t, g, router.Request{}, limits)
		require.NoError(t, err)
		assert.Equal(t, "Hello world", got.text)
		assert.Equal(t, []string{"big", "small"}, up.asked(), "the continuation is asked of small, the target that continues")
		assert.Equal(t, "small", resp.Model)
	})
}

// b7Slow continues a prefill a word every gap, for words words, then
// finishes; it honours its context.
type b7Slow struct {
	name  string
	gap   time.Duration
	words int
}

func (s *b7Slow) Name() string         { return s.name }
func (s *b7Slow) HonoursContext() bool { return true }
func (s *b7Slow) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (s *b7Slow) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	f := chatapi.NewFrame(s.name)
	for i := range s.words {
		select {
		case <-time.After(s.gap):
		case <-ctx.Done():
			return llm.Completion{}, ctx.Err()
		}
		w := " more" + strings.Repeat("!", i%2)
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &w}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{}, "stop")}); err != nil {
		return llm.Completion{}, err
	}
	return llm.Completion{Model: s.name}, nil
}

// 05. Package doc: "a slot within MaxQueueWait (queue wait recorded) → total
// deadline starts"; Router.Stream: "the same admission and retries" as
// Generate, whose errors wrap "context.DeadlineExceeded when the total
// deadline ran out"; stream.go: "TotalTimeout bounds the whole". A
// continuation that never goes silent is still cut at the total deadline.
func TestTheTotalDeadlineBoundsAContinuation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		slow := &b7Slow{name: "slow", gap: 500 * time.Millisecond, words: 20} // 10 s of answer, never idle for 1 s
		cfg := config()
		cfg.Retry.TotalTimeout = 2 * time.Second
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "slow"}},
			Continue: []router.Target{{Provider: "slow"}}}}
		g := newGateway(t, cfg, primary, slow)
		start := time.Now()
		_, _, err := b7Stream(t, g, router.Request{}, limits)
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "the answer did not finish within the total deadline")
		assert.LessOrEqual(t, time.Since(start), cfg.Retry.TotalTimeout, "cut at the 2 s total deadline, not after the continuation's 10 s")
	})
}

// 06. continue.go: never continued "when the answer so far holds anything
// but text (tool calls, ...): a continuation would return prose where a
// tool call was being written" — an answer so far that a continuation
// added a tool call to, and then broke, included.
func TestAContinuationThatWroteAToolCallIsNotContinuedInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &raws{name: "primary", events: []string{
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Let me look."}}]}`}, end: resets}
		second := &raws{name: "second", events: []string{
			`{"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`}, end: resets}
		third := &raws{name: "third", events: []string{
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" Done."},"finish_reason":"stop"}]}`}, end: finishes}
		obs := &outcomes{}
		cfg := config()
		cfg.Observer = obs
		cont := []router.Target{{Provider: "second"}, {Provider: "third"}}
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "second"}, {Provider: "third"}}, Continue: cont}}
		g := newGateway(t, cfg, primary, second, third)
		got, _, err := b7Stream(t, g, router.Request{}, limits)
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "the answer holds a tool call now: cut, not continued as prose")
		assert.Equal(t, "Let me look.", got.text)
		assert.EqualValues(t, 1, second.calls.Load())
		assert.Zero(t, third.calls.Load(), "no continuation after the tool call")
		assert.Equal(t, []string{"primary:failed"}, obs.list())
	})
}

// 07. Health.IsolateTenantFailures: the failures a tenant's own requests can
// provoke — "timeouts (an attempt's, or a stream's first-token or idle
// limit)" — count "towards a target's breaker only once two tenants have had
// them": one tenant's streams that go idle never open the breaker, whether
// or not a continuation then finished the answer.
func TestOneTenantsIdleStreamsThatWereContinuedDoNotOpenTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: stall, after: 10}
		fallback := &writer{name: "fallback"}
		attempts := &outcomesOf{}
		cfg := config() // FailureThreshold 2
		cfg.Health.IsolateTenantFailures = true
		cfg.Observer = attempts
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		for range cfg.Health.FailureThreshold {
			got, _, err := b7Stream(t, g, router.Request{}, limits)
			require.NoError(t, err, "the fallback finished the answer")
			require.Equal(t, strings.Join(sixty, ""), got.text)
		}
		a := attempts.of("primary")
		require.Len(t, a, cfg.Health.FailureThreshold, "the primary was asked every time")
		for _, err := range a {
			require.ErrorIs(t, err, router.ErrStreamIdle, "each primary call went idle")
		}
		assert.Equal(t, "closed", state(g, "primary"), "one tenant's idle timeouts alone never open a breaker")
	})
}

// 08. Response.Usage: "What the caller is told in the answer can be more: it
// adds what failed or cut calls were charged"; continue.go: "Each
// continuation starts from all the caller has read, so one that breaks in
// turn is continued by the next", and whole: the caller is told "the usage
// of every call that wrote it, summed" — the continuation that broke in
// turn included.
func TestTheUsageToldAddsAContinuationThatBrokeInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &b7Charged{writer: &writer{name: "primary", fault: cut, after: 10}, charge: &llm.Usage{PromptTokens: 10, CompletionTokens: 10, TotalTokens: 20}}
		second := &b7Charged{writer: &writer{name: "second", fault: cut, after: 10}, charge: &llm.Usage{PromptTokens: 20, CompletionTokens: 10, TotalTokens: 30}}
		third := &writer{name: "third"} // reports 10 + 40, bills nothing
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "second"}, {Provider: "third"}},
			Continue: []router.Target{{Provider: "second"}, {Provider: "third"}}}}
		g := newGateway(t, cfg, primary, second, third)
		got, _, err := b7Stream(t, g, router.Request{Chat: b7Chat(t, `"stream_options":{"include_usage":true}`)}, limits)
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), got.text, "one sixty, through two outages")
		require.Len(t, got.usages, 1, "told once, at the end")
		assert.Equal(t, chatapi.Usage{PromptTokens: 40, CompletionTokens: 60, TotalTokens: 100}, got.usages[0],
			"the primary's charge (10 + 10), the second's (20 + 10) and the third's report (10 + 40)")
	})
}

// 09. continue.go: "A stream that breaks after its first byte — cut,
// stalled, or sending garbage — is continued ... and the caller reads its
// chunks on as one answer"; Route.Continue: "a stream that breaks after its
// first byte may go on there". A continuation that sends garbage has broken:
// the garbage does not reach the caller, and the next target goes on.
func TestAContinuationThatSendsGarbageIsContinuedByTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &raws{name: "primary", events: []string{
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`}, end: resets}
		second := &raws{name: "second", events: []string{
			`{"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" wor"}}]}`,
			`data: {"oops`,
			`{"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ld"},"finish_reason":"stop"}]}`}, end: finishes}
		third := &raws{name: "third", events: []string{
			`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"ld!"},"finish_reason":"stop"}]}`}, end: finishes}
		obs := &outcomes{}
		cfg := config()
		cfg.Observer = obs
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "second"}, {Provider: "third"}},
			Continue: []router.Target{{Provider: "second"}, {Provider: "third"}}}}
		g := newGateway(t, cfg, primary, second, third)
		got, _, err := b7Stream(t, g, router.Request{}, limits)
		require.NoError(t, err, "the third target finished the answer")
		for _, e := range got.events {
			_, err := chatapi.ReadPiece([]byte(e))
			assert.NoError(t, err, "the caller is sent only chunks: %q", e)
		}
		assert.Equal(t, "Hello world!", got.text)
		assert.EqualValues(t, 1, third.calls.Load(), "the garbage broke the second continuation: the third went on")
		assert.Equal(t, []string{"primary:completed"}, obs.list())
	})
}

// 10. continue.go: the stream "is continued ... on the route's next target
// that declared it continues an assistant prefill"; Route.Targets: "the
// primary first", in order. After a broken target, the next in route order
// is asked first — not one before it that was skipped while its breaker was
// open, and has half-opened since.
func TestContinuationsGoOnInRouteOrderAfterTheBrokenTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := &writer{name: "first"}                            // its whole answers fail (Generate): open at the start
		middle := &writer{name: "middle", fault: stall, after: 10} // the attempt: goes silent after ten words
		last := &writer{name: "last"}
		cfg := config() // FailureThreshold 2, RecoveryTimeout 10 s
		cont := []router.Target{{Provider: "first"}, {Provider: "last"}}
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "first"}, {Provider: "middle"}, {Provider: "last"}}, Continue: cont}}
		g := newGateway(t, cfg, first, middle, last)
		for range cfg.Health.FailureThreshold {
			_, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Provider: "first", Chat: chatapi.NewRequest("hi", false)})
			require.Error(t, err)
		}
		require.Equal(t, "open", state(g, "first"))
		// Idle 15 s: the middle's silence outlasts first's 10 s recovery.
		got, _, err := b7Stream(t, g, router.Request{}, router.StreamLimits{FirstToken: time.Second, Idle: 15 * time.Second})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), got.text)
		assert.Equal(t, []string{strings.Join(sixty[:10], "")}, last.calls(), "the next target after the broken one continues")
		assert.Empty(t, first.calls(), "a target before the broken one comes after the route's end, and was not needed")
	})
}

// 01. Route.RetrySame: "a target that fails with a 5xx or a dropped
// connection is tried once more, after a backoff, before the route moves
// on". With the jitter pinned to the top of its range, the backoff after
// attempt 1 is BaseBackoff (100 ms) — not nothing.
func TestRetrySameWaitsABackoffBeforeTheSameTargetAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // BaseBackoff 100 ms
		cfg.Rand = rand.New(topOfRange{})
		up := newUpstream("up")
		up.script("primary", failsThen(1, status(http.StatusInternalServerError, "", 0)))
		g := newGateway(t, cfg, up)
		req := ask(route("primary", "secondary"))
		req.Route.RetrySame = true
		resp, err := g.Generate(t.Context(), req)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "primary@100ms"}, up.history(), "the same target once more, after a backoff")
		assert.Equal(t, 100*time.Millisecond, resp.Backoff)
	})
}

// 02. Router.InFlight: "the number of admitted requests now" — a request
// still queued for a slot has not been admitted.
func TestInFlightCountsAdmittedRequestsNotQueuedOnes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, time.Minute
		gate := make(chan struct{})
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			<-gate
			return answer("", "done"), nil
		}})
		defer closeGateway(t, g)
		done := make(chan error, 2)
		go func() { _, err := g.Generate(t.Context(), request("a")); done <- err }()
		synctest.Wait() // a holds the only slot
		go func() { _, err := g.Generate(t.Context(), request("b")); done <- err }()
		synctest.Wait() // b waits for it
		assert.Equal(t, 1, g.InFlight(), "one request admitted, one queued")
		assert.Equal(t, 1, g.Capacity())
		close(gate)
		require.NoError(t, <-done)
		require.NoError(t, <-done)
		assert.Zero(t, g.InFlight())
	})
}

// 03. Retry is lab 03's policy, whose TotalTimeout "bounds everything:
// attempts and backoffs"; package doc: "total deadline starts"; Generate:
// errors wrap "context.DeadlineExceeded when the total deadline ran out". A
// caller's deadline later than TotalTimeout does not lift it.
func TestACallersLaterDeadlineDoesNotExtendTheTotalTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.MaxAttempts, cfg.Retry.AttemptTimeout, cfg.Retry.TotalTimeout = 10, 2*time.Second, 5*time.Second
		cfg.Retry.BaseBackoff, cfg.Retry.MaxBackoff = 0, 0
		cfg.Health.FailureThreshold = 100
		start := time.Now()
		p := stuckRecording("alpha", start)
		g := newRouter(t, cfg, p)
		defer closeGateway(t, g)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		resp, err := g.Generate(ctx, request("acme"))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start), "TotalTimeout ends the request; the caller's minute is only an outer bound")
		assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second}, p.seen())
		assert.Equal(t, 3, resp.Attempts)
	})
}

// gr7ModelProbe is an upstream whose probes fail, recording the model each
// one asked about.
type gr7ModelProbe struct {
	*upstream
	mu     sync.Mutex
	models []string
}

func (p *gr7ModelProbe) Probe(ctx context.Context, model string) error {
	p.mu.Lock()
	p.models = append(p.models, model)
	p.mu.Unlock()
	_, err := status(http.StatusServiceUnavailable, "", 0)(ctx)
	return err
}

func (p *gr7ModelProbe) asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.models...)
}

// 04. Health: "one per target"; Health.ProbeInterval: "while a target's
// breaker is open, its upstream is probed (llm.Prober)"; Target is "a
// provider and the upstream model to ask it for". The probe of the open
// target up/primary asks about primary, not the provider's default model
// (which is healthy, and would close primary's breaker for nothing).
func TestABackgroundProbeAsksAboutTheOpenTargetsOwnModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // FailureThreshold 2
		cfg.Health.RecoveryTimeout = time.Hour
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = time.Second, time.Second
		up := &gr7ModelProbe{upstream: newUpstream("up")}
		up.script("primary", status(http.StatusServiceUnavailable, "", 0))
		g := newGateway(t, cfg, up)
		for range 2 { // open at 0 s
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		require.Equal(t, "open", targetState(g, "up", "primary"))
		time.Sleep(2500 * time.Millisecond)
		assert.Equal(t, []string{"primary", "primary"}, up.asked(), "each probe asks about the model whose breaker is open")
	})
}

// gr7Metered records, for each call it is asked, whether it carried a Meter.
type gr7Metered struct {
	*upstream
	mu   sync.Mutex
	seen []string
}

func (m *gr7Metered) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	m.mu.Lock()
	if req.Meter != nil {
		m.seen = append(m.seen, req.Model+":metered")
	} else {
		m.seen = append(m.seen, req.Model+":unmetered")
	}
	m.mu.Unlock()
	return m.upstream.Generate(ctx, req)
}

// 05. Request.Meter: "the request's accounting ..., passed on with every
// upstream call it makes (llm.Request's)" — a fail-over's call too.
func TestEveryAttemptOfARequestCarriesItsMeter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &gr7Metered{upstream: newUpstream("up")}
		up.script("a", status(http.StatusServiceUnavailable, "", 0))
		g := newGateway(t, config(), up)
		req := ask(route("a", "b"))
		req.Meter = passMeter{}
		resp, err := g.Generate(t.Context(), req)
		require.NoError(t, err)
		assert.Equal(t, "b", resp.Model)
		up.mu.Lock()
		defer up.mu.Unlock()
		assert.Equal(t, []string{"a:metered", "b:metered"}, up.seen, "both upstream calls are the request's, and are charged to it")
	})
}

// gr7LongStream fails its first whole answer (a 503), answers every later
// one at once, and streams slowly: a word every 500 ms for 10 s.
type gr7LongStream struct {
	mu    sync.Mutex
	calls int
}

func (*gr7LongStream) Name() string         { return "b" }
func (*gr7LongStream) HonoursContext() bool { return true }
func (p *gr7LongStream) Generate(ctx context.Context, _ llm.Request) (llm.Completion, error) {
	p.mu.Lock()
	p.calls++
	n := p.calls
	p.mu.Unlock()
	if n == 1 {
		return status(http.StatusServiceUnavailable, "", 0)(ctx)
	}
	return answer("b", "b ok"), nil
}

func (*gr7LongStream) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	for range 20 {
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return llm.Completion{}, ctx.Err()
		}
		if err := emit(chunk("word ")); err != nil {
			return llm.Completion{}, err
		}
	}
	return llm.Completion{Model: "b"}, nil
}

// 06. ErrNoHealthyProvider: "The error is an llm.RetryAfterer: the time
// until the first of them lets a probe through." A half-open target whose
// probe is a long stream: once the router says a probe may go through, one
// does — a caller that comes back after the Retry-After it was given is
// not refused again.
func TestARequestThatComesBackAfterItsRetryAfterGetsItsProbeThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // AttemptTimeout 2 s, RecoveryTimeout 10 s
		cfg.Health.FailureThreshold, cfg.Retry.MaxAttempts = 1, 1
		g := newGateway(t, cfg, &gr7LongStream{})
		only := func() router.Request {
			return router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false), Route: &router.Route{Targets: []router.Target{{Provider: "b"}}}}
		}
		_, err := g.Generate(t.Context(), only()) // open at 0 s
		require.Error(t, err)
		require.Equal(t, "open", state(g, "b"))
		time.Sleep(cfg.Health.RecoveryTimeout)
		streamed := make(chan error, 1)
		go func() { // the half-open probe: a healthy stream 10 s long
			req := only()
			req.Chat = chatapi.NewRequest("hi", true)
			_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
			streamed <- err
		}()
		synctest.Wait()
		time.Sleep(3 * time.Second)
		_, err = g.Generate(t.Context(), only())
		if errors.Is(err, router.ErrNoHealthyProvider) {
			var ra llm.RetryAfterer
			require.ErrorAs(t, err, &ra)
			time.Sleep(ra.RetryAfter())
			_, err = g.Generate(t.Context(), only())
		}
		assert.NotErrorIs(t, err, router.ErrNoHealthyProvider, "the Retry-After said a probe would go through by now")
		require.NoError(t, <-streamed)
	})
}

// 07. Config.MaxProviderCalls: "bounds calls to providers that do not
// honour their context running at once, abandoned ones included" — at the
// value configured, 1 here, not at a floor of its own.
func TestMaxProviderCallsOfOneHoldsASecondCallWhileOneIsAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil) // MaxConcurrent 4
		cfg.MaxProviderCalls = 1
		cfg.Retry.MaxAttempts, cfg.Retry.AttemptTimeout = 1, time.Second
		gate := make(chan struct{})
		time.AfterFunc(time.Minute, func() { close(gate) }) // the abandoned call returns in a minute; Close waits for it
		deaf := &fake{name: "deaf", answer: func(_ context.Context, call int) (llm.Completion, error) {
			if call == 1 {
				<-gate // ignores its context
			}
			return answer("", "now"), nil
		}}
		g := newRouter(t, cfg, deaf)
		defer closeGateway(t, g)
		_, err := g.Generate(t.Context(), request("acme"))
		require.ErrorIs(t, err, context.DeadlineExceeded, "the first call is abandoned at its attempt timeout, keeping the only permit")
		_, err = g.Generate(t.Context(), request("acme"))
		assert.Error(t, err, "no second call may run while the abandoned one does")
		assert.Equal(t, int32(1), deaf.calls.Load(), "one call at a time: the second never started")
	})
}

// 08. Config.Rand: "The router locks it, so one seeded source may serve
// every request". Concurrent requests that back off draw from it at once
// (under -race, an unlocked source is a data race).
func TestOneSeededRandServesConcurrentRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Slots.MaxConcurrent = 16
		cfg.Health.FailureThreshold = 1000 // every attempt is made, and backs off
		cfg.Rand = rand.New(rand.NewPCG(1, 2))
		alpha := failing("alpha")
		g := newRouter(t, cfg, alpha)
		defer closeGateway(t, g)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				_, err := g.Generate(t.Context(), request("acme"))
				assert.ErrorIs(t, err, errUpstream)
			})
		}
		wg.Wait()
		assert.Equal(t, int32(16*3), alpha.calls.Load(), "three attempts each, two backoffs each")
	})
}

// 09. Router.Close "waits for those in flight, or for ctx. Abandoned
// provider calls are waited for too, so nothing outlives the router": a
// Close whose ctx ends while an abandoned call still runs has not done so,
// and says so, as it does for requests still in flight.
func TestACloseThatGivesUpOnAnAbandonedCallReturnsAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.AttemptTimeout = time.Second
		gate := make(chan struct{})
		defer time.AfterFunc(time.Minute, func() { close(gate) }).Stop()
		g := newRouter(t, cfg, hanging("deaf", gate), healthy("beta"))
		_, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err, "beta answers after deaf's attempt is abandoned")
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		err = g.Close(ctx)
		assert.Error(t, err, "the abandoned call still runs: Close gave up on it")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 5*time.Second, time.Since(start))
		assert.NoError(t, g.Close(t.Context()), "a second Close waits for it")
	})
}

// 10. Request.Route: "the table's own (shared, read-only: never modify
// it)"; Router.Routes "lists the route table, in the order it was
// configured". A request through a route whose target names no model
// leaves the table as configured.
func TestARequestLeavesItsRouteAsConfigured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "up"}, {Provider: "up", Model: "small"}}}}
		g := newGateway(t, cfg, newUpstream("up")) // up's default model is "default"
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)}
		require.True(t, g.Resolve("chat", &req))
		resp, err := g.Generate(t.Context(), req)
		require.NoError(t, err)
		assert.Equal(t, "default", resp.Model, "the target with no model asks the provider's default")
		want := []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "up"}, {Provider: "up", Model: "small"}}}}
		assert.Equal(t, want, g.Routes(), "the route table is as it was configured")
		assert.Equal(t, want[0].Targets, req.Route.Targets, "the request's route, the table's own, is unchanged")
	})
}
