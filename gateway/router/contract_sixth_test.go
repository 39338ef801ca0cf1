package router_test

// Tests for the bugs of an outsider's sixth bank aimed at the tests' gaps
// (streaming, continuation, retries, probing and health): each passes on
// the reference and fails with its bug.

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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

// 01. architecture.md: "past 64 of them or 64 KiB the attempt fails with
// router.ErrNothingSaid and falls back" — 64 KiB held is not past it; one
// byte more is.
func TestSixtyFourKiBHeldIsNotPastTheLimit(t *testing.T) {
	const (
		hello = `{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"primary"},"finish_reason":"stop"}]}`
		other = `{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"fallback"},"finish_reason":"stop"}]}`
	)
	annotation := func(size int) string { // a chunk that says nothing, size bytes long
		head, tail := `{"id":"a","object":"chat.completion.chunk","choices":[],"pad":"`, `"}`
		return head + strings.Repeat("x", size-len(head)-len(tail)) + tail
	}
	for _, c := range []struct {
		second int // the second annotation's size; the first is 32 KiB
		answer string
	}{{32 << 10, hello}, {32<<10 + 1, other}} {
		synctest.Test(t, func(t *testing.T) {
			primary := &raws{name: "primary", events: []string{annotation(32 << 10), annotation(c.second), hello}, end: finishes}
			fallback := &raws{name: "fallback", events: []string{other}, end: finishes}
			g := rawTargets(t, primary, fallback)
			got, err := rawStream(t, g)
			require.NoError(t, err)
			require.NotEmpty(t, got)
			assert.Equal(t, c.answer, got[len(got)-1], "%d bytes held: past 64 KiB (65536) the attempt fails over", 32<<10+c.second)
		})
	}
}

// 02. Health.ProbeInterval: "probed after ProbeInterval, then at doubling
// intervals up to ProbeMaxInterval (0: ProbeInterval)" — with 0, every
// probe is ProbeInterval after the last.
func TestAZeroProbeMaxIntervalProbesEveryProbeInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // FailureThreshold 2
		cfg.Health.RecoveryTimeout = time.Hour
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = time.Second, 0
		g, up, _ := outage(t, cfg) // the primary fails its requests and its probes
		for range 2 {              // open at 0 s
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(5500 * time.Millisecond)
		assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second, 5 * time.Second}, up.probeTimes(),
			"ProbeMaxInterval 0 caps the intervals at ProbeInterval: no doubling")
	})
}

// grHangingProbe is an upstream whose first probe hangs until its context
// ends; every later probe succeeds. It keeps when each probe ended.
type grHangingProbe struct {
	*upstream
	mu     sync.Mutex
	probes int
	ended  []time.Duration
}

func (p *grHangingProbe) Probe(ctx context.Context, _ string) error {
	p.mu.Lock()
	p.probes++
	first := p.probes == 1
	p.mu.Unlock()
	var err error
	if first {
		<-ctx.Done()
		err = ctx.Err()
	}
	p.mu.Lock()
	p.ended = append(p.ended, time.Since(p.start))
	p.mu.Unlock()
	return err
}

func (p *grHangingProbe) probesEnded() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.ended...)
}

// 03. Health.ProbeInterval: "A probe has Retry.AttemptTimeout." A probe
// whose upstream never answers is given up then, and the next one
// follows.
func TestAProbeThatNeverAnswersIsGivenUpAtTheAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // FailureThreshold 2, AttemptTimeout 2 s
		cfg.Health.RecoveryTimeout = time.Hour
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = time.Second, time.Second
		up := &grHangingProbe{upstream: newUpstream("up")}
		up.script("primary", status(http.StatusServiceUnavailable, "", 0))
		g := newGateway(t, cfg, up)
		for range 2 { // open at 0 s
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(5 * time.Second)
		assert.Equal(t, []time.Duration{3 * time.Second, 4 * time.Second}, up.probesEnded(),
			"the probe at 1 s is given up at 3 s; the next, at 4 s, answers")
		assert.Equal(t, "closed", targetState(g, "up", "primary"))
	})
}

// grSlowEcho continues a prefill the way some servers do: it repeats the
// prefill first, a word every gap, then writes the rest of sixty at once.
type grSlowEcho struct {
	name string
	gap  time.Duration
}

func (p *grSlowEcho) Name() string         { return p.name }
func (p *grSlowEcho) HonoursContext() bool { return true }
func (p *grSlowEcho) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (p *grSlowEcho) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	msgs := req.Chat.Get("messages").Array()
	prefill := msgs[len(msgs)-1].Get("content").Str
	f := chatapi.NewFrame(p.name)
	if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Role: "assistant"}, "")}); err != nil {
		return llm.Completion{}, err
	}
	echo := strings.SplitAfter(prefill, " ")
	rest := sixty[len(echo)-1:] // SplitAfter leaves a last "" after the trailing space
	for _, w := range echo[:len(echo)-1] {
		select {
		case <-time.After(p.gap):
		case <-ctx.Done():
			return llm.Completion{}, ctx.Err()
		}
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &w}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	for _, w := range rest {
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &w}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{}, "stop")}); err != nil {
		return llm.Completion{}, err
	}
	return llm.Completion{Model: p.name}, nil
}

