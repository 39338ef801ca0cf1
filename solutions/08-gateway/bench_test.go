package gateway

import (
	"context"
	"testing"
	"time"
)

// BenchmarkGenerate is the whole request path — rate limit, slot, retry loop,
// breaker, bridge — around a provider that answers at once:
//
//	go test -run '^$' -bench Generate -benchmem ./solutions/08-gateway/
//
// "serial" and "parallel" call a provider through the bridge; "direct" one
// that declares it honours its context (as the HTTP providers do), which the
// reference gateway calls without the bridge's goroutine. A stub that does
// not know the difference runs both the same way.
func BenchmarkGenerate(b *testing.B) {
	cfg := Config{
		RatePerSecond: 1e9, Burst: 1 << 30, MaxConcurrent: 64, MaxQueueWait: time.Second,
		MaxAttempts: 3, BaseBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		AttemptTimeout: time.Second, TotalTimeout: 5 * time.Second,
		FailureThreshold: 5, RecoveryTimeout: time.Second,
	}
	g, err := New(cfg, &fake{name: "instant"})
	if err != nil || g == nil {
		b.Skip("gateway not implemented")
	}
	defer func() { _ = g.Close(context.Background()) }()
	ctx := context.Background()
	req := Request{Tenant: "bench", Prompt: "hi"}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := g.Generate(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		g, err := New(cfg, honouring{})
		if err != nil || g == nil {
			b.Skip("gateway not implemented")
		}
		defer func() { _ = g.Close(context.Background()) }()
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
				if _, err := g.Generate(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// honouring answers at once and says it returns promptly when its context
// ends (the reference gateway's ContextHonourer).
type honouring struct{}

func (honouring) Name() string         { return "direct" }
func (honouring) HonoursContext() bool { return true }
func (honouring) Generate(context.Context, Request) (Completion, error) {
	return Completion{Text: "hi", Model: "direct-1"}, nil
}
