package router_test

import (
	"context"
	"errors"
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
)

// scripted streams fixed chunks (words, then finish), then fails with failAfter (nil: ok).
type scripted struct {
	name      string
	words     []string // first call
	cont      []string // calls with a prefill
	finish    bool     // send a finish_reason chunk after the words
	failAfter error
	usage     *chatapi.Usage // returned in the Completion, never emitted
	mu        sync.Mutex
	prefills  []string
}

func (s *scripted) Name() string         { return s.name }
func (s *scripted) HonoursContext() bool { return true }
func (s *scripted) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}
func (s *scripted) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	msgs := req.Chat.Get("messages").Array()
	words := s.words
	if last := msgs[len(msgs)-1]; last.Get("role").Str == "assistant" {
		s.mu.Lock()
		s.prefills = append(s.prefills, last.Get("content").Str)
		s.mu.Unlock()
		words = s.cont
	}
	f := chatapi.NewFrame(s.name)
	if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Role: "assistant"}, "")}); err != nil {
		return llm.Completion{}, err
	}
	for _, w := range words {
		time.Sleep(time.Millisecond)
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &w}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	if s.finish {
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{}, "stop")}); err != nil {
			return llm.Completion{}, err
		}
	}
	if s.failAfter != nil {
		return llm.Completion{}, s.failAfter
	}
	return llm.Completion{Model: s.name, Usage: s.usage}, nil
}

func scriptedRouter(t *testing.T, ps ...*scripted) *router.Router {
	cfg := config()
	rt := router.Route{Name: "chat"}
	var providers []llm.Provider
	for _, p := range ps {
		rt.Targets = append(rt.Targets, router.Target{Provider: p.name})
		rt.Continue = append(rt.Continue, router.Target{Provider: p.name})
		providers = append(providers, p)
	}
	cfg.Routes = []router.Route{rt}
	return newGateway(t, cfg, providers...)
}

type caught struct {
	text     string
	finishes int
	afterFin int // chunks after the first finish_reason
}

func stream(t *testing.T, g *router.Router) (caught, router.Response, error) {
	req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
	require.True(t, g.Resolve("chat", &req))
	var c caught
	resp, err := g.Stream(t.Context(), req, limits, func(ch llm.Chunk) error {
		p, err := chatapi.ReadPiece(ch.Raw)
		require.NoError(t, err)
		if c.finishes > 0 {
			c.afterFin++
		}
		if p.Finish != "" {
			c.finishes++
		}
		c.text += p.Text
		return nil
	})
	return c, resp, err
}

// A stream that had already finished (finish_reason sent) and then
// dropped before [DONE]/usage is "continued": text after the finish.
func TestAnAnswerThatFinishedIsNotContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &scripted{name: "primary", words: []string{"Hello", " world."}, finish: true,
			failAfter: errors.New("read: connection reset by peer")}
		fallback := &scripted{name: "fallback", cont: []string{" And", " more."}, finish: true}
		g := scriptedRouter(t, primary, fallback)
		c, _, err := stream(t, g)
		require.NoError(t, err, "a reset after the finish reason ends a whole answer")
		assert.Equal(t, "Hello world.", c.text, "the answer had finished")
		assert.Equal(t, 0, c.afterFin, "nothing after a finish_reason")
		assert.Empty(t, fallback.prefills, "a finished answer is not continued")
	})
}

// A continuation whose first token happens to be a prefix of the
// prefill is taken for an echo and dropped.
func TestAContinuationThatOnlyStartsLikeThePrefillKeepsItsText(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &scripted{name: "primary", words: []string{"The", " cat", " sat."}, failAfter: errors.New("connection reset by peer")}
		fallback := &scripted{name: "fallback", cont: []string{" The", " dog", " ran."}, finish: true}
		// the prefill is "The cat sat." — a continuation " The dog ran." is fine;
		// but a continuation "The" (no space, a new line of a list, etc.) is a prefix of the prefill:
		fallback.cont = []string{"The", " dog", " ran."}
		g := scriptedRouter(t, primary, fallback)
		c, _, err := stream(t, g)
		require.NoError(t, err)
		assert.Equal(t, "The cat sat.The dog ran.", c.text)
	})
}

// The continued stream's usage is what the relay saw in chunks, so
// a continuation whose upstream reports usage only in its Completion (the
// caller did not ask include_usage) is reported as 0 tokens; and the
// Response names the broken provider with the fallback's model.
func TestAContinuedAnswerReportsTheUsageAndTheTargetThatFinishedIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &scripted{name: "primary", words: []string{"a", " b"}, failAfter: errors.New("connection reset by peer")}
		fallback := &scripted{name: "fallback", cont: []string{" c"}, finish: true,
			usage: &chatapi.Usage{PromptTokens: 12, CompletionTokens: 7, TotalTokens: 19}}
		g := scriptedRouter(t, primary, fallback)
		c, resp, err := stream(t, g)
		require.NoError(t, err)
		assert.Equal(t, "a b c", c.text)
		assert.Equal(t, 19, resp.Usage.TotalTokens, "what the upstreams reported: the continuation's 19; the cut primary reported none (the caller is told 21: TestACallerWhoAskedForUsageIsToldItOnceAfterAContinuation)")
		assert.Equal(t, "fallback", resp.Provider, "Model names the fallback's model; Provider should match")
	})
}

// reopener: when the primary's breaker is closed by a background probe, the
// primary fails again at once and two requests reopen its breaker — what
// concurrent traffic does in the window between recovered() and
// delete(r.probing, t).
type reopener struct {
	router.NopObserver
	once  sync.Once
	onFix func()
}

