package router_test

// Tests for the bugs of an outsider's eighth bank aimed at the providers'
// side of the tests' gaps (the bridge, Close, panics, late calls), and for
// two holes its reader found in the background probe (a probe that ignores
// its context held Close past its ctx; one that panicked took the process
// down): each passes on the reference and fails with its bug.

import (
	"context"
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
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// g8aSlowFail honours its context and fails with a 503 after `after`.
type g8aSlowFail struct {
	name  string
	after time.Duration
}

func (p g8aSlowFail) Name() string         { return p.name }
func (p g8aSlowFail) HonoursContext() bool { return true }
func (p g8aSlowFail) Generate(ctx context.Context, _ llm.Request) (llm.Completion, error) {
	select {
	case <-time.After(p.after):
		return status(http.StatusServiceUnavailable, "", 0)(ctx)
	case <-ctx.Done():
		return llm.Completion{}, ctx.Err()
	}
}

// 01. Router.Close: "Close stops admitting requests (new and queued ones
// get ErrClosed) and waits for those in flight". A request in flight when
// Close began is served as it would have been: its fail-over to a provider
// that ignores its context (a bridge call) still runs.
func TestAnInFlightRequestStillFailsOverToABridgedProviderWhileClosing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		beta := healthy("beta") // no HonoursContext: called through the bridge
		g := newRouter(t, small(nil), g8aSlowFail{name: "alpha", after: time.Second}, beta)
		start := time.Now()
		done := make(chan error, 1)
		var resp router.Response
		go func() {
			var err error
			resp, err = g.Generate(t.Context(), request("acme"))
			done <- err
		}()
		time.Sleep(500 * time.Millisecond) // alpha's attempt is under way
		closed := make(chan error, 1)
		go func() { closed <- g.Close(t.Context()) }()
		require.NoError(t, <-done, "the request was in flight when Close began: alpha's 503 falls over to beta")
		assert.Equal(t, "beta", resp.Provider)
		assert.Equal(t, 2, resp.Attempts)
		assert.Equal(t, int32(1), beta.calls.Load())
		assert.NoError(t, <-closed)
		assert.Equal(t, time.Second, time.Since(start))
	})
}

// g8aDeafStream streams without promising to honour its context, though it
// does watch it: it waits for its context to end, or a minute, and keeps
// when it returned.
type g8aDeafStream struct {
	start time.Time
	mu    sync.Mutex
	ended []time.Duration
}

func (*g8aDeafStream) Name() string { return "deaf" }
func (*g8aDeafStream) Generate(context.Context, llm.Request) (llm.Completion, error) {
	panic("the router asked a streaming provider for a whole answer")
}

func (d *g8aDeafStream) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	defer func() {
		d.mu.Lock()
		d.ended = append(d.ended, time.Since(d.start))
		d.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return llm.Completion{}, ctx.Err()
	case <-time.After(time.Minute):
	}
	if err := emit(chunk("too late")); err != nil {
		return llm.Completion{}, err
	}
	return llm.Completion{Model: "deaf-1"}, nil
}

func (d *g8aDeafStream) returned() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.ended...)
}

// 02. run.call / streamer.once: a provider that does not honour its context
// goes through the bridge, and "Either way the provider gets the attempt's
// own context: when the attempt ends — its timeout, or the caller gone —
// the work is told to stop too." A stream cut at its first-token limit
// tells its bridged call to stop then, not a minute later.
func TestABridgedStreamIsToldToStopWhenItsAttemptIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &g8aDeafStream{start: time.Now()}
		cfg := config()
		cfg.Retry.MaxAttempts = 1
		g := newGateway(t, cfg, d)
		_, err := g.Stream(t.Context(), ask(nil), router.StreamLimits{FirstToken: 2 * time.Second, Idle: time.Second},
			func(llm.Chunk) error { return nil })
		require.ErrorIs(t, err, router.ErrFirstTokenTimeout)
		synctest.Wait()
		assert.Equal(t, []time.Duration{2 * time.Second}, d.returned(),
			"the call was told to stop when its attempt was cut at the 2 s first-token limit")
	})
}

// 03. Config.MaxProviderCalls: "0 means 2 × Slots.MaxConcurrent" — with two
// slots, four permits: three abandoned calls of a provider that ignores
// its context leave one for the next request.
func TestMaxProviderCallsZeroIsTwiceTheSlotsWhateverTheSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Slots.MaxConcurrent = 2 // MaxProviderCalls 0: four bridge permits
		cfg.Retry.MaxAttempts, cfg.Retry.AttemptTimeout = 1, time.Second
		cfg.Health.FailureThreshold = 100 // the breaker stays out of it
		gate := make(chan struct{})
		time.AfterFunc(time.Minute, func() { close(gate) }) // the abandoned calls return in a minute; Close waits for them
		deaf := &fake{name: "deaf", answer: func(_ context.Context, call int) (llm.Completion, error) {
			if call <= 3 {
				<-gate // ignores its context
			}
			return answer("", "now"), nil
		}}
		g := newRouter(t, cfg, deaf)
		defer closeGateway(t, g)
		for i := range 3 {
			_, err := g.Generate(t.Context(), request("acme"))
			require.ErrorIs(t, err, context.DeadlineExceeded, "call %d is abandoned at its attempt timeout, keeping its permit", i+1)
		}
		start := time.Now()
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err, "the fourth of the four permits is free")
		assert.Equal(t, "now", text(t, resp))
		assert.Zero(t, time.Since(start), "at once, not after waiting for a permit")
	})
}

