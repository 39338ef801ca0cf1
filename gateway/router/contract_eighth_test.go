package router_test

// Tests for the bugs of an outsider's eighth bank aimed at the tests' gaps
// (the Observer, spans, admission and the route table), and for two holes
// its reader found in the reference (a broken attempt's duration; a
// continuation's span): each passes on the reference and fails with its bug.

import (
	"context"
	"fmt"
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
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// 01. Observer.Rejected: "a request was refused before any provider
// call"; RejectClosed: "the router is shutting down"; Router.Close: "new
// and queued ones get ErrClosed". A request still queued for a slot when
// Close begins is refused as closed, and observed so, once.
func TestARequestQueuedWhenTheRouterClosesIsObservedAsClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := small(rec)
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, time.Minute
		gate := make(chan struct{})
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			<-gate
			return answer("", "done"), nil
		}})
		running := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); running <- err }()
		synctest.Wait() // a holds the only slot
		queued := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("b")); queued <- err }()
		synctest.Wait() // b waits for it
		closed := make(chan error, 1)
		go func() { closed <- g.Close(t.Context()) }()
		require.ErrorIs(t, <-queued, router.ErrClosed)
		close(gate)
		require.NoError(t, <-running)
		require.NoError(t, <-closed)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, []string{"closed"}, rec.rejected, "the queued request's refusal is observed, as closed")
	})
}

// 02. Slots.MaxQueueWait: "0: refuse at once when full"; RejectOverloaded:
// "no slot within MaxQueueWait".
func TestAZeroQueueWaitRefusesAtOnceWhenEverySlotIsTaken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		cfg := small(rec) // TotalTimeout 10 s
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, 0
		gate := make(chan struct{})
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			<-gate
			return answer("", "done"), nil
		}})
		defer closeGateway(t, g)
		running := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); running <- err }()
		synctest.Wait() // a holds the only slot
		defer time.AfterFunc(3*time.Second, func() { close(gate) }).Stop()
		start := time.Now()
		_, err := g.Generate(t.Context(), request("b"))
		require.ErrorIs(t, err, router.ErrOverloaded, "the only slot is taken and queueing is off")
		assert.Zero(t, time.Since(start), "refused at once, not once a slot frees up")
		require.NoError(t, <-running)
		rec.mu.Lock()
		defer rec.mu.Unlock()
		assert.Equal(t, []string{"overloaded"}, rec.rejected)
	})
}

// b8Traced returns a tracer provider recording into exp, and the context
// of a span named "caller" (the HTTP layer's), with that span.
func b8Traced(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider, context.Context, trace.Span) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(t.Context(), "caller")
	return exp, tp, ctx, span
}

// b8Children is the names of the ended spans whose parent is parent, in
// the order they ended.
func b8Children(exp *tracetest.InMemoryExporter, parent trace.SpanContext) []string {
	var names []string
	for _, s := range exp.GetSpans() {
		if s.Parent.SpanID() == parent.SpanID() && s.Parent.TraceID() == parent.TraceID() {
			names = append(names, s.Name)
		}
	}
	return names
}

// 03. Config.Tracer: "records a span for each request's admission and
// each attempt, as children of the span in the request's context" — the
// admission of a request refused for want of a slot is one.
func TestARefusedRequestsAdmissionIsRecordedAsASpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp, tp, ctx, span := b8Traced(t)
		cfg := small(nil)
		cfg.Tracer = tp
		cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, time.Second
		gate := make(chan struct{})
		g := newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
			<-gate
			return answer("", "done"), nil
		}})
		running := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); running <- err }()
		synctest.Wait()
		_, err := g.Generate(ctx, request("b"))
		require.ErrorIs(t, err, router.ErrOverloaded)
		span.End()
		close(gate)
		require.NoError(t, <-running)
		closeGateway(t, g)
		assert.Equal(t, []string{"gateway.admission"}, b8Children(exp, span.SpanContext()),
			"b was refused at its admission: that admission is recorded, under b's span")
	})
}

// 04. Config.Tracer: "records a span for each request's admission and
// each attempt, as children of the span in the request's context" — the
// attempts are the request's children, siblings of its admission, not
// children of the admission span.
func TestAttemptSpansAreChildrenOfTheRequestsSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp, tp, ctx, span := b8Traced(t)
		cfg := small(nil)
		cfg.Tracer = tp
		g := newRouter(t, cfg, failing("alpha"), healthy("beta"))
		defer closeGateway(t, g)
		resp, err := g.Generate(ctx, request("acme"))
		require.NoError(t, err)
		require.Equal(t, 2, resp.Attempts)
		span.End()
		assert.Equal(t, []string{"gateway.admission", "gateway.attempt", "gateway.attempt"}, b8Children(exp, span.SpanContext()),
			"the admission and both attempts, each a child of the caller's span")
	})
}

