package hedging

import (
	"context"
	"testing"
	"time"
)

// What a request pays for hedging and a budget when nothing is slow: a
// goroutine, a channel and a timer per request, and the budget's lock.
//
//	go test -run '^$' -bench . -benchmem -count=6 ./solutions/10-hedging/ > bench-10.txt
//	go tool benchstat -col /impl bench-10.txt

func BenchmarkDoFastCall(b *testing.B) {
	ctx := context.Background()
	fast := func(context.Context, string) (int, error) { return 1, nil }
	targets := []string{"alpha", "beta"}
	b.Run("impl=direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fast(ctx, targets[0]); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range []struct {
		name   string
		budget bool
	}{{"impl=Do", false}, {"impl=Do+budget", true}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := Config{Delay: time.Second, MaxHedges: 1, MaxRetries: 1}
			if c.budget {
				budget, err := NewBudget(BudgetConfig{TTL: 10 * time.Second, MinRetriesPerSec: 10, PercentCanRetry: 0.1})
				if err != nil {
					b.Skip("budget not implemented")
				}
				cfg.Budget = budget
			}
			h, err := New(cfg)
			if err != nil || h == nil {
				b.Skip("hedger not implemented")
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Do(ctx, h, targets, fast); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBudgetDepositWithdraw(b *testing.B) {
	// A benchmark runs for about a second: with a 10 s TTL nothing expires
	// and the ledger only grows (the worst case); with 1 µs it stays nearly
	// empty (a quiet key's steady state).
	for _, c := range []struct {
		name string
		ttl  time.Duration
	}{{"window=growing", 10 * time.Second}, {"window=small", time.Microsecond}} {
		b.Run(c.name, func(b *testing.B) {
			budget, err := NewBudget(BudgetConfig{TTL: c.ttl, MinRetriesPerSec: 10, PercentCanRetry: 0.1})
			if err != nil {
				b.Skip("budget not implemented")
			}
			b.ReportAllocs()
			for b.Loop() {
				budget.Deposit("alpha")
				budget.Withdraw("alpha")
			}
		})
	}
}
