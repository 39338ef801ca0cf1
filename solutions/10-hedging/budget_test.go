package hedging

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newBudget(t *testing.T, cfg BudgetConfig) *Budget {
	t.Helper()
	b, err := NewBudget(cfg)
	require.NoError(t, err, "NewBudget(%+v) should accept a valid config", cfg)
	require.NotNil(t, b)
	return b
}

// withdrawAll withdraws until the budget refuses and says how many it allowed
// (at most 10,000, so a budget that never runs out fails by name).
func withdrawAll(b *Budget, key string) int {
	n := 0
	for n < 10_000 && b.Withdraw(key) {
		n++
	}
	return n
}

func TestBudgetAllowsAFractionOfRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(t, BudgetConfig{TTL: 10 * time.Second, PercentCanRetry: 0.2})
		assert.Equal(t, 0, b.Balance("alpha"), "no requests and no floor: no retries")
		assert.False(t, b.Withdraw("alpha"), "an empty budget refuses a retry")
		for range 4 {
			b.Deposit("alpha")
		}
		assert.Equal(t, 0, b.Balance("alpha"), "4 requests × 20%% = 0.8: not yet one whole retry")
		b.Deposit("alpha")
		assert.Equal(t, 1, b.Balance("alpha"), "5 requests × 20%% = exactly one retry")
		for range 5 {
			b.Deposit("alpha")
		}
		assert.Equal(t, 2, withdrawAll(b, "alpha"), "10 requests × 20%% allow exactly 2 retries, not 1 and not 3")
		assert.Equal(t, 0, b.Balance("alpha"))
		assert.False(t, b.Withdraw("alpha"), "a refused withdrawal takes nothing")
		for range 5 {
			b.Deposit("alpha")
		}
		assert.Equal(t, 1, b.Balance("alpha"), "a refusal must not leave a debt: 5 more requests give one more retry")
	})
}

func TestBudgetFloorIsPerSecondOfTheWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(t, BudgetConfig{TTL: 10 * time.Second, MinRetriesPerSec: 3})
		assert.Equal(t, 30, b.Balance("alpha"), "a floor of 3 per second over a 10 s window is 30 retries with no traffic at all")
		assert.Equal(t, 30, withdrawAll(b, "alpha"), "exactly the floor, then refusals")

		half := newBudget(t, BudgetConfig{TTL: 1500 * time.Millisecond, MinRetriesPerSec: 2})
		assert.Equal(t, 3, withdrawAll(half, "alpha"), "2 per second over a 1.5 s window is 3")
	})
}

func TestBudgetKeepsOneBudgetPerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBudget(t, BudgetConfig{TTL: 10 * time.Second, MinRetriesPerSec: 1, PercentCanRetry: 0.5})
		for range 4 {
			b.Deposit("alpha")
		}
		assert.Equal(t, 12, withdrawAll(b, "alpha"), "alpha: floor 10 + 4 × 50%%")
		assert.Equal(t, 10, b.Balance("beta"), "spending alpha's budget leaves beta's whole: one budget per provider")
	})
}

func TestBudgetWindowSlides(t *testing.T) {
	t.Run("old deposits expire", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBudget(t, BudgetConfig{TTL: 10 * time.Second, PercentCanRetry: 0.5})
			for range 10 {
				b.Deposit("alpha")
			}
			time.Sleep(5 * time.Second)
			for range 4 {
				b.Deposit("alpha")
			}
			assert.Equal(t, 7, b.Balance("alpha"), "14 requests in the window × 50%%")
			time.Sleep(5*time.Second - time.Nanosecond)
			assert.Equal(t, 7, b.Balance("alpha"), "the first 10 requests still count 1 ns before their TTL ends")
			time.Sleep(time.Nanosecond)
			assert.Equal(t, 2, b.Balance("alpha"), "TTL after they were made, the first 10 requests no longer count: the window slides")
		})
	})
	t.Run("spent retries come back", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBudget(t, BudgetConfig{TTL: 10 * time.Second, MinRetriesPerSec: 1})
			assert.Equal(t, 10, withdrawAll(b, "alpha"))
			time.Sleep(5 * time.Second)
			assert.Equal(t, 0, b.Balance("alpha"), "the withdrawals are still in the window")
			time.Sleep(5 * time.Second)
			assert.Equal(t, 10, b.Balance("alpha"), "a window later the withdrawals have expired: the floor refills, or an outage would starve retries forever")
		})
	})
}

func TestInvalidConfigIsRefused(t *testing.T) {
	budgets := []struct {
		name string
		cfg  BudgetConfig
	}{
		{"zero TTL", BudgetConfig{PercentCanRetry: 0.1}},
		{"negative TTL", BudgetConfig{TTL: -time.Second, PercentCanRetry: 0.1}},
		{"negative floor", BudgetConfig{TTL: time.Second, MinRetriesPerSec: -1}},
		{"negative percent", BudgetConfig{TTL: time.Second, PercentCanRetry: -0.1}},
		{"percent above 1", BudgetConfig{TTL: time.Second, PercentCanRetry: 1.5}},
		{"NaN percent", BudgetConfig{TTL: time.Second, PercentCanRetry: math.NaN()}},
	}
	for _, c := range budgets {
		t.Run("NewBudget with "+c.name, func(t *testing.T) {
			_, err := NewBudget(c.cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig, "NewBudget with %s", c.name)
		})
	}
	_, err := NewBudget(BudgetConfig{TTL: time.Second})
	assert.NoError(t, err, "a budget with no floor and no percent is valid: it allows no retries")

	hedgers := []struct {
		name string
		cfg  Config
	}{
		{"negative delay", Config{Delay: -time.Second}},
		{"hedges without a delay", Config{MaxHedges: 1}},
		{"negative hedges", Config{Delay: time.Second, MaxHedges: -1}},
		{"negative retries", Config{MaxRetries: -1}},
		{"percentile 1", Config{Delay: time.Second, MaxHedges: 1, Percentile: 1, LatencyWindow: 10}},
		{"negative percentile", Config{Delay: time.Second, MaxHedges: 1, Percentile: -0.5, LatencyWindow: 10}},
		{"percentile without a window", Config{Delay: time.Second, MaxHedges: 1, Percentile: 0.95}},
		{"negative window", Config{Delay: time.Second, MaxHedges: 1, Percentile: 0.95, LatencyWindow: -1}},
	}
	for _, c := range hedgers {
		t.Run("New with "+c.name, func(t *testing.T) {
			_, err := New(c.cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig, "New with %s", c.name)
		})
	}
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"the zero Config", Config{}},
		{"retries only", Config{MaxRetries: 2}},
		{"hedging at a percentile", Config{Delay: time.Second, MaxHedges: 1, Percentile: 0.95, LatencyWindow: 100}},
	} {
		t.Run("New with "+c.name+" is valid", func(t *testing.T) {
			h, err := New(c.cfg)
			assert.NoError(t, err, "New(%+v) is valid", c.cfg)
			assert.NotNil(t, h)
		})
	}
}