// b8Took records, per provider, the took of each Observer.Attempt, and
// each Observer.Late.
type b8Took struct {
	router.NopObserver
	mu       sync.Mutex
	attempts []string
	late     []string
}

func (o *b8Took) Attempt(t router.Target, n int, took time.Duration, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts = append(o.attempts, fmt.Sprintf("%s#%d:%s", t.Provider, n, took))
}

func (o *b8Took) Late(took time.Duration, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.late = append(o.late, fmt.Sprintf("%s:%v", took, err))
}

// 05. Observer.Attempt: "one provider call ended (err nil on success)",
// with what that call took (gateway_provider_attempt_duration_seconds) —
// its own time, not the request's so far.
func TestEachAttemptIsObservedWithItsOwnDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alpha := &fake{name: "alpha", answer: func(context.Context, int) (llm.Completion, error) {
			time.Sleep(100 * time.Millisecond)
			return llm.Completion{}, errUpstream
		}}
		beta := &fake{name: "beta", answer: func(context.Context, int) (llm.Completion, error) {
			time.Sleep(200 * time.Millisecond)
			return answer("", "ok"), nil
		}}
		obs := &b8Took{}
		g := newRouter(t, small(obs), alpha, beta)
		defer closeGateway(t, g)
		_, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		obs.mu.Lock()
		defer obs.mu.Unlock()
		assert.Equal(t, []string{"alpha#1:100ms", "beta#2:200ms"}, obs.attempts, "each call's own duration")
	})
}

// 06. Observer.Late: "a provider call finished after its attempt had given
// up on it ...; took is the call's whole duration."
func TestALateCallIsObservedWithItsWholeDuration(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &b8Took{}
		cfg := small(obs)
		cfg.Retry.AttemptTimeout = time.Second
		gate := make(chan struct{})
		defer time.AfterFunc(5*time.Second, func() { close(gate) }).Stop()
		g := newRouter(t, cfg, hanging("deaf", gate), healthy("beta"))
		_, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err, "beta answers after deaf's attempt is given up at 1 s")
		closeGateway(t, g) // waits for the abandoned call, which returns at 5 s
		obs.mu.Lock()
		defer obs.mu.Unlock()
		assert.Equal(t, []string{"5s:<nil>"}, obs.late, "the call ran 5 s in all, and answered")
	})
}

// 07. Observer.BreakerChanged: "a target's breaker moved from one state to
// another". A background probe that closes a breaker still open (its
// RecoveryTimeout an hour away, no half-open probe taken) moves it from
// open to closed: the transitions heard chain, closed → open → closed.
func TestABreakerABackgroundProbeClosedIsObservedLeavingOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config() // FailureThreshold 2
		cfg.Health.RecoveryTimeout = time.Hour
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = time.Second, time.Second
		obs := &grTransitions{model: "primary"}
		cfg.Observer = obs
		g, _, down := outage(t, cfg)
		for range 2 { // open at 0 s
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		require.Equal(t, "open", targetState(g, "up", "primary"))
		down.Store(false)
		time.Sleep(1500 * time.Millisecond) // the probe at 1 s succeeds
		require.Equal(t, "closed", targetState(g, "up", "primary"))
		assert.Equal(t, []string{"closed→open", "open→closed"}, obs.list(), "it never was half-open")
	})
}

// 08. ContinueFailed: "continuations were tried and none finished the
// answer"; ContinueNoTarget: "the route has no healthy target after the
// broken one that declared it continues a prefill". One continuation was
// tried and failed; the one after it is open: the stream's continuation
// failed — there was a healthy target, and it was tried.
func TestAContinuationTriedAndFailedIsFailedWhateverTheTargetsAfterIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		second := &writer{name: "second", refuse: true}
		third := &writer{name: "third"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"second", "third"}, primary, second, third)
		for range config().Health.FailureThreshold { // third's whole answers fail: its breaker opens
			_, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Provider: "third", Chat: chatapi.NewRequest("hi", false)})
			require.Error(t, err)
		}
		require.Equal(t, "open", state(g, "third"))
		_, _, err := relay(t, g, router.Request{})
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		assert.Len(t, second.calls(), 1, "the second was asked, and refused the prefill")
		assert.Empty(t, third.calls())
		assert.Equal(t, []string{"primary:failed"}, obs.list())
	})
}

