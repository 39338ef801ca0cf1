package router_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
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

// ending is how an ender's stream ends after what it sent.
type ending int

const (
	resets   ending = iota // the connection drops
	silent                 // it says nothing more until the call is cut
	finishes               // [DONE]: the call returns
)

// ender streams a role chunk, then (unless roleOnly) "Hello world." and a
// finish, then ends as told.
type ender struct {
	name     string
	roleOnly bool
	end      ending
	choices  int // the choices its finish chunk ends (0: one)
	mu       sync.Mutex
	calls    int
}

func (e *ender) Name() string         { return e.name }
func (e *ender) HonoursContext() bool { return true }
func (e *ender) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (e *ender) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	e.mu.Lock()
	e.calls++
	e.mu.Unlock()
	f := chatapi.NewFrame(e.name)
	chunks := [][]byte{f.Chunk(chatapi.Delta{Role: "assistant"}, "")}
	if !e.roleOnly {
		hello, world := "Hello", " world."
		chunks = append(chunks, f.Chunk(chatapi.Delta{Content: &hello}, ""), f.Chunk(chatapi.Delta{Content: &world}, ""),
			f.Chunk(chatapi.Delta{}, "stop"))
		if e.choices > 1 {
			ends := make([]string, e.choices)
			for i := range ends {
				ends[i] = fmt.Sprintf(`{"index":%d,"delta":{},"finish_reason":"stop"}`, i)
			}
			chunks[len(chunks)-1] = []byte(`{"id":"x","object":"chat.completion.chunk","model":"` + e.name + `","choices":[` + strings.Join(ends, ",") + `]}`)
		}
	}
	for _, c := range chunks {
		time.Sleep(time.Millisecond)
		if err := emit(llm.Chunk{Raw: c}); err != nil {
			return llm.Completion{}, err
		}
	}
	switch e.end {
	case resets:
		return llm.Completion{}, errors.New(e.name + ": read: connection reset by peer")
	case silent:
		<-ctx.Done()
		return llm.Completion{}, ctx.Err()
	}
	return llm.Completion{Model: e.name}, nil
}

func (e *ender) called() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls
}

// outcomesOf records Observer.Attempt outcomes by provider.
type outcomesOf struct {
	router.NopObserver
	mu  sync.Mutex
	got map[string][]error
}

func (a *outcomesOf) Attempt(t router.Target, _ int, _ time.Duration, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.got == nil {
		a.got = map[string][]error{}
	}
	a.got[t.Provider] = append(a.got[t.Provider], err)
}

func (a *outcomesOf) of(provider string) []error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]error(nil), a.got[provider]...)
}

// received is what a caller of Stream read.
type received struct {
	text      string
	roles     int
	roleFirst bool // the first chunk carried the role
}

func streamOf(t *testing.T, g *router.Router, chat *chatapi.Request) (received, error) {
	t.Helper()
	req := router.Request{Tenant: "acme", Chat: chat}
	require.True(t, g.Resolve("chat", &req))
	var got received
	n := 0
	_, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
		p, err := chatapi.ReadPiece(c.Raw)
		require.NoError(t, err)
		got.text += p.Text
		if gjson.GetBytes(c.Raw, "choices.0.delta.role").Str != "" {
			got.roles++
			got.roleFirst = got.roleFirst || n == 0
		}
		n++
		return nil
	})
	return got, err
}

// twoTargets is a router with one route, "chat", over primary then
// fallback, neither declared to continue a prefill.
func twoTargets(t *testing.T, obs router.Observer, primary, fallback *ender) *router.Router {
	t.Helper()
	cfg := config()
	cfg.Observer = obs
	cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: primary.name}, {Provider: fallback.name}}}}
	return newGateway(t, cfg, primary, fallback)
}

// A stream that sent its finish_reason has finished, whoever closes it
// and however: on a route that cannot continue it (no target declared to,
// the caller's own prefill, n > 1) as on one that can, a drop or a silence
// after the finish ends the caller's stream clean, and the upstream that
// gave the whole answer is not counted as failing.
func TestAFinishedAnswerEndsCleanOnARouteThatCannotContinueIt(t *testing.T) {
	requests := map[string]func() *chatapi.Request{ // each answer's every choice finishes
		"no target continues": func() *chatapi.Request { return chatapi.NewRequest("tell me", true) },
		"the caller's own prefill": func() *chatapi.Request {
			r, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,"messages":[{"role":"user","content":"tell me"},{"role":"assistant","content":"Well,"}]}`))
			require.NoError(t, err)
			return r
		},
		"two answers asked for": func() *chatapi.Request {
			r, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,"n":2,"messages":[{"role":"user","content":"tell me"}]}`))
			require.NoError(t, err)
			return r
		},
	}
	for name, chat := range requests {
		for end, how := range map[ending]string{resets: "a reset", silent: "a silence"} {
			t.Run(name+", then "+how, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					obs := &outcomesOf{}
					req := chat()
					primary, fallback := &ender{name: "primary", end: end, choices: req.Choices}, &ender{name: "fallback", end: finishes}
					g := twoTargets(t, obs, primary, fallback)
					got, err := streamOf(t, g, req)
					require.NoError(t, err, "the answer had finished: the stream ends with [DONE], not an error event")
					assert.Equal(t, "Hello world.", got.text)
					assert.Zero(t, fallback.called(), "nothing to fall back for")
					if a := obs.of("primary"); assert.Len(t, a, 1) {
						assert.NoError(t, a[0], "the upstream gave the whole answer: not a failure for its breaker")
					}
				})
			})
		}
	}
}

