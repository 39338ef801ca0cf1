package router_test

// Tests for the bugs of a fifth outsider's bank aimed at the tests' gaps:
// each passes on the reference and fails with its own bug.

import (
	"context"
	"fmt"
	"net/http"
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

// 01. Config.MaxProviderCalls: "0 means 2 × Slots.MaxConcurrent". With one
// slot, one abandoned call of a provider that ignores its context leaves
// a second bridge permit for the next request.
func TestMaxProviderCallsZeroIsTwiceTheSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Slots.MaxConcurrent = 1 // MaxProviderCalls 0: two bridge permits
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
		require.ErrorIs(t, err, context.DeadlineExceeded, "the first call is abandoned at its attempt timeout, keeping one permit")
		start := time.Now()
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err, "the second of the two permits is free")
		assert.Equal(t, "now", text(t, resp))
		assert.Zero(t, time.Since(start), "at once, not after waiting for a permit")
	})
}

// 02. Observer.Rejected: "a request was refused before any provider call".
// A caller whose own deadline ends while it is queued is refused too, and
// observed (the reference counts it as cancelled, like a caller who left).
func TestACallersDeadlineWhileQueuedIsAnObservedRejection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := small(rec)
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, time.Minute
		gate := make(chan struct{})
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			<-gate
			return answer("", "done"), nil
		}})
		defer closeGateway(t, g)
		running := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); running <- err }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := g.Generate(ctx, request("b"))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		close(gate)
		require.NoError(t, <-running)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, []string{"cancelled"}, rec.rejected, "the refusal is observed once")
	})
}

// 03. continue.go: a broken stream is never continued "when the request
// ... asked for n > 1 answers" — even when what the caller read so far is
// the first choice's text alone.
func TestAStreamOfTwoAnswersIsNeverContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &raws{name: "primary", events: []string{
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`}, end: resets}
		cont := &raws{name: "cont", events: []string{
			`{"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"stop"}]}`}, end: finishes}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "cont"}}, Continue: []router.Target{{Provider: "cont"}}}}
		g := newGateway(t, cfg, primary, cont)
		chat, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,"n":2,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat}
		require.True(t, g.Resolve("chat", &req))
		_, err = g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "two answers were asked for: the cut stream ends with an error")
		assert.Zero(t, cont.calls.Load(), "no continuation was asked for")
	})
}

// 04. probe: "unless one runs already"; probe.go: the upstream is probed
// "first after ProbeInterval and then at doubling intervals". A user's
// half-open probe that fails reopens the breaker while the background
// probe runs: it must not start a second one.
func TestAFailedHalfOpenProbeStartsNoSecondBackgroundProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // FailureThreshold 2
		cfg.Health.RecoveryTimeout = time.Second
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = 10*time.Second, 10*time.Second
		g, up, _ := outage(t, cfg) // the primary fails its requests and its probes
		for range 2 {              // open at 0 s: a background probe is due at 10 s
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(1500 * time.Millisecond) // half-open
		resp, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
		require.NoError(t, err)
		require.Equal(t, "secondary", resp.Model, "the half-open probe failed: open again")
		require.Equal(t, "open", targetState(g, "up", "primary"))
		time.Sleep(12*time.Second - 1500*time.Millisecond)
		assert.Equal(t, []time.Duration{10 * time.Second}, up.probeTimes(), "one background probe, every ProbeInterval")
	})
}

// 05. run.prior: what failed attempts were charged, "the caller is told it
// with the answer's own usage, so it reads what the tenant pays" — for an
// answer a continuation finished too.
func TestAContinuedStreamTellsWhatAnAttemptBeforeItWasCharged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("a", func(ctx context.Context) (llm.Completion, error) {
			c, err := status(http.StatusServiceUnavailable, "", 0)(ctx)
			c.Charged = &llm.Usage{PromptTokens: 10, TotalTokens: 10}
			return c, err
		})
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		g := newGateway(t, config(), up, primary, fallback)
		chat, err := chatapi.Parse([]byte(`{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat, Route: &router.Route{
			Targets:  []router.Target{{Provider: "up", Model: "a"}, {Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		var usages []chatapi.Usage
		var text strings.Builder
		_, err = g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			p, err := chatapi.ReadPiece(c.Raw)
			require.NoError(t, err)
			text.WriteString(p.Text)
			if p.Usage != nil {
				usages = append(usages, *p.Usage)
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), text.String())
		assert.Equal(t, []chatapi.Usage{{PromptTokens: 20, CompletionTokens: 60, TotalTokens: 80}}, usages,
			"the 10 tokens charged at a, the 10 the cut primary sent, and the continuation's 10+50")
	})
}

// 06. architecture.md: "past 64 of them or 64 KiB the attempt fails with
// router.ErrNothingSaid and falls back" — 64 KiB held in all, not in one
// chunk.
func TestChunksThatSayNothingAreCutOffAtSixtyFourKiBInAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pad := strings.Repeat("x", 30<<10)
		annotation := `{"id":"a","object":"chat.completion.chunk","choices":[],"prompt_filter_results":[{"prompt_index":0,"pad":"` + pad + `"}]}`
		hello := `{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"primary"},"finish_reason":"stop"}]}`
		other := `{"id":"f","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"fallback"},"finish_reason":"stop"}]}`
		primary := &raws{name: "primary", events: []string{annotation, annotation, annotation, hello}, end: finishes} // 90 KiB held
		fallback := &raws{name: "fallback", events: []string{other}, end: finishes}
		g := rawTargets(t, primary, fallback)
		got, err := rawStream(t, g)
		require.NoError(t, err)
		assert.Equal(t, []string{other}, got, "three chunks of 30 KiB that say nothing: past 64 KiB, the fallback answers")
	})
}

