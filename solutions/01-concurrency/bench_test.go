package concurrency

import (
	"context"
	"crypto/sha256"
	"runtime"
	"testing"
)

// spin is CPU-bound work with no I/O: hashing a small block many times.
func spin(context.Context, int) error {
	sum := [32]byte{}
	for range 2000 {
		sum = sha256.Sum256(sum[:])
	}
	_ = sum
	return nil
}

// BenchmarkCPUBound runs the same 256 CPU-bound items three ways. On CPU-bound
// work a goroutine per item buys nothing over GOMAXPROCS workers: there are
// only GOMAXPROCS cores to run on, and the extra goroutines only add
// scheduling and memory. Compare ns/op and B/op:
//
//	go test -run '^$' -bench CPUBound -benchmem ./solutions/01-concurrency/
func BenchmarkCPUBound(b *testing.B) {
	items := make([]int, 256)
	cases := []struct {
		name  string
		limit int
	}{
		{"serial", 1},
		{"pool-of-GOMAXPROCS", runtime.GOMAXPROCS(0)},
		{"goroutine-per-item", len(items)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := FanOut(context.Background(), items, c.limit, spin); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
