package router_test

// Tests derived from two outsiders' bug banks (issue 34): one written
// from Router.Stream's contract alone, one aimed at what the tests left
// open — limits whose clocks differ, state across chunks, attempts and
// continuations, more than one outage, and recoveries.

import (
	"context"
	"errors"
	"strings"
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
)

// Every existing stream test sets FirstToken == Idle, so the idle clock
// running on FirstToken is invisible; here the two differ, both ways.
func TestIdleLimitIsItsOwnAndNotTheFirstTokenLimit(t *testing.T) {
	run := func(t *testing.T, lim router.StreamLimits, gap time.Duration) error {
		p := streamer{name: "gappy", first: 100 * time.Millisecond, gap: gap, words: []string{"a", "b", "c"}}
		cfg := config()
		cfg.Retry.MaxAttempts = 1
		g := newGateway(t, cfg, p)
		_, err := g.Stream(t.Context(), router.Request{Tenant: "t", Chat: chatapi.NewRequest("hi", true)}, lim,
			func(llm.Chunk) error { return nil })
		return err
	}
	t.Run("a gap longer than Idle is cut, though shorter than FirstToken", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			err := run(t, router.StreamLimits{FirstToken: 3 * time.Second, Idle: time.Second}, 2*time.Second)
			require.ErrorIs(t, err, router.ErrStreamIdle)
			assert.ErrorIs(t, err, router.ErrAfterFirstByte)
		})
	})
	t.Run("a gap shorter than Idle is not cut, though longer than FirstToken", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			require.NoError(t, run(t, router.StreamLimits{FirstToken: time.Second, Idle: 3 * time.Second}, 2*time.Second))
		})
	})
}

// The existing test drips nothing-chunks for ever, so any limit passes it;
// here the limit is probed at its edge: 64 held is fine, the 65th is past it.
func TestTheHeldLimitIsSixtyFourChunksExactly(t *testing.T) {
	const (
		annotation = `{"id":"a","object":"chat.completion.chunk","choices":[]}`
		hello      = `{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"primary"},"finish_reason":"stop"}]}`
		other      = `{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"fallback"},"finish_reason":"stop"}]}`
	)
	for _, c := range []struct {
		held   int
		answer string
	}{{64, hello}, {65, other}} {
		synctest.Test(t, func(t *testing.T) {
			events := make([]string, 0, c.held+1)
			for range c.held {
				events = append(events, annotation)
			}
			primary := &raws{name: "primary", events: append(events, hello), end: finishes}
			fallback := &raws{name: "fallback", events: []string{other}, end: finishes}
			g := rawTargets(t, primary, fallback)
			got, err := rawStream(t, g)
			require.NoError(t, err)
			require.NotEmpty(t, got)
			assert.Equal(t, c.answer, got[len(got)-1], "%d chunks that say nothing: past 64 the attempt fails over", c.held)
			if c.held > 64 {
				assert.Len(t, got, 1, "nothing the failed attempt held reaches the caller")
			}
		})
	}
}

// Every existing stream test's emit returns at once; a caller that is slow
// to take a chunk is not an upstream gone silent.
func TestASlowReaderIsNotAnIdleUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := streamer{name: "brisk", first: 100 * time.Millisecond, gap: 100 * time.Millisecond, words: []string{"a", "b", "c"}}
		cfg := config()
		cfg.Retry.MaxAttempts = 1
		g := newGateway(t, cfg, p)
		var got []string
		_, err := g.Stream(t.Context(), router.Request{Tenant: "t", Chat: chatapi.NewRequest("hi", true)},
			router.StreamLimits{FirstToken: time.Second, Idle: time.Second},
			func(c llm.Chunk) error {
				time.Sleep(2 * time.Second) // the client's write takes longer than either limit
				got = append(got, content(t, c))
				return nil
			})
		require.NoError(t, err, "the upstream never went silent for a second; the caller was slow")
		assert.Equal(t, []string{"a", "b", "c"}, got)
	})
}

// No existing test has a continuation that goes silent: after its role (a
// chunk the caller is not sent) the idle limit must still run.
func TestAContinuationSilentAfterItsRoleIsCutAtTheIdleLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		mute := &writer{name: "mute", fault: stall, after: 0} // its role, then nothing
		last := &writer{name: "last"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"mute", "last"}, primary, mute, last)
		start := time.Now()
		text, _, err := relay(t, g, router.Request{})
		require.NoError(t, err, "the silent continuation is cut at the idle limit and the next one finishes the answer")
		assert.Equal(t, strings.Join(sixty, ""), text)
		assert.Less(t, time.Since(start), 5*time.Second, "cut after Idle (1 s), not at the 30 s total deadline")
		assert.Len(t, last.calls(), 1)
	})
}

