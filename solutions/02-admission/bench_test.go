package admission

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
)

// The benchmarks compare this package with the usual alternatives, side by
// side in one run:
//
//	go test -run '^$' -bench . -benchmem -count=6 ./solutions/02-admission/ | tee bench-02.txt
//	go tool benchstat -col /impl bench-02.txt

// rateMap is the common baseline: a mutex-guarded map of x/time/rate limiters.
type rateMap struct {
	mu    sync.Mutex
	r     rate.Limit
	burst int
	m     map[string]*rate.Limiter
}

func (l *rateMap) allow(key string) bool {
	l.mu.Lock()
	lim, ok := l.m[key]
	if !ok {
		lim = rate.NewLimiter(l.r, l.burst)
		l.m[key] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "tenant-" + strconv.Itoa(i)
	}
	return out
}

func BenchmarkAllow(b *testing.B) {
	ctx := context.Background()
	for _, nkeys := range []int{1, 10_000} {
		ks := keys(nkeys)
		b.Run("keys="+strconv.Itoa(nkeys)+"/impl=TokenBucket", func(b *testing.B) {
			tb, err := NewTokenBucket(1e9, 1<<30)
			if err != nil || tb == nil {
				b.Skip("TokenBucket not implemented")
			}
			for _, k := range ks { // existing keys: the hot path
				_, _ = tb.Allow(ctx, k)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				_, _ = tb.Allow(ctx, ks[i%nkeys])
				i++
			}
		})
		b.Run("keys="+strconv.Itoa(nkeys)+"/impl=x-time-rate-map", func(b *testing.B) {
			l := &rateMap{r: 1e9, burst: 1 << 30, m: map[string]*rate.Limiter{}}
			for _, k := range ks {
				l.allow(k)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				l.allow(ks[i%nkeys])
				i++
			}
		})
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	ctx := context.Background()
	for _, nkeys := range []int{1, 10_000} {
		ks := keys(nkeys)
		b.Run("keys="+strconv.Itoa(nkeys)+"/impl=TokenBucket", func(b *testing.B) {
			tb, err := NewTokenBucket(1e9, 1<<30)
			if err != nil || tb == nil {
				b.Skip("TokenBucket not implemented")
			}
			for _, k := range ks {
				_, _ = tb.Allow(ctx, k)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					_, _ = tb.Allow(ctx, ks[i%nkeys])
					i++
				}
			})
		})
		b.Run("keys="+strconv.Itoa(nkeys)+"/impl=x-time-rate-map", func(b *testing.B) {
			l := &rateMap{r: 1e9, burst: 1 << 30, m: map[string]*rate.Limiter{}}
			for _, k := range ks {
				l.allow(k)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					l.allow(ks[i%nkeys])
					i++
				}
			})
		})
	}
}

// BenchmarkSemaphore is one uncontended Acquire+Release.
func BenchmarkSemaphore(b *testing.B) {
	ctx := context.Background()
	b.Run("impl=Semaphore", func(b *testing.B) {
		s := NewSemaphore(32)
		if s == nil {
			b.Skip("Semaphore not implemented")
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Acquire(ctx); err != nil {
				b.Fatal(err)
			}
			s.Release()
		}
	})
	b.Run("impl=x-sync-semaphore", func(b *testing.B) {
		s := semaphore.NewWeighted(32)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Acquire(ctx, 1); err != nil {
				b.Fatal(err)
			}
			s.Release(1)
		}
	})
	b.Run("impl=channel", func(b *testing.B) {
		ch := make(chan struct{}, 32)
		b.ReportAllocs()
		for b.Loop() {
			ch <- struct{}{}
			<-ch
		}
	})
}
