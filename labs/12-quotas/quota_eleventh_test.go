package quotas

// Tests for bugs a second outsider aimed at what the suite and its traces
// left open: a late reserve's bucket and refill, a prefix with a space,
// bursts past a hundred reservations, sixty minutes of debt, settle windows
// of days. Each passes on the reference and fails with the mutant named in
// its comment.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// late-reserve-keeps-the-old-expiry: a late reserve (after its id's
// settle) at a raised quota must keep the bucket until full at that quota.
func TestALateReserveKeepsTheBucketUntilFullAtItsQuota(t *testing.T) {
	f := newFixture(t, Config{})
	require.False(t, f.settle(t, "acme", "x", 100, 0), "x never reserved: a marker")
	require.Equal(t, Decision{Allowed: true, Remaining: 50}, f.reserve(t, "acme", "r1", 100, 50))
	require.Equal(t, Decision{Allowed: true, Remaining: 50}, f.reserve(t, "acme", "x", 1000, 50), "late: takes nothing")
	f.advance(30 * time.Second) // 50 + 500 at 1000 a minute: 550, not full
	d := f.reserve(t, "acme", "r2", 1000, 600)
	assert.False(t, d.Allowed, "550 tokens do not hold 600: the bucket was not forgotten as full")
	assert.Equal(t, 550, d.Remaining)
}

// late-reserve-forgets-the-refill: Remaining shown by a late reserve
// never falls without a charge when the clock steps back.
func TestALateReservesRemainingNeverFallsWhenTheClockStepsBack(t *testing.T) {
	f := newFixture(t, Config{})
	require.False(t, f.settle(t, "acme", "x", 600, 0))
	require.True(t, f.reserve(t, "acme", "r1", 600, 600).Allowed)
	f.advance(10 * time.Second)
	require.Equal(t, Decision{Allowed: true, Remaining: 100}, f.reserve(t, "acme", "x", 600, 5), "late: takes nothing, shows 100")
	f.stepBack(5 * time.Second)
	assert.Equal(t, 100, f.left(t, "acme", 600), "a clock that stepped back takes back nothing already shown")
}

// prefix-whitespace-trimmed: Prefix is kept as given.
func TestAPrefixWithSpaceIsKeptAsGiven(t *testing.T) {
	f := newFixture(t, Config{Prefix: "q"})
	g, err := New(f.rdb, Config{Prefix: " q"})
	require.NoError(t, err)
	for _, k := range g.Keys("acme") {
		assert.Contains(t, k, "{ q:acme}", "the hash tag is {Prefix:tenant}")
	}
	require.True(t, f.reserve(t, "acme", "r1", 100, 100).Allowed)
	d, err := g.Reserve(context.Background(), "acme", "r1", 100, 0)
	require.NoError(t, err)
	assert.Equal(t, 100, d.Remaining, "another prefix, another bucket")
}

// 08-tidy-forgets-at-most-100: a burst of 150 is forgotten whole.
func TestABigBurstOfReservationsIsForgottenWhole(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	for i := range 150 {
		f.reserve(t, "acme", fmt.Sprintf("b-%d", i), 1_000_000, 1)
	}
	f.advance(5 * time.Second) // busy: the keys never expire
	f.reserve(t, "acme", "mid", 1_000_000, 1)
	f.advance(5 * time.Second)
	f.reserve(t, "acme", "later", 1_000_000, 1)
	keys := f.q.Keys("acme")
	n := 0
	for _, k := range keys[1:] {
		if f.m.Exists(k) {
			if m, err := f.m.HKeys(k); err == nil {
				n += len(m)
			} else if z, err := f.m.ZMembers(k); err == nil {
				n += len(z)
			}
		}
	}
	assert.LessOrEqual(t, n, 4, "two reservations within the window: a member and an estimate each")
}

// bucket-ttl-capped-at-an-hour: sixty minutes of debt is 61 minutes from full.
func TestABucketInSixtyMinutesOfDebtIsKeptUntilFull(t *testing.T) {
	f := newFixture(t, Config{DebtMinutes: 60})
	require.True(t, f.reserve(t, "acme", "r1", 60, 60).Allowed)
	require.True(t, f.settle(t, "acme", "r1", 60, 100_000)) // down to the floor: −3600
	f.advance(time.Hour + time.Second)                      // −3600 + 3601 at 1 a second
	assert.Equal(t, 1, f.left(t, "acme", 60), "the bucket was not forgotten as full")
}

// reservations-expire-within-a-day: a settle window of two days is kept.
func TestASettleWindowOfTwoDaysIsKept(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 48 * time.Hour})
	require.True(t, f.reserve(t, "acme", "r1", 100, 10).Allowed)
	f.advance(25 * time.Hour)
	assert.True(t, f.settle(t, "acme", "r1", 100, 0), "25 h old, within its 48 h window")
}
