package adaptive

import (
	"context"
	"testing"
)

// benchImpl is one limiter under benchmark: acquire a permit, then release
// it with a success. bench_failsafe_test.go (build tag failsafe) adds
// failsafe-go's adaptive limiter to the list.
type benchImpl struct {
	name string
	new  func(b *testing.B) func(ctx context.Context) error
}

var benchImpls = []benchImpl{
	{"aimd", func(b *testing.B) func(context.Context) error {
		alg, err := NewAIMD(AIMDConfig{Min: 1, Max: 1000, Initial: 1000})
		if err != nil {
			b.Fatal(err)
		}
		return limiterOp(b, alg)
	}},
	{"gradient", func(b *testing.B) func(context.Context) error {
		alg, err := NewGradient(GradientConfig{Min: 1, Max: 1000, Initial: 1000})
		if err != nil {
			b.Fatal(err)
		}
		return limiterOp(b, alg)
	}},
}

func limiterOp(b *testing.B, alg Algorithm) func(context.Context) error {
	l, err := New(alg)
	if err != nil {
		b.Fatal(err)
	}
	return func(ctx context.Context) error {
		tok, err := l.Acquire(ctx)
		if err != nil {
			return err
		}
		tok.Done(Success)
		return nil
	}
}

// BenchmarkAcquireDone is the cost the limiter adds to every request: one
// Acquire and one Done with a latency sample, the limit far from full.
//
//	go test -tags failsafe -run '^$' -bench AcquireDone -benchmem -count=6 ./solutions/09-adaptive/ > bench-09.txt
//	go tool benchstat -col /impl bench-09.txt
func BenchmarkAcquireDone(b *testing.B) {
	for _, mode := range []string{"serial", "parallel"} {
		for _, impl := range benchImpls {
			b.Run(mode+"/impl="+impl.name, func(b *testing.B) {
				op := impl.new(b)
				ctx := context.Background()
				b.ReportAllocs()
				if mode == "serial" {
					for b.Loop() {
						if err := op(ctx); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := op(ctx); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
