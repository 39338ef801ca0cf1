package distlimit

import (
	"context"
	"runtime"
	"strconv"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// Side by side on the same real Redis in one run, this limiter against
// go-redis/redis_rate (GCRA, also one Lua script per decision):
//
//	go test -run '^$' -bench . -benchmem -count=6 ./solutions/07-distlimit/ > bench-07.txt
//	go tool benchstat -col /impl bench-07.txt
//
// Needs a Redis (REDIS_URL, or redis-server on PATH); skips otherwise.
// "parallel-32" runs 32 goroutines over the same 100 keys.

func benchClient(b *testing.B) *redis.Client {
	opts, err := redis.ParseURL(redistest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	opts.PoolSize = 64
	rdb := redis.NewClient(opts)
	b.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func BenchmarkAllowRedis(b *testing.B) {
	rdb := benchClient(b)
	ctx := context.Background()
	prefix := redistest.Prefix(b)
	b.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	ours, err := New(rdb, Config{Rate: 1e6, Burst: 1e6, Prefix: prefix + "ours:"})
	if err != nil || ours == nil {
		b.Skip("Limiter not implemented")
	}
	theirs := redis_rate.NewLimiter(rdb)
	limit := redis_rate.Limit{Rate: 1e6, Burst: 1e6, Period: 1e9}

	run := func(b *testing.B, allow func(key string) error) {
		b.Run("mode=serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := allow("k" + strconv.Itoa(i%100)); err != nil {
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
					if err := allow("k" + strconv.Itoa(i%100)); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
	b.Run("impl=distlimit", func(b *testing.B) {
		run(b, func(key string) error { _, err := ours.Allow(ctx, key); return err })
	})
	b.Run("impl=redis_rate", func(b *testing.B) {
		run(b, func(key string) error { _, err := theirs.Allow(ctx, prefix+"theirs:"+key, limit); return err })
	})
}
