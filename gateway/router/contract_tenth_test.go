package router_test

// Tests for bugs an outsider aimed, after reading the tests and the stream
// vectors, at what they left open: a continued stream's upstream time, a
// continuation's span, n above the vectors' two, a continuation while the
// router closes, the admission span's unit, a continue target named by its
// default model. Each failed with the bug it was written against.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// svProv is a provider whose every call runs script.
type svProv struct {
	name, def string
	script    func(ctx context.Context, call int, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error)
	mu        sync.Mutex
	n         int
}

func (p *svProv) Name() string         { return p.name }
func (p *svProv) HonoursContext() bool { return true }
func (p *svProv) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	return p.Stream(ctx, req, func(llm.Chunk) error { return nil })
}
func (p *svProv) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	p.mu.Lock()
	p.n++
	n := p.n
	p.mu.Unlock()
	return p.script(ctx, n, req, emit)
}

// svDef is svProv naming its default model.
type svDef struct{ *svProv }

func (p svDef) DefaultModel() string { return p.def }

func svText(name, s, finish string) llm.Chunk {
	return llm.Chunk{Raw: chatapi.NewFrame(name).Chunk(chatapi.Delta{Content: &s}, finish)}
}

func svSleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errSVReset = errors.New("connection reset by peer")

// breaks: "hello " after 100 ms, then 100 ms later a reset.
func svBreaks(name string) *svProv {
	return &svProv{name: name, script: func(ctx context.Context, _ int, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
		if err := svSleep(ctx, 100*time.Millisecond); err != nil {
			return llm.Completion{}, err
		}
		if err := emit(svText(name, "hello ", "")); err != nil {
			return llm.Completion{}, err
		}
		if err := svSleep(ctx, 100*time.Millisecond); err != nil {
			return llm.Completion{}, err
		}
		return llm.Completion{}, errSVReset
	}}
}

// continues: 300 ms, then "world" and the finish.
func svContinues(name string) *svProv {
	return &svProv{name: name, script: func(ctx context.Context, _ int, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
		if err := svSleep(ctx, 300*time.Millisecond); err != nil {
			return llm.Completion{}, err
		}
		if err := emit(svText(name, "world", "stop")); err != nil {
			return llm.Completion{}, err
		}
		return llm.Completion{Model: name}, nil
	}}
}

var svLimits = router.StreamLimits{FirstToken: time.Second, Idle: time.Second}

func svStream(g *router.Router, ctx context.Context, req router.Request) (string, router.Response, error) {
	var got string
	resp, err := g.Stream(ctx, req, svLimits, func(c llm.Chunk) error {
		if p, err := llm.PieceOf(c); err == nil {
			got += p.Text
		}
		return nil
	})
	return got, resp, err
}

func svRoute(targets []router.Target, cont ...router.Target) *router.Route {
	return &router.Route{Name: "chat", Targets: targets, Continue: cont}
}

// SV01 (bug 01). Response.Upstream: "the time spent inside provider calls,
// every attempt included": 200 ms at a, then 300 ms of b's continuation.
func TestUpstreamCountsAContinuationsCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := svBreaks("a"), svContinues("b")
		g := newGateway(t, config(), a, b)
		tb := router.Target{Provider: "b"}
		text, resp, err := svStream(g, t.Context(), router.Request{Tenant: "t", Chat: chatapi.NewRequest("hi", true),
			Route: svRoute([]router.Target{{Provider: "a"}, tb}, tb)})
		require.NoError(t, err)
		assert.Equal(t, "hello world", text)
		assert.Equal(t, 500*time.Millisecond, resp.Upstream, "a's 200 ms and b's 300 ms are both provider time")
	})
}

// SV02 (bug 02). endAttemptSpan "records how the attempt ended": a
// continuation that ends without a finish failed (ErrUnfinished, as the
// Observer is told), so its span is an error.
func TestAnUnfinishedContinuationsSpanIsAnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		cfg := config()
		cfg.Tracer = tp
		a := svBreaks("a")
		b := &svProv{name: "b", script: func(ctx context.Context, _ int, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
			if err := emit(svText("b", "world", "")); err != nil {
				return llm.Completion{}, err
			}
			return llm.Completion{Model: "b"}, nil // clean end, no finish_reason
		}}
		g := newGateway(t, cfg, a, b)
		tb := router.Target{Provider: "b"}
		_, _, err := svStream(g, t.Context(), router.Request{Tenant: "t", Chat: chatapi.NewRequest("hi", true),
			Route: svRoute([]router.Target{{Provider: "a"}, tb}, tb)})
		require.ErrorIs(t, err, router.ErrAfterFirstByte)
		found := false
		for _, s := range exp.GetSpans() {
			if s.Name != "gateway.attempt" {
				continue
			}
			for _, kv := range s.Attributes {
				if kv.Value.AsString() == "b" {
					found = true
					assert.Equal(t, codes.Error, s.Status.Code, "the continuation did not finish the answer: its span failed")
				}
			}
		}
		assert.True(t, found, "b's continuation has a span")
	})
}

