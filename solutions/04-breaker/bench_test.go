package breaker

import (
	"errors"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Side by side with sony/gobreaker in one run:
//
//	go test -run '^$' -bench . -benchmem -count=6 ./solutions/04-breaker/ > bench-04.txt
//	go tool benchstat -col /impl bench-04.txt

var errBench = errors.New("bench failure")

func BenchmarkClosed(b *testing.B) {
	b.Run("impl=Breaker", func(b *testing.B) {
		br, err := New(Config{FailureThreshold: 5, RecoveryTimeout: time.Second})
		if err != nil || br == nil {
			b.Skip("breaker not implemented")
		}
		b.ReportAllocs()
		for b.Loop() {
			done, err := br.Allow()
			if err != nil {
				b.Fatal(err)
			}
			done(nil)
		}
	})
	b.Run("impl=gobreaker", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Timeout: time.Second})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cb.Execute(func() (struct{}, error) { return struct{}{}, nil }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkOpen(b *testing.B) {
	b.Run("impl=Breaker", func(b *testing.B) {
		br, err := New(Config{FailureThreshold: 1, RecoveryTimeout: time.Hour})
		if err != nil || br == nil {
			b.Skip("breaker not implemented")
		}
		if done, err := br.Allow(); err == nil {
			done(errBench)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := br.Allow(); err == nil {
				b.Fatal("breaker should be open")
			}
		}
	})
	b.Run("impl=gobreaker", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[struct{}](gobreaker.Settings{Timeout: time.Hour,
			ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= 1 }})
		_, _ = cb.Execute(func() (struct{}, error) { return struct{}{}, errBench })
		b.ReportAllocs()
		for b.Loop() {
			if _, err := cb.Execute(func() (struct{}, error) { return struct{}{}, nil }); err == nil {
				b.Fatal("gobreaker should be open")
			}
		}
	})
}