// 04. StreamLimits: "Idle bounds the gap between two chunks"; architecture.md:
// the limits "catch an upstream that accepts the connection and then says
// nothing". A continuation repeating the prefill a word every 300 ms is
// speaking, though the caller is sent none of it: it is not cut at the
// first-token limit of 1 s.
func TestAContinuationRepeatingThePrefillIsNotSilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		echo := &grSlowEcho{name: "echo", gap: 300 * time.Millisecond} // ten words: 3 s of repeat
		obs := &outcomes{}
		cfg := config()
		cfg.Observer = obs
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "echo"}},
			Continue: []router.Target{{Provider: "echo"}}}}
		g := newGateway(t, cfg, primary, echo)
		text, _, err := relay(t, g, router.Request{}) // FirstToken 1 s, Idle 1 s
		require.NoError(t, err, "the continuation never went silent for a second")
		assert.Equal(t, strings.Join(sixty, ""), text, "the repeat dropped, the rest read once")
		assert.Equal(t, []string{"primary:completed"}, obs.list())
	})
}

// grTransitions records Observer.BreakerChanged for one model.
type grTransitions struct {
	router.NopObserver
	model string
	mu    sync.Mutex
	got   []string
}

func (o *grTransitions) BreakerChanged(t router.Target, from, to breaker.State) {
	if t.Model != o.model {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, from.String()+"→"+to.String())
}

func (o *grTransitions) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.got...)
}

// 05. Observer.BreakerChanged: "a target's breaker moved from one state to
// another". Once a background probe has closed the target's breaker, a
// request's half-open probe that fails later moves nothing of the
// target's: the transitions heard end where TargetState is, closed.
func TestATransitionOfABreakerAProbeReplacedIsNotReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // FailureThreshold 2
		cfg.Health.RecoveryTimeout = time.Second
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = 3*time.Second, 3*time.Second
		cfg.Retry.AttemptTimeout = 10 * time.Second
		obs := &grTransitions{model: "primary"}
		cfg.Observer = obs
		up := &probed{upstream: newUpstream("up"), down: &atomic.Bool{}} // its probes succeed
		gate := make(chan struct{})
		calls := 0
		up.script("primary", func(ctx context.Context) (llm.Completion, error) {
			if calls++; calls == 3 {
				<-gate // the request's half-open probe, out until the gate opens
			}
			return status(http.StatusServiceUnavailable, "", 0)(ctx)
		})
		g := newGateway(t, cfg, up)
		for range 2 { // open at 0 s: a background probe is due at 3 s
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(1500 * time.Millisecond) // half-open
		done := make(chan error, 1)
		go func() {
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			done <- err
		}()
		time.Sleep(2 * time.Second) // the background probe at 3 s closes the breaker
		require.Equal(t, "closed", targetState(g, "up", "primary"))
		close(gate) // the request's probe fails now, on the breaker the probe replaced
		require.NoError(t, <-done, "the secondary answers")
		assert.Equal(t, "closed", targetState(g, "up", "primary"))
		assert.Equal(t, []string{"closed→open", "open→half-open", "half-open→closed"}, obs.list(),
			"the target's breaker opened, half-opened and closed; nothing of it opened again")
	})
}

// 06. continue.go: the caller reads the continuation's chunks on "with a
// repeat of the prefill dropped"; splice: "text held back while the
// continuation might be repeating it is sent with the first chunk that
// shows it is not". A continuation that says "The" and finishes did not
// repeat "The cat sat.": its "The" reaches the caller.
func TestHeldTextOfAContinuationThatFinishesIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &scripted{name: "primary", words: []string{"The", " cat", " sat."}, failAfter: errors.New("connection reset by peer")}
		fallback := &scripted{name: "fallback", cont: []string{"The"}, finish: true}
		g := scriptedRouter(t, primary, fallback)
		c, _, err := stream(t, g)
		require.NoError(t, err)
		assert.Equal(t, "The cat sat.The", c.text, "the continuation's own text, not taken for a repeat")
		assert.Equal(t, 1, c.finishes)
		assert.Equal(t, []string{"The cat sat."}, fallback.prefills)
	})
}

// 07. continue.go: never continued "when the answer so far holds anything
// but text"; the answer read so far holds a chunk the router could not
// read as text.
func TestAnAnswerWithAnUnreadableChunkIsNeverContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &raws{name: "primary", events: []string{
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`,
			`not a chunk`}, end: resets}
		cont := &raws{name: "cont", events: []string{
			`{"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"stop"}]}`}, end: finishes}
		obs := &outcomes{}
		cfg := config()
		cfg.Observer = obs
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "cont"}}, Continue: []router.Target{{Provider: "cont"}}}}
		g := newGateway(t, cfg, primary, cont)
		got, err := rawStream(t, g)
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "what the caller read is not text alone: cut, not continued")
		assert.Len(t, got, 2, "both chunks reached the caller as they came")
		assert.Zero(t, cont.calls.Load(), "no continuation was asked for")
		assert.Equal(t, []string{"primary:not_text"}, obs.list())
	})
}