// SV04 (bug 04). streamer.choices: "the answers the caller asked for (n),
// each of which must finish". n = 10, eight finished, then a reset: the
// answer is not whole.
func TestTenChoicesAreWholeOnlyOnceAllTenFinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &svProv{name: "a", script: func(ctx context.Context, _ int, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
			body := `{"id":"x","object":"chat.completion.chunk","model":"a","choices":[`
			for i := range 10 {
				if i > 0 {
					body += ","
				}
				body += fmt.Sprintf(`{"index":%d,"delta":{"content":"x"}}`, i)
			}
			if err := emit(llm.Chunk{Raw: []byte(body + "]}")}); err != nil {
				return llm.Completion{}, err
			}
			for i := range 8 {
				fin := fmt.Sprintf(`{"id":"x","object":"chat.completion.chunk","model":"a","choices":[{"index":%d,"delta":{},"finish_reason":"stop"}]}`, i)
				if err := emit(llm.Chunk{Raw: []byte(fin)}); err != nil {
					return llm.Completion{}, err
				}
			}
			return llm.Completion{}, errSVReset
		}}
		g := newGateway(t, config(), p)
		chat, err := chatapi.Parse([]byte(`{"model":"a","stream":true,"n":10,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		_, _, err = svStream(g, t.Context(), router.Request{Tenant: "t", Chat: chat})
		assert.ErrorIs(t, err, router.ErrAfterFirstByte, "choices 8 and 9 never finished")
	})
}

// SV05 (bug 05). Close "waits for those in flight"; Stream: a failure
// after the first byte "is continued, where the route declares a target".
// A stream in flight when Close begins is continued as usual.
func TestAStreamInFlightWhileClosingIsStillContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		a := &svProv{name: "a", script: func(ctx context.Context, _ int, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
			if err := emit(svText("a", "hello ", "")); err != nil {
				return llm.Completion{}, err
			}
			<-release
			return llm.Completion{}, errSVReset
		}}
		b := svContinues("b")
		g, err := router.New(config(), a, b)
		require.NoError(t, err)
		tb := router.Target{Provider: "b"}
		var text string
		var serr error
		done := make(chan struct{})
		go func() {
			defer close(done)
			text, _, serr = svStream(g, context.Background(), router.Request{Tenant: "t", Chat: chatapi.NewRequest("hi", true),
				Route: svRoute([]router.Target{{Provider: "a"}, tb}, tb)})
		}()
		synctest.Wait() // a has sent "hello " and waits
		closed := make(chan error)
		go func() { closed <- g.Close(context.Background()) }()
		synctest.Wait() // Close is waiting for the stream
		close(release)
		<-done
		require.NoError(t, <-closed)
		require.NoError(t, serr, "the request in flight is served as usual")
		assert.Equal(t, "hello world", text)
	})
}

// SV06 (bug 06). endAdmissionSpan "records the request's queue wait", as
// gateway.queue_wait_us: 1.5 s is 1 500 000 µs.
func TestTheAdmissionSpanRecordsQueueWaitInMicroseconds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		cfg := config()
		cfg.Tracer = sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		cfg.Slots = router.Slots{MaxConcurrent: 1, MaxQueueWait: 5 * time.Second}
		p := &svProv{name: "a", script: func(ctx context.Context, call int, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
			if call == 1 {
				if err := svSleep(ctx, 1500*time.Millisecond); err != nil {
					return llm.Completion{}, err
				}
			}
			return llm.Completion{Model: "a", Raw: []byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)}, nil
		}}
		g := newGateway(t, cfg, p)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := g.Generate(context.Background(), router.Request{Tenant: "first", Chat: chatapi.NewRequest("hi", false)})
			assert.NoError(t, err)
		}()
		synctest.Wait()
		resp, err := g.Generate(context.Background(), router.Request{Tenant: "second", Chat: chatapi.NewRequest("hi", false)})
		require.NoError(t, err)
		wg.Wait()
		require.Equal(t, 1500*time.Millisecond, resp.QueueWait)
		var waits []int64
		for _, s := range exp.GetSpans() {
			if s.Name == "gateway.admission" {
				for _, kv := range s.Attributes {
					if string(kv.Key) == "gateway.queue_wait_us" {
						waits = append(waits, kv.Value.AsInt64())
					}
				}
			}
		}
		assert.Contains(t, waits, int64(1_500_000), "1.5 s queued, in microseconds")
	})
}

// SV10 (bug 10). Route.Continue names targets as the route does: b
// declared with "" is b, whose provider names its default model "bm".
func TestAContinueTargetNamedByItsDefaultModelStillContinues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := svBreaks("a")
		b := svDef{svContinues("b")}
		b.def = "bm"
		g := newGateway(t, config(), a, b)
		tb := router.Target{Provider: "b"}
		text, _, err := svStream(g, t.Context(), router.Request{Tenant: "t", Chat: chatapi.NewRequest("hi", true),
			Route: svRoute([]router.Target{{Provider: "a"}, tb}, tb)})
		require.NoError(t, err, "b is declared to continue")
		assert.Equal(t, "hello world", text)
	})
}
