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
