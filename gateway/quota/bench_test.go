package quota

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// What one request costs the gateway in Redis round trips, on a real Redis:
//
//	go test -run '^$' -bench . -benchmem -count=6 ./gateway/quota/ > bench-quota.txt
//	go tool benchstat bench-quota.txt
//
// Needs a Redis (REDIS_URL, or redis-server on PATH); skips otherwise.
// "parallel-32" runs 32 goroutines over the same 100 tenants. The quota is
// large enough never to refuse, so every iteration is a full reserve+settle
// (two EVALSHA) or acquire+release (two EVALSHA).

func BenchmarkReserveSettleRedis(b *testing.B) {
	rdb := replicas(b, 1)[0]
	q := newTokens(b, rdb, TokensConfig{Prefix: keyPrefix(b), Timeout: time.Second})
	ctx := context.Background()
	run := func(i int) error {
		r, d, err := q.Reserve(ctx, "t"+strconv.Itoa(i%100), MaxPerMinute, 1000)
		if err != nil || !d.Allowed {
			return err
		}
		return r.Settle(ctx, 800)
	}
	benchModes(b, run)
}

func BenchmarkAcquireReleaseRedis(b *testing.B) {
	rdb := replicas(b, 1)[0]
	l := newLeases(b, rdb, LeasesConfig{Prefix: keyPrefix(b), TTL: time.Minute, Timeout: time.Second})
	ctx := context.Background()
	run := func(i int) error {
		release, _, err := l.Acquire(ctx, "t"+strconv.Itoa(i%100), 1<<20)
		if err != nil {
			return err
		}
		return release(ctx)
	}
	benchModes(b, run)
}

func benchModes(b *testing.B, run func(i int) error) {
	b.Run("mode=serial", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := run(i); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("mode=parallel-32", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(max(1, 32/runtime.GOMAXPROCS(0))) // 32 goroutines in all
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if err := run(i); err != nil {
					b.Error(err)
					return
				}
				i++
			}
		})
	})
}