// A chunk that says nothing — the role alone — does not close the
// fallback window: a primary that sends only its role and then drops or
// goes silent is replaced by the fallback, and the caller reads one
// answer with one role.
func TestARoleAloneDoesNotCloseTheFallbackWindow(t *testing.T) {
	for end, how := range map[ending]string{resets: "drops", silent: "goes silent"} {
		t.Run("the primary "+how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				obs := &outcomesOf{}
				primary, fallback := &ender{name: "primary", roleOnly: true, end: end}, &ender{name: "fallback", end: finishes}
				g := twoTargets(t, obs, primary, fallback)
				got, err := streamOf(t, g, chatapi.NewRequest("tell me", true))
				require.NoError(t, err, "the fallback answered whole")
				assert.Equal(t, "Hello world.", got.text, "the fallback's answer")
				assert.Equal(t, 1, got.roles, "one answer, one role")
				assert.Equal(t, 1, fallback.called())
				if a := obs.of("primary"); assert.Len(t, a, 1) {
					assert.Error(t, a[0], "the primary failed")
				}
			})
		})
	}
}

// An answer that is only a role and a finish is an answer: the role held
// back reaches the caller with the finish.
func TestARoleHeldBackIsSentWithTheFirstChunkThatSaysSomething(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary, fallback := &ender{name: "primary", end: finishes}, &ender{name: "fallback", end: finishes}
		g := twoTargets(t, &outcomesOf{}, primary, fallback)
		got, err := streamOf(t, g, chatapi.NewRequest("tell me", true))
		require.NoError(t, err)
		assert.Equal(t, "Hello world.", got.text)
		assert.Equal(t, 1, got.roles, "the role still reaches the caller")
		assert.True(t, got.roleFirst, "first, before the text")
	})
}

// An answer that is a role alone and ends clean is still an answer: the
// role held back reaches the caller when the call ends, and nothing falls
// back.
func TestAnAnswerOfARoleAloneStillReachesTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary, fallback := &ender{name: "primary", roleOnly: true, end: finishes}, &ender{name: "fallback", end: finishes}
		g := twoTargets(t, &outcomesOf{}, primary, fallback)
		got, err := streamOf(t, g, chatapi.NewRequest("tell me", true))
		require.NoError(t, err)
		assert.Equal(t, 1, got.roles, "the held role is sent when the call ends")
		assert.Zero(t, fallback.called())
	})
}

