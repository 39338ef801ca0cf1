package hedging

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// ErrInvalidConfig is returned by NewBudget and New for a configuration that cannot work.
var ErrInvalidConfig = errors.New("hedging: invalid config")

// ErrBudgetExhausted is wrapped, with the last attempt's error, around what
// Do returns when a retry is refused by the budget.
var ErrBudgetExhausted = errors.New("hedging: retry budget exhausted")

// unit is one withdrawal in the budget's fixed-point arithmetic: a deposit is
// worth PercentCanRetry·unit, so fractions add up exactly, with no float drift.
const unit = 1_000_000

// BudgetConfig is Finagle's retry budget: within any sliding window of TTL,
// the extra attempts (retries and hedges) to a key may be at most
// PercentCanRetry of the requests deposited for it, plus a floor of
// MinRetriesPerSec for every second of the window.
type BudgetConfig struct {
	// TTL is how long a deposit or a withdrawal counts (> 0). Finagle: 10 s.
	TTL time.Duration
	// MinRetriesPerSec lets a key with little traffic retry at all (≥ 0).
	MinRetriesPerSec int
	// PercentCanRetry is the fraction of requests that may be retried, in [0, 1].
	PercentCanRetry float64
}

// Budget is a retry budget per key (a provider, a route). The zero value is
// not usable; a nil *Budget allows everything.
type Budget struct {
	epoch   time.Time // events are stored as time since epoch: monotonic, 8 bytes, no pointer for the GC to chase
	ttl     time.Duration
	reserve int64 // MinRetriesPerSec × TTL in seconds, in units
	deposit int64 // PercentCanRetry, in units

	mu   sync.Mutex
	keys map[string]*ledger
}

// ledger is one key's deposits and withdrawals still inside the window,
// oldest first, as times since the budget's epoch. One entry per event:
// memory grows with rate × TTL (8 bytes each: 800 KB per key at 10,000
// requests a second over 10 s). Finagle's WindowedAdder keeps ten counters
// per window instead, at the price of expiring events a tenth of the TTL at
// a time; this lab keeps the exact version, which the tests can pin down to
// the nanosecond.
type ledger struct {
	deposits, withdrawals []time.Duration
}

// NewBudget returns an empty budget: every key starts with only its floor.
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	switch {
	case cfg.TTL <= 0:
		return nil, fmt.Errorf("%w: TTL must be positive, got %v", ErrInvalidConfig, cfg.TTL)
	case cfg.MinRetriesPerSec < 0:
		return nil, fmt.Errorf("%w: MinRetriesPerSec must not be negative, got %d", ErrInvalidConfig, cfg.MinRetriesPerSec)
	case !(cfg.PercentCanRetry >= 0 && cfg.PercentCanRetry <= 1): // NaN too
		return nil, fmt.Errorf("%w: PercentCanRetry must be in [0, 1], got %v", ErrInvalidConfig, cfg.PercentCanRetry)
	}
	return &Budget{
		epoch:   time.Now(),
		ttl:     cfg.TTL,
		reserve: int64(cfg.MinRetriesPerSec) * int64(cfg.TTL/time.Microsecond), // per second × seconds × unit
		deposit: int64(math.Round(cfg.PercentCanRetry * unit)),
		keys:    make(map[string]*ledger),
	}, nil
}

// Deposit records one request to key: call it once per request, never for
// its retries or hedges.
func (b *Budget) Deposit(key string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Since(b.epoch)
	l := b.ledger(key, now)
	l.deposits = append(l.deposits, now)
}

// Withdraw takes one extra attempt (a retry or a hedge) to key from the
// budget, and reports whether there was one to take. A refusal takes nothing.
func (b *Budget) Withdraw(key string) bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Since(b.epoch)
	l := b.ledger(key, now)
	if b.balance(l) < unit {
		return false
	}
	l.withdrawals = append(l.withdrawals, now)
	return true
}

// Balance is how many extra attempts key may make now.
func (b *Budget) Balance(key string) int {
	if b == nil {
		return math.MaxInt
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return int(b.balance(b.ledger(key, time.Since(b.epoch))) / unit)
}

func (b *Budget) balance(l *ledger) int64 {
	return b.reserve + b.deposit*int64(len(l.deposits)) - unit*int64(len(l.withdrawals))
}

// ledger returns key's ledger with everything older than the window
// dropped: an event at t counts while now < t+TTL.
func (b *Budget) ledger(key string, now time.Duration) *ledger {
	l, ok := b.keys[key]
	if !ok {
		l = &ledger{}
		b.keys[key] = l
	}
	l.deposits = expire(l.deposits, now-b.ttl)
	l.withdrawals = expire(l.withdrawals, now-b.ttl)
	return l
}

// expire drops the events at or before cutoff.
func expire(events []time.Duration, cutoff time.Duration) []time.Duration {
	i := 0
	for i < len(events) && events[i] <= cutoff {
		i++
	}
	return events[i:]
}