func (o *reopener) BreakerChanged(t router.Target, from, to breaker.State) {
	if t.Model == "primary" && to == breaker.Closed && o.onFix != nil {
		o.once.Do(o.onFix)
	}
}

// A breaker that reopens while the probe goroutine that closed it is
// still registered in r.probing is never probed again: it waits out the
// whole RecoveryTimeout.
func TestABreakerThatReopensRightAfterAProbeClosedItIsProbedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.RecoveryTimeout = time.Hour
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = 250*time.Millisecond, 2*time.Second
		obs := &reopener{}
		cfg.Observer = obs
		g, up, down := outage(t, cfg)
		obs.onFix = func() {
			down.Store(true)
			for range 2 {
				_, err := g.Generate(context.Background(), ask(route("primary", "secondary")))
				require.NoError(t, err)
			}
			state, _ := g.TargetState(router.Target{Provider: "up", Model: "primary"})
			require.Equal(t, breaker.Open, state, "reopened")
		}
		for range 2 { // open the primary's breaker
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(time.Second)
		down.Store(false) // the first probe after this closes the breaker; onFix reopens it
		time.Sleep(2 * time.Second)
		before := len(up.probeTimes())
		down.Store(false) // the primary is really back now
		time.Sleep(time.Minute)
		state, _ := g.TargetState(router.Target{Provider: "up", Model: "primary"})
		assert.Greater(t, len(up.probeTimes()), before, "the reopened breaker is probed")
		assert.Equal(t, breaker.Closed, state, "a minute after the primary came back, its breaker is still open (RecoveryTimeout is an hour)")
	})
}

// tail is scripted, but after its usage chunk it still reads (the [DONE]
// line, as openaicompat does) before returning.
type tail struct{ scripted }

func (s *tail) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	s.finish = true
	if _, err := s.scripted.Stream(ctx, req, emit); err != nil {
		return llm.Completion{}, err
	}
	if s.failAfter == nil && req.Chat.IncludeUsage {
		u := chatapi.Usage{PromptTokens: 5, CompletionTokens: 1, TotalTokens: 6}
		if err := emit(llm.Chunk{Raw: chatapi.NewFrame(s.name).UsageChunk(u)}); err != nil {
			return llm.Completion{}, err
		}
		select { // reading "data: [DONE]"
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			return llm.Completion{}, ctx.Err()
		}
	}
	return llm.Completion{Model: s.name}, nil
}

type attempts struct {
	router.NopObserver
	mu  sync.Mutex
	got []string
}

func (a *attempts) Attempt(t router.Target, n int, _ time.Duration, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, t.Provider+":"+string(llm.OutcomeOf(err)))
}

// A continuation that finished, with include_usage, is closed by the
// relay before its call returns, and reported (Observer, breaker) as cancelled.
func TestAContinuationThatFinishedIsReportedOK(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &scripted{name: "primary", words: []string{"a", " b"}, failAfter: errors.New("connection reset by peer")}
		fallback := &tail{scripted{name: "fallback", cont: []string{" c"}}}
		obs := &attempts{}
		cfg := config()
		cfg.Observer = obs
		rt := router.Route{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}}, Continue: []router.Target{{Provider: "fallback"}}}
		cfg.Routes = []router.Route{rt}
		g := newGateway(t, cfg, primary, fallback)
		chat, err := chatapi.Parse([]byte(`{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat}
		require.True(t, g.Resolve("chat", &req))
		_, err = g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.NoError(t, err)
		obs.mu.Lock()
		defer obs.mu.Unlock()
		assert.Contains(t, obs.got, "fallback:ok", "%v", obs.got)
	})
}

func TestRetrySameNeverTakesTheLastAttemptFromAnUntriedTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Retry.MaxAttempts = 2
		calls, err := retrying(t, true, 0, failsThen(99, status(500, "", 0)), cfg)
		assert.NoError(t, err, "the secondary would have answered")
		assert.Equal(t, []string{"primary@0s", "secondary@0s"}, calls, "with two attempts, the second goes to the untried target")
	})
}

func TestACallerWhoLeavesDuringAContinuationIsNotAFailedContinuation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		n := 0
		start := time.Now()
		_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error {
			n++
			if n > 15 {
				return errors.New("write: broken pipe")
			}
			return nil
		})
		synctest.Wait()
		assert.ErrorIs(t, err, context.Canceled, "%v", err)
		assert.Less(t, time.Since(start), time.Second, "the continuation stopped when the caller left")
		assert.NotContains(t, obs.list(), "primary:failed", "the caller left: not a failed continuation")
	})
}

func TestACallerWhoLeavesReadsAsCanceledWithOrWithoutContinuation(t *testing.T) {
	for _, noCont := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			primary := &writer{name: "primary", fault: cut, after: 10}
			fallback := &writer{name: "fallback"}
			g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
			req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true), NoContinue: noCont}
			require.True(t, g.Resolve("chat", &req))
			n := 0
			limit := 15
			if noCont {
				limit = 5
			}
			_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error {
				n++
				if n > limit {
					return errors.New("write: broken pipe")
				}
				return nil
			})
			assert.ErrorIs(t, err, context.Canceled, "noContinue=%v: a caller who left reads as Canceled (httpapi cutOf → client_closed): %v", noCont, err)
		})
	}
}

func TestAFreshAnswerAfterARoleChunkSendsNoSecondRole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &scripted{name: "primary", failAfter: errors.New("connection reset by peer")}
		fallback := &scripted{name: "fallback", words: []string{"x"}, finish: true}
		g := scriptedRouter(t, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		roles := 0
		_, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			if strings.Contains(string(c.Raw), `"role"`) {
				roles++
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, 1, roles, "the caller had the role from the broken stream; the fresh answer's is not sent again")
	})
}