// The existing n=2 tests end both choices in one chunk; an upstream may
// end them in two, and the answer is whole once the second arrives.
func TestTwoChoicesFinishedInSeparateChunksAreWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &raws{name: "primary", events: []string{
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}`,
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":1,"delta":{"role":"assistant","content":"Yo"}}]}`,
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}`,
		}, end: resets}
		fallback := &raws{name: "fallback", events: []string{`{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"stop"}]}`}, end: finishes}
		g := rawTargets(t, primary, fallback)
		chat, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,"n":2,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat}
		require.True(t, g.Resolve("chat", &req))
		n := 0
		_, err = g.Stream(t.Context(), req, limits, func(llm.Chunk) error { n++; return nil })
		require.NoError(t, err, "both choices finished before the reset: the answer is whole")
		assert.Equal(t, 4, n)
		assert.Zero(t, fallback.calls.Load())
	})
}

// The existing usage tests carry usage in a chunk of its own; an upstream
// with running usage (vLLM continuous_usage_stats) puts it on the text
// chunks, and a cut call's report must still reach the total.
func TestAUsageOnATextChunkOfACutCallIsInTheTotal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &raws{name: "primary", events: []string{
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}],"usage":{"prompt_tokens":50,"completion_tokens":1,"total_tokens":51}}`}, end: resets}
		cont := &raws{name: "cont", events: []string{
			`{"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"stop"}]}`}, end: finishes}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "cont"}}, Continue: []router.Target{{Provider: "cont"}}}}
		g := newGateway(t, cfg, primary, cont)
		chat, err := chatapi.Parse([]byte(`{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat}
		require.True(t, g.Resolve("chat", &req))
		var last *chatapi.Usage
		_, err = g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			p, err := chatapi.ReadPiece(c.Raw)
			require.NoError(t, err)
			if p.Usage != nil {
				last = p.Usage
			}
			return nil
		})
		require.NoError(t, err)
		require.NotNil(t, last)
		assert.Equal(t, 50, last.PromptTokens, "the cut call reported 50 prompt tokens on its text chunk; the continuation none")
	})
}

// No existing test has two outages in one stream: a continuation that
// breaks in turn is continued from all the caller read, its text included.
func TestAContinuationThatBreaksIsContinuedFromAllTheCallerRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		second := &writer{name: "second", fault: cut, after: 10}
		third := &writer{name: "third"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"second", "third"}, primary, second, third)
		text, _, err := relay(t, g, router.Request{})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), text, "one sixty, through two outages")
		assert.Equal(t, []string{strings.Join(sixty[:20], "")}, third.calls(), "the third was sent all twenty words the caller had")
		assert.Equal(t, []string{"primary:completed"}, obs.list())
	})
}

// The budget tests use Generate only; a continuation is an extra upstream
// call and must be withdrawn for too.
func TestAnEmptyRetryBudgetRefusesAContinuation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &ledger{}
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		cfg := config()
		cfg.RetryBudget = budget
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}}, Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "no budget for a second call: the stream ends with its own failure")
		assert.Empty(t, fallback.calls(), "the budget refused the continuation")
		assert.Contains(t, budget.history(), "refused fallback")
	})
}

// The streak tests use Generate only; a continuation's idle timeout is one
// a single tenant can provoke too.
func TestOneTenantsStalledContinuationsDoNotOpenTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback", fault: stall, after: 5}
		cfg := config()
		cfg.Health.IsolateTenantFailures = true
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}}, Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		for range cfg.Health.FailureThreshold {
			req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
			require.True(t, g.Resolve("chat", &req))
			_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
			require.ErrorIs(t, err, router.ErrAfterFirstByte)
		}
		require.Len(t, fallback.calls(), cfg.Health.FailureThreshold)
		state, _ := g.TargetState(router.Target{Provider: "fallback"})
		assert.Equal(t, breaker.Closed, state, "one tenant's idle timeouts alone never open a breaker")
	})
}

// Every existing continuation ends with a finish_reason or an error; one
// that ends clean without a finish has not finished the answer.
func TestAContinuationThatEndsWithoutAFinishIsNotAWholeAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &scripted{name: "primary", words: []string{"a", " b"}, failAfter: errors.New("connection reset by peer")}
		fallback := &scripted{name: "fallback", cont: []string{" c"}} // no finish_reason, no error
		g := scriptedRouter(t, primary, fallback)
		c, _, err := stream(t, g)
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "the rest of the answer never came: the stream is cut, not ended clean")
		assert.ErrorIs(t, err, router.ErrUnfinished)
		assert.Equal(t, "a b c", c.text)
	})
}

// TestARunCountsAgainAfterTheBreakerRecovers recovers through a user's
// half-open probe; a background probe's recovery must forget the run too.
type bankProbedPrompt struct {
	byPrompt
	up atomic.Bool
}

func (p *bankProbedPrompt) Probe(context.Context, string) error {
	if p.up.Load() {
		return nil
	}
	return errors.New("still down")
}

func TestARunIsForgottenAfterABackgroundProbeRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Retry.MaxAttempts, cfg.Health.FailureThreshold, cfg.Health.IsolateTenantFailures = 1, 3, true
		cfg.Health.RecoveryTimeout, cfg.Health.ProbeInterval = time.Hour, time.Second
		p := &bankProbedPrompt{}
		g := newGateway(t, cfg, p)
		for _, tenant := range []string{"acme", "bob", "acme", "bob"} {
			require.Error(t, send(g, tenant, "slow"))
		}
		require.Equal(t, "open", state(g, "up"))
		p.up.Store(true)
		time.Sleep(2 * time.Second) // the probe after ProbeInterval succeeds
		require.Equal(t, "closed", state(g, "up"), "the background probe closed it")
		for range 5 {
			require.Error(t, send(g, "acme", "slow"))
		}
		assert.Equal(t, "closed", state(g, "up"), "the run before the recovery is forgotten: this one is acme's alone")
	})
}

// FINDING (fails on the original, 99a2d6e): a stream that breaks after its
// first byte and cannot be continued withdraws a retry-budget token for a
// fail-over that never happens. run.attempt asks plan.decide, which returns
// failover{err} for the error although it is timeouts.Permanent
// (ErrAfterFirstByte), and then run.budget withdraws for the next target.
// Config.RetryBudget / run.budget: "An attempt the loop will not make ...
// withdraws nothing". With an empty budget the caller's error also gains
// ErrRetryBudgetExhausted.
func TestAStreamCutAfterItsFirstByteSpendsNoRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &ledger{left: 5}
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		cfg := config()
		cfg.RetryBudget = budget
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		assert.Empty(t, fallback.calls(), "no fail-over after the first byte")
		assert.Equal(t, []string{"deposit primary"}, budget.history(), "no attempt followed: nothing withdrawn")
	})
}
