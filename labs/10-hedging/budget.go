package hedging

import (
	"errors"
	"time"
)

// ErrInvalidConfig is returned by NewBudget and New for a configuration that cannot work.
var ErrInvalidConfig = errors.New("hedging: invalid config")

// ErrBudgetExhausted is wrapped, with the last attempt's error, around what
// Do returns when a retry is refused by the budget.
var ErrBudgetExhausted = errors.New("hedging: retry budget exhausted")

// ErrNotImplemented is what the stubs return until you write them.
var ErrNotImplemented = errors.New("lab 10: not implemented yet")

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
type Budget struct{} // TODO(lab 10): the fields you need

// NewBudget returns an empty budget: every key starts with only its floor.
//
// TODO(lab 10): refuse (wrapping ErrInvalidConfig) a TTL ≤ 0, a negative
// floor, a PercentCanRetry outside [0, 1] (NaN included).
func NewBudget(cfg BudgetConfig) (*Budget, error) {
	return nil, ErrNotImplemented
}

// Deposit records one request to key: call it once per request, never for
// its retries or hedges.
//
// TODO(lab 10): the deposit counts for key for TTL from now; a nil *Budget
// does nothing.
func (b *Budget) Deposit(key string) {}

// Withdraw takes one extra attempt (a retry or a hedge) to key from the
// budget, and reports whether there was one to take. A refusal takes nothing.
//
// TODO(lab 10): a withdrawal is allowed, and counts, only while key's balance
//
//	MinRetriesPerSec × TTL in seconds
//	+ PercentCanRetry × deposits in the window − withdrawals in the window
//
// is at least 1, exactly (ten deposits at 0.2 make two whole retries). An
// event counts while now < when + TTL. A nil *Budget allows everything.
func (b *Budget) Withdraw(key string) bool {
	return false
}

// Balance is how many extra attempts key may make now (whole ones).
//
// TODO(lab 10): the balance above, rounded down.
func (b *Budget) Balance(key string) int {
	return 0
}