// An answer of n choices is whole once every choice has finished: one
// choice's finish_reason does not make a cut second choice look complete.
func TestAnAnswerOfTwoChoicesIsWholeOnlyOnceBothFinished(t *testing.T) {
	for end, how := range map[ending]string{resets: "a reset", silent: "a silence"} {
		t.Run("choice 0 finished, then "+how, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary, fallback := &ender{name: "primary", end: end}, &ender{name: "fallback", end: finishes}
				g := twoTargets(t, &outcomesOf{}, primary, fallback)
				chat, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,"n":2,"messages":[{"role":"user","content":"tell me"}]}`))
				require.NoError(t, err)
				_, err = streamOf(t, g, chat)
				require.ErrorIs(t, err, router.ErrAfterFirstByte, "choice 1 never finished: the stream ends with an error, not [DONE]")
			})
		})
	}
}

// raws is a provider that streams fixed events and then ends as told.
type raws struct {
	name   string
	events []string
	end    ending
	calls  atomic.Int32
}

func (p *raws) Name() string         { return p.name }
func (p *raws) HonoursContext() bool { return true }
func (p *raws) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (p *raws) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	p.calls.Add(1)
	for _, e := range p.events {
		time.Sleep(time.Millisecond)
		if err := emit(llm.Chunk{Raw: []byte(e)}); err != nil {
			return llm.Completion{}, err
		}
	}
	switch p.end {
	case resets:
		return llm.Completion{}, errors.New(p.name + ": read: connection reset by peer")
	case silent:
		<-ctx.Done()
		return llm.Completion{}, ctx.Err()
	}
	return llm.Completion{Model: p.name}, nil
}

// Chunks that say nothing — an annotation with no choices, the role, a
// running usage (vLLM's continuous_usage_stats) — are held until one that
// does, all of them, in order; none of them closes the fallback window.
func TestEveryChunkThatSaysNothingIsHeldAndNoneIsLost(t *testing.T) {
	const (
		annotation = `{"id":"a","object":"chat.completion.chunk","choices":[],"prompt_filter_results":[{"prompt_index":0}]}`
		roleUsage  = `{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"}}],"usage":{"prompt_tokens":5,"completion_tokens":0,"total_tokens":5}}`
		hello      = `{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello"}}]}`
		stop       = `{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
	)
	t.Run("held, and sent in order", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			primary := &raws{name: "primary", events: []string{annotation, roleUsage, hello, stop}, end: finishes}
			g := rawTargets(t, primary, &raws{name: "fallback"})
			got, err := rawStream(t, g)
			require.NoError(t, err)
			assert.Equal(t, []string{annotation, roleUsage, hello, stop}, got, "every event, none overwritten by the next")
		})
	})
	t.Run("and lost with an attempt that fails first", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			primary := &raws{name: "primary", events: []string{annotation, roleUsage}, end: resets}
			fallback := &raws{name: "fallback", events: []string{hello, stop}, end: finishes}
			g := rawTargets(t, primary, fallback)
			got, err := rawStream(t, g)
			require.NoError(t, err, "a role with a usage did not close the window: the fallback answered")
			assert.Equal(t, []string{hello, stop}, got)
			assert.EqualValues(t, 1, fallback.calls.Load())
		})
	})
}

func rawTargets(t *testing.T, ps ...*raws) *router.Router {
	t.Helper()
	cfg := config()
	rt := router.Route{Name: "chat"}
	var providers []llm.Provider
	for _, p := range ps {
		rt.Targets = append(rt.Targets, router.Target{Provider: p.name})
		providers = append(providers, p)
	}
	cfg.Routes = []router.Route{rt}
	return newGateway(t, cfg, providers...)
}

func rawStream(t *testing.T, g *router.Router) ([]string, error) {
	t.Helper()
	req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
	require.True(t, g.Resolve("chat", &req))
	var got []string
	_, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
		got = append(got, string(c.Raw))
		return nil
	})
	return got, err
}

// dripper sends a chunk that says nothing every gap, for ever, as an
// upstream that keeps a connection warm without starting its answer.
type dripper struct {
	name string
	gap  time.Duration // 0: as fast as it can
}

func (d *dripper) Name() string         { return d.name }
func (d *dripper) HonoursContext() bool { return true }
func (d *dripper) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (d *dripper) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	for {
		select {
		case <-time.After(d.gap):
		case <-ctx.Done():
			return llm.Completion{}, ctx.Err()
		}
		if err := emit(llm.Chunk{Raw: []byte(`{"id":"d","object":"chat.completion.chunk","choices":[]}`)}); err != nil {
			return llm.Completion{}, err
		}
	}
}

// The first-token limit counts to the first chunk that says something:
// chunks that say nothing, however often they come, do not stop it, and
// the fallback answers once it runs out.
func TestChunksThatSayNothingDoNotStopTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fallback := &raws{name: "fallback", events: []string{
			`{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}`,
			`{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`}, end: finishes}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "drip"}, {Provider: "fallback"}}}}
		obs := &outcomesOf{}
		cfg.Observer = obs
		g := newGateway(t, cfg, &dripper{name: "drip", gap: limits.FirstToken * 7 / 10}, fallback)
		start := time.Now()
		got, err := rawStream(t, g)
		require.NoError(t, err)
		assert.Len(t, got, 2, "the fallback's answer, and nothing the dripper held")
		if a := obs.of("drip"); assert.Len(t, a, 1) {
			assert.ErrorIs(t, a[0], router.ErrFirstTokenTimeout, "cut at the first-token limit, not kept alive by what said nothing")
		}
		assert.Less(t, time.Since(start), 2*limits.FirstToken, "the fallback asked once the limit ran out")
	})
}

// An attempt whose chunks say nothing, fast, is cut once the router has
// held as many as it holds: memory, not only time, bounds the wait.
func TestAnAttemptThatOnlyEverSaysNothingIsCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fallback := &raws{name: "fallback", events: []string{
			`{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}`}, end: finishes}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "drip"}, {Provider: "fallback"}}}}
		obs := &outcomesOf{}
		cfg.Observer = obs
		g := newGateway(t, cfg, &dripper{name: "drip"}, fallback)
		got, err := rawStream(t, g)
		require.NoError(t, err)
		assert.Len(t, got, 1)
		if a := obs.of("drip"); assert.Len(t, a, 1) {
			assert.ErrorIs(t, a[0], router.ErrNothingSaid)
		}
	})
}