// 09. Route.Continue: "the targets whose upstream continues an assistant
// prefill ... Each must also be in Targets."; ErrInvalidConfig: "New was
// given settings that cannot work".
func TestARouteThatContinuesOnATargetOutsideItIsRefused(t *testing.T) {
	for _, c := range []struct {
		name      string
		continues router.Target
	}{
		{"another provider", router.Target{Provider: "beta"}},
		{"another model of its provider", router.Target{Provider: "alpha", Model: "other"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := config()
			cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "alpha"}}, Continue: []router.Target{c.continues}}}
			g, err := router.New(cfg, &writer{name: "alpha"}, &writer{name: "beta"})
			assert.ErrorIs(t, err, router.ErrInvalidConfig)
			assert.Nil(t, g)
		})
	}
}

// 10. Router.Routes: "lists the route table, in the order it was
// configured".
func TestRoutesAreListedInTheOrderConfigured(t *testing.T) {
	cfg := config()
	for i := range 8 {
		cfg.Routes = append(cfg.Routes, router.Route{Name: fmt.Sprintf("r%d", i), Targets: []router.Target{{Provider: "up", Model: fmt.Sprintf("m%d", i)}}})
	}
	g := newGateway(t, cfg, newUpstream("up"))
	for range 20 {
		assert.Equal(t, cfg.Routes, g.Routes())
	}
}

// b8fTraced returns a tracer provider recording into exp, and the context
// of a span named "caller" (the HTTP layer's), with that span.
func b8fTraced(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider, context.Context, trace.Span) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(t.Context(), "caller")
	return exp, tp, ctx, span
}

// b8fChildren is the names of the ended spans whose parent is parent.
func b8fChildren(exp *tracetest.InMemoryExporter, parent trace.SpanContext) []string {
	var names []string
	for _, s := range exp.GetSpans() {
		if s.Parent.SpanID() == parent.SpanID() && s.Parent.TraceID() == parent.TraceID() {
			names = append(names, s.Name)
		}
	}
	return names
}

// b8Durations records Observer.Attempt's took per target.
type b8Durations struct {
	router.NopObserver
	mu  sync.Mutex
	got []string
}

func (o *b8Durations) Attempt(t router.Target, n int, took time.Duration, _ error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, fmt.Sprintf("%s#%d:%s", t.Provider, n, took))
}

// F1. Observer.Attempt: "one provider call ended (err nil on success)",
// with what it took. The primary's call broke after its tenth word, at
// 100 ms; the continuation on the fallback is a call of its own (observed
// on its own, as attempt 1 of the continuations). The primary's call is
// observed with the primary's time — not with the fallback's 500 ms too.
func TestABrokenAttemptIsObservedWithItsOwnDurationNotItsContinuations(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10} // ten words, 10 ms apart, then a reset
		fallback := &writer{name: "fallback"}                      // the other fifty, 10 ms apart
		obs := &b8Durations{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		text, _, err := relay(t, g, router.Request{})
		require.NoError(t, err)
		require.Equal(t, strings.Join(sixty, ""), text)
		obs.mu.Lock()
		defer obs.mu.Unlock()
		assert.Equal(t, []string{"fallback#1:500ms", "primary#1:100ms"}, obs.got,
			"each call's own duration: the primary's 100 ms are not 600 ms")
	})
}

// F2. Config.Tracer: "records a span for each request's admission and each
// attempt, as children of the span in the request's context" — a
// continuation's call, an attempt the Observer counts, included.
func TestAContinuationsSpanIsAChildOfTheRequestsSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp, tp, ctx, span := b8fTraced(t)
		cfg := config()
		cfg.Tracer = tp
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, &writer{name: "primary", fault: cut, after: 10}, &writer{name: "fallback"})
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		_, err := g.Stream(ctx, req, limits, func(c llm.Chunk) error { return nil })
		require.NoError(t, err)
		span.End()
		assert.Equal(t, []string{"gateway.admission", "gateway.attempt", "gateway.attempt"}, b8fChildren(exp, span.SpanContext()),
			"the admission, the broken attempt and its continuation: each a child of the caller's span")
	})
}