// 07. Observer.RetryRefused: "the retry budget refused an attempt to
// provider" — a continuation the budget refused included.
func TestABudgetRefusedContinuationIsObserved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &ledger{}
		obs := &refusals{by: map[string]int{}}
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback"}
		cfg := config()
		cfg.RetryBudget, cfg.Observer = budget, obs
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}}, Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		require.Equal(t, []string{"deposit primary", "refused fallback"}, budget.history())
		obs.mu.Lock()
		defer obs.mu.Unlock()
		assert.Equal(t, map[string]int{"fallback": 1}, obs.by, "gateway_retry_budget_exhausted_total counts the refused continuation")
	})
}

// 08. breakerVerdict: a 4xx means "the upstream answered, and refused the
// request: it is up" — a continuation refused with a 400 does not count
// against its target's breaker, however often it happens.
func TestRefusedContinuationsDoNotOpenTheirTargetsBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		fallback := &writer{name: "fallback", refuse: true}
		g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
		for range config().Health.FailureThreshold {
			_, _, err := relay(t, g, router.Request{})
			require.ErrorIs(t, err, router.ErrAfterFirstByte)
		}
		require.Len(t, fallback.calls(), config().Health.FailureThreshold)
		state, _ := g.TargetState(router.Target{Provider: "fallback"})
		assert.Equal(t, breaker.Closed, state, "two refusals of a prefill: the fallback is up")
	})
}

// 09. ErrNoHealthyProvider: "the time until the first of them lets a probe
// through"; openFor: "until its probe out now is given up". The time left
// of a half-open probe counts down from when it was taken.
func TestRetryAfterCountsDownWhileTheProbeIsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		probeGate := make(chan struct{})
		calls := 0
		up.script("b", func(ctx context.Context) (llm.Completion, error) {
			calls++
			if calls == 1 {
				return status(http.StatusServiceUnavailable, "", 0)(ctx)
			}
			<-probeGate
			return answer("b", "b ok"), nil
		})
		cfg := config()
		cfg.Health.FailureThreshold, cfg.Retry.MaxAttempts = 1, 1
		cfg.Retry.AttemptTimeout = 20 * time.Second // the breaker's ProbeTimeout
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("b")))
		require.Error(t, err)
		time.Sleep(cfg.Health.RecoveryTimeout)
		probe := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask(route("b"))); probe <- err }()
		synctest.Wait()
		time.Sleep(5 * time.Second)
		_, err = g.Generate(t.Context(), ask(route("b")))
		var ra llm.RetryAfterer
		require.ErrorAs(t, err, &ra)
		assert.Equal(t, 15*time.Second, ra.RetryAfter(), "the probe went out 5 s ago; it is given up after 20 s")
		close(probeGate)
		require.NoError(t, <-probe)
	})
}

// takes is a provider that streams as its n-th writer on its n-th call.
type takes struct {
	name  string
	by    []*writer
	calls atomic.Int32
}

func (p *takes) Name() string         { return p.name }
func (p *takes) HonoursContext() bool { return true }
func (p *takes) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, fmt.Errorf("unused")
}

func (p *takes) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	n := int(p.calls.Add(1))
	return p.by[min(n, len(p.by))-1].Stream(ctx, req, emit)
}

// 10. Health.IsolateTenantFailures: provoked failures count "only once two
// tenants have had them since the target's last success" — a
// continuation's success is one.
func TestAContinuationsSuccessStartsItsTargetsRunAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stalls := func() *writer { return &writer{name: "f", fault: stall, after: 5} }
		f := &takes{name: "f", by: []*writer{stalls(), {name: "f"}, stalls(), stalls()}}
		cfg := config() // FailureThreshold 2
		cfg.Health.IsolateTenantFailures = true
		providers := []llm.Provider{f}
		for i := range 4 {
			providers = append(providers, &writer{name: fmt.Sprintf("p%d", i), fault: cut, after: 10})
		}
		g := newGateway(t, cfg, providers...)
		for i, tenant := range []string{"bob", "acme", "acme", "acme"} { // each from its own primary, none of which opens
			req := router.Request{Tenant: tenant, Chat: chatapi.NewRequest("tell me", true), Route: &router.Route{
				Targets:  []router.Target{{Provider: fmt.Sprintf("p%d", i)}, {Provider: "f"}},
				Continue: []router.Target{{Provider: "f"}}}}
			_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
			if i == 1 {
				require.NoError(t, err, "acme's first continuation on f finishes the answer")
			} else {
				require.ErrorIs(t, err, router.ErrAfterFirstByte, "request %d: f went silent", i)
			}
		}
		require.EqualValues(t, 4, f.calls.Load())
		state, _ := g.TargetState(router.Target{Provider: "f"})
		assert.Equal(t, breaker.Closed, state, "bob's stall belongs to a run f's success ended: the new run is acme's alone")
	})
}