// g8aDeafPanic does not promise to honour its context, and panics.
type g8aDeafPanic struct{}

func (g8aDeafPanic) Name() string { return "deafpanic" }
func (g8aDeafPanic) Generate(context.Context, llm.Request) (llm.Completion, error) {
	panic("provider bug")
}

// 04. breakerVerdict: "A provider that panics has a bug, and the request
// that found it fails — but one caller's crafted input must not open the
// breaker for every tenant, so it does not count either way"; llm.Generate
// turns the panic into an error wrapping llm.ErrPanic. A provider called
// through the bridge (it does not honour its context) included.
func TestAPanicOfAProviderThatIgnoresItsContextOpensNoBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.FailureThreshold = 1
		g := newGateway(t, cfg, g8aDeafPanic{})
		for range 3 {
			_, err := g.Generate(t.Context(), router.Request{Tenant: "attacker", Chat: chatapi.NewRequest("crafted", false)})
			require.ErrorIs(t, err, llm.ErrPanic, "a panic becomes an error wrapping llm.ErrPanic")
		}
		assert.Equal(t, "closed", state(g, "deafpanic"), "a provider's panic counts for no breaker, bridged or not")
	})
}

type g8aByPrompt struct{}

func (g8aByPrompt) Name() string         { return "up" }
func (g8aByPrompt) HonoursContext() bool { return true }
func (g8aByPrompt) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	switch text := req.Chat.Text(); {
	case strings.Contains(text, "slow"):
		<-ctx.Done()
		return llm.Completion{}, ctx.Err()
	case strings.Contains(text, "panic"):
		panic("provider bug")
	}
	return answer("", "ok"), nil
}

// 07. Health.IsolateTenantFailures: provoked failures count "only once two
// tenants have had them since the target's last success"; breakerVerdict:
// a panic "does not count either way" (errNeutral: "it neither counts as a
// failure nor resets the count"). A panic is no success: bob's timeout
// before it and acme's after it are one run of two tenants.
func TestAPanicDoesNotEndARunOfProvokedFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Retry.MaxAttempts, cfg.Health.FailureThreshold, cfg.Health.IsolateTenantFailures = 1, 3, true
		g := newGateway(t, cfg, g8aByPrompt{})
		try := func(tenant, prompt string) error {
			_, err := g.Generate(t.Context(), router.Request{Tenant: tenant, Chat: chatapi.NewRequest(prompt, false)})
			return err
		}
		require.ErrorIs(t, try("bob", "slow"), context.DeadlineExceeded)
		require.ErrorIs(t, try("bob", "panic"), llm.ErrPanic)
		for range 3 {
			require.ErrorIs(t, try("acme", "slow"), context.DeadlineExceeded)
		}
		assert.Equal(t, "open", state(g, "up"), "bob and acme both timed out since the last success: acme's three count")
	})
}

// 08. Router.Close "waits for those in flight, or for ctx" — whoever else
// is closing it too: two Closes at once both return when the request in
// flight does.
func TestTwoClosesAtOnceBothWaitForTheRequestInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.AttemptTimeout = 10 * time.Second
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			time.Sleep(3 * time.Second)
			return answer("", "done"), nil
		}})
		start := time.Now()
		done := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); done <- err }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		type ended struct {
			err  error
			took time.Duration
		}
		closes := make(chan ended, 2)
		for range 2 {
			go func() { err := g.Close(ctx); closes <- ended{err, time.Since(start)} }()
		}
		require.NoError(t, <-done)
		for range 2 {
			c := <-closes
			assert.NoError(t, c.err)
			assert.Equal(t, 3*time.Second, c.took, "each Close returns when the request in flight ends")
		}
	})
}

// 09. probe: the background probe starts "unless ... the router is
// closing"; Router.Close stops admitting and waits for the requests in
// flight. A breaker a request in flight opens while Close waits for it is
// not probed.
func TestNoBackgroundProbeStartsWhileCloseDrains(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.FailureThreshold, cfg.Health.RecoveryTimeout = 1, time.Hour
		cfg.Health.ProbeInterval = time.Second
		cfg.Retry.AttemptTimeout = 20 * time.Second
		up := &probed{upstream: newUpstream("up"), down: &atomic.Bool{}}
		up.down.Store(true)
		up.script("primary", func(ctx context.Context) (llm.Completion, error) {
			time.Sleep(time.Second)
			return status(http.StatusServiceUnavailable, "", 0)(ctx)
		})
		up.script("secondary", func(context.Context) (llm.Completion, error) {
			time.Sleep(10 * time.Second)
			return answer("secondary", "ok"), nil
		})
		g, err := router.New(cfg, up)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), ask(route("primary", "secondary"))); done <- err }()
		time.Sleep(500 * time.Millisecond)
		closed := make(chan error, 1)
		go func() { closed <- g.Close(t.Context()) }()
		require.NoError(t, <-done, "the secondary answers at 11 s")
		require.NoError(t, <-closed)
		assert.Equal(t, "open", targetState(g, "up", "primary"), "the primary's 503 at 1 s opened its breaker")
		assert.Empty(t, up.probeTimes(), "the router was closing: no probe started")
	})
}

