package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
)

// BenchmarkGenerate is the whole request path — rate limit, slot, retry
// loop, breaker, bridge — around a provider that answers at once:
//
//	go test -run '^$' -bench Generate -benchmem ./gateway/router/
//
// "serial" and "parallel" call a provider through the bridge; "direct" one
// that declares it honours its context (as the HTTP and simulated
// providers do), which the router calls on the request's own goroutine.
// The subbenchmarks have the names and the config of lab 08's, so the two
// can be compared side by side (docs/performance.md).
func BenchmarkGenerate(b *testing.B) {
	cfg := benchConfig()
	ctx := context.Background()
	req := router.Request{Tenant: "bench", Chat: chatapi.NewRequest("hi", false)}
	open := func(b *testing.B, p llm.Provider) *router.Router {
		g, err := router.New(cfg, p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = g.Close(context.Background()) })
		return g
	}
	bridged := open(b, fixed{})
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bridged.Generate(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		g := open(b, honouring{})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := g.Generate(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := bridged.Generate(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// benchConfig is lab 08's benchmark config: limits out of reach, so the
// path is measured, not a refusal.
func benchConfig() router.Config {
	return router.Config{
		Slots:  router.Slots{MaxConcurrent: 64, MaxQueueWait: time.Second},
		Retry:  router.Retry{MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond, AttemptTimeout: time.Second, TotalTimeout: 5 * time.Second},
		Health: router.Health{FailureThreshold: 5, RecoveryTimeout: time.Second},
	}
}

// fixed answers at once with the same bytes every time: the benchmark
// measures the router, not the building of an answer.
type fixed struct{}

var fixedAnswer = answer("instant-1", "ok")

func (fixed) Name() string { return "instant" }
func (fixed) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return fixedAnswer, nil
}

// honouring is fixed, and promises to return when its context ends.
type honouring struct{ fixed }

func (honouring) Name() string         { return "direct" }
func (honouring) HonoursContext() bool { return true }