// grSecretive fails every call with an error that quotes its prompt, as an
// upstream's message may.
type grSecretive struct{}

func (grSecretive) Name() string         { return "secretive" }
func (grSecretive) HonoursContext() bool { return true }
func (grSecretive) Generate(_ context.Context, req llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("upstream 500 while answering " + req.Chat.Text())
}

// 08. architecture.md: spans for admission and each attempt show "where
// the time went, per request, without prompt text" — an attempt that
// failed with an error quoting the prompt included.
func TestSpansCarryNoTextOfAFailedAttemptsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		cfg := config()
		cfg.Tracer, cfg.Retry.MaxAttempts = tp, 1
		g := newGateway(t, cfg, grSecretive{})
		const secret = "my password is hunter2"
		_, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest(secret, false)})
		require.ErrorContains(t, err, secret, "the caller hears the error as it came")
		spans := exp.GetSpans()
		require.NotEmpty(t, spans)
		for _, s := range spans {
			var all []string
			all = append(all, s.Name, s.Status.Description)
			for _, a := range s.Attributes {
				all = append(all, a.Value.String())
			}
			for _, e := range s.Events {
				all = append(all, e.Name)
				for _, a := range e.Attributes {
					all = append(all, a.Value.String())
				}
			}
			assert.NotContains(t, strings.Join(all, " | "), "hunter2", "span %s carries the prompt's text", s.Name)
		}
	})
}

// 09. ErrNoHealthyProvider: "the time until the first of them lets a probe
// through". A breaker whose half-open probe failed opened again then: it
// lets the next probe through a whole RecoveryTimeout later.
func TestRetryAfterCountsFromTheLatestOpening(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("b", status(http.StatusServiceUnavailable, "", 0))
		cfg := config()
		cfg.Health.FailureThreshold, cfg.Retry.MaxAttempts = 1, 1 // RecoveryTimeout 10 s
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("b"))) // open at 0 s
		require.Error(t, err)
		time.Sleep(cfg.Health.RecoveryTimeout)
		_, err = g.Generate(t.Context(), ask(route("b"))) // the probe at 10 s fails: open again
		require.Error(t, err)
		require.NotErrorIs(t, err, router.ErrNoHealthyProvider, "the probe was let through")
		require.Equal(t, "open", targetState(g, "up", "b"))
		time.Sleep(4 * time.Second)
		_, err = g.Generate(t.Context(), ask(route("b")))
		require.ErrorIs(t, err, router.ErrNoHealthyProvider)
		var ra llm.RetryAfterer
		require.ErrorAs(t, err, &ra)
		assert.Equal(t, 6*time.Second, ra.RetryAfter(), "opened again at 10 s: the next probe at 20 s, in 6 s")
	})
}

// 10. Config.RetryBudget: "each later one withdraws from the provider it
// goes to" — a continuation whose target's breaker is open goes nowhere,
// and withdraws nothing.
func TestAContinuationTargetWhoseBreakerIsOpenSpendsNoRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &ledger{left: 5}
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		cfg := config() // FailureThreshold 2
		cfg.RetryBudget = budget
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		for range 2 { // the fallback's whole answers fail: its breaker opens
			_, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Provider: "fallback", Chat: chatapi.NewRequest("hi", false)})
			require.Error(t, err)
		}
		require.Equal(t, "open", state(g, "fallback"))
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "the only target that continues is open")
		assert.Empty(t, fallback.calls())
		assert.Equal(t, []string{"deposit fallback", "deposit fallback", "deposit primary"}, budget.history(),
			"no call went to the fallback: nothing withdrawn for it")
	})
}

// ContinueNoTarget: 'the route has no healthy target after the broken one
// that declared it continues a prefill' — one whose breaker is open is not
// healthy: no continuation was tried, so none failed.
func TestAContinuationTargetWhoseBreakerIsOpenIsNoTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		obs := &outcomes{}
		cfg := config() // FailureThreshold 2
		cfg.Observer = obs
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		for range 2 {
			_, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Provider: "fallback", Chat: chatapi.NewRequest("hi", false)})
			require.Error(t, err)
		}
		require.Equal(t, "open", state(g, "fallback"))
		_, _, err := relay(t, g, router.Request{})
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		assert.ErrorContains(t, err, "connection reset", "the caller hears what cut its stream")
		assert.Equal(t, []string{"primary:no_target"}, obs.list())

		// And a continuation that was tried and failed is "failed".
		refusing := &writer{name: "refusing", refuse: true}
		obs2 := &outcomes{}
		g2 := continuing(t, obs2, []string{"refusing"}, &writer{name: "primary", fault: cut, after: 10}, refusing)
		_, _, err = relay(t, g2, router.Request{})
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		assert.Equal(t, []string{"primary:failed"}, obs2.list())
	})
}