// g8aNameless streams "hi" and ends, naming no model; it has no default.
type g8aNameless struct{}

func (g8aNameless) Name() string         { return "nameless" }
func (g8aNameless) HonoursContext() bool { return true }
func (g8aNameless) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return answer("", "hi"), nil
}

func (g8aNameless) Stream(_ context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	if err := emit(chunk("hi")); err != nil {
		return llm.Completion{}, err
	}
	return llm.Completion{}, nil
}

// 10. Response.Model: "the upstream model that answered"; with none said,
// the model the target asked for (TestResponseModelIsWhatTheUpstreamSaid);
// Router.Stream is "Generate for streamed answers: the same admission and
// retries". A stream whose upstream names no model answers with its
// target's, as Generate does.
func TestAStreamWhoseUpstreamNamesNoModelAnswersWithItsTargetsModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGateway(t, config(), g8aNameless{})
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", true),
			Route: &router.Route{Targets: []router.Target{{Provider: "nameless", Model: "m1"}}}}
		resp, err := g.Generate(t.Context(), req)
		require.NoError(t, err)
		assert.Equal(t, "m1", resp.Model, "Generate: the target's model")
		resp, err = g.Stream(t.Context(), req, limits, func(llm.Chunk) error { return nil })
		require.NoError(t, err)
		assert.Equal(t, "nameless", resp.Provider)
		assert.Equal(t, "m1", resp.Model, "Stream: the target's model too")
	})
}

// rfDeafProbe is an upstream whose probe ignores its context: it answers
// only when gate closes.
type rfDeafProbe struct {
	*upstream
	gate   chan struct{}
	probes atomic.Int32
}

func (p *rfDeafProbe) Probe(context.Context, string) error {
	p.probes.Add(1)
	<-p.gate
	return nil
}

// Router.Close "waits for those in flight, or for ctx" (and Health: "A
// probe has Retry.AttemptTimeout"). With nothing in flight and a probe of
// a provider that ignores its context hanging, Close(ctx) must come back
// when ctx ends — with an error if it leaves the probe running, as it does
// for an abandoned bridge call (TestACloseThatGivesUpOnAnAbandonedCallReturnsAnError)
// — not a minute later when the probe happens to return. The reference's
// stopProbes waits on a WaitGroup unconditionally.
func TestACloseIsNotHeldPastItsContextByAProbeThatIgnoresItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // FailureThreshold 2, AttemptTimeout 2 s
		cfg.Health.RecoveryTimeout = time.Hour
		cfg.Health.ProbeInterval = time.Second
		up := &rfDeafProbe{upstream: newUpstream("up"), gate: make(chan struct{})}
		time.AfterFunc(time.Minute, func() { close(up.gate) }) // the probe returns in a minute at the latest
		up.script("primary", func(ctx context.Context) (llm.Completion, error) {
			return status(http.StatusServiceUnavailable, "", 0)(ctx)
		})
		g, err := router.New(cfg, up)
		require.NoError(t, err)
		for range 2 { // open at 0 s: the probe at 1 s hangs
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(2 * time.Second)
		require.EqualValues(t, 1, up.probes.Load(), "the probe is out, and hangs")
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start := time.Now()
		_ = g.Close(ctx)
		assert.LessOrEqual(t, time.Since(start), time.Second, "Close waits for what is in flight, or for its 1 s ctx: not for the hung probe")
		time.Sleep(time.Minute) // let the probe return inside the bubble
	})
}

// rfPanicProbe is an upstream whose probe panics.
type rfPanicProbe struct{ *upstream }

func (rfPanicProbe) Probe(context.Context, string) error { panic("provider bug in Probe") }

// breakerVerdict: "A provider that panics has a bug, and the request that
// found it fails"; llm.Generate: "a provider's bug fails the request that
// found it, not the process" — a panic in a background probe too: the
// probe has failed, and the gateway serves on.
func TestAProbeThatPanicsDoesNotCrashTheProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.RecoveryTimeout = time.Hour
		cfg.Health.ProbeInterval = time.Second
		obs := &probeRecorder{}
		cfg.Observer = obs
		up := rfPanicProbe{newUpstream("up")}
		up.script("primary", status(http.StatusServiceUnavailable, "", 0))
		g := newGateway(t, cfg, up)
		for range 2 { // open at 0 s: the probe at 1 s panics
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(3 * time.Second)
		resp, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
		require.NoError(t, err, "the gateway still serves")
		assert.Equal(t, "secondary", resp.Model)
		assert.Positive(t, obs.failed.Load(), "the panicking probe is a failed probe")
		assert.Zero(t, obs.ok.Load())
	})
}
