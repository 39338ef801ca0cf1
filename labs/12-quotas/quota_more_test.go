package quotas

// More edges from a second round of outsiders' bug banks (issue 34):
// whole-millisecond arithmetic on Redis' clock, markers and windows dated
// from the right moment, debt bounded in the keys' lifetimes too.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A settle that reports far more than the debt allowed owes one minute of
// quota, no more — and Redis forgets the tenant once that is paid back,
// not when the whole overrun would have been.
func TestAHugeOverrunOwesOnlyTheDebtAllowed(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Minute})
	f.reserve(t, "acme", "r1", 100, 100)
	assert.True(t, f.settle(t, "acme", "r1", 100, MaxPerMinute)) // owes at most 100 (one minute)
	f.advance(2 * time.Minute)                                   // from -100 to full at 100 a minute
	assert.Empty(t, f.m.Keys(), "the debt is paid and the window passed: an idle tenant costs Redis nothing")
	assert.Equal(t, 100, f.left(t, "acme", 100))
}

// Only the script's own yes admits: a reply it never gives admits nothing,
// whatever shape your script's replies take. (Which reply is the yes is
// yours to design, so no test can say that a given reply admits.)
func TestOnlyTheScriptsYesAdmits(t *testing.T) {
	f := newFixture(t, Config{})
	require.True(t, f.reserve(t, "acme", "r1", 100, 1).Allowed, "the script's own yes admits")
	for _, first := range []int64{2, 7} {
		q, err := New(oddRedis{reply: []any{first, int64(0), int64(0)}}, Config{})
		require.NoError(t, err)
		d, _ := q.Reserve(context.Background(), "acme", "r1", 100, 1)
		assert.False(t, d.Allowed, "reply {%d, 0, 0} admits nothing", first)
		applied, _ := q.Settle(context.Background(), "acme", "r1", 100, 1)
		assert.False(t, applied, "reply {%d, 0, 0} applied nothing", first)
	}
}

// A Reserve resent after its reservation was settled (its first reply was
// lost, and go-redis resent it late) takes nothing: the settle left a marker.
func TestAReserveResentAfterItsSettleTakesNothing(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 300)
	assert.True(t, f.settle(t, "acme", "r1", 1000, 300))
	assert.Equal(t, 700, f.left(t, "acme", 1000))
	f.reserve(t, "acme", "r1", 1000, 300)
	assert.Equal(t, 700, f.left(t, "acme", 1000), "the resend took nothing")
	assert.False(t, f.settle(t, "acme", "r1", 1000, 0), "and opened nothing to settle")
}

// At 7 tokens a minute a token takes 8571.43 ms: a bucket one token short is
// still there at 8571 ms, when it is not yet full.
func TestABucketIsNotForgottenAMillisecondEarly(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 7, 1)
	f.advance(8571 * time.Millisecond)
	assert.Equal(t, 6, f.left(t, "acme", 7), "a fraction of a millisecond short of full: 6, not a forgotten bucket's 7")
	assert.False(t, f.reserve(t, "acme", "r2", 7, 7).Allowed, "the whole quota does not fit yet")
}

// A stalled Reserve that Redis runs after its Settle, and then runs again
// (resent after a lost reply), takes nothing either time.
func TestALateReserveResentStillTakesNothing(t *testing.T) {
	f := newFixture(t, Config{})
	assert.False(t, f.settle(t, "acme", "r1", 1000, 0), "settled before its reserve ran")
	f.reserve(t, "acme", "r1", 1000, 300)
	assert.Equal(t, 1000, f.left(t, "acme", 1000), "the late reserve took nothing")
	f.reserve(t, "acme", "r1", 1000, 300)
	assert.Equal(t, 1000, f.left(t, "acme", 1000), "nor did its resend")
}

// A lowered quota bounds the debt at once: the refill since then pays back
// the new, smaller debt, not the old one first.
func TestALoweredQuotaClampsTheDebtBeforeTheRefill(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 1000)
	f.settle(t, "acme", "r1", 1000, 5000) // -1,000: a minute of the old quota owed
	f.advance(30 * time.Second)
	assert.Equal(t, Decision{Allowed: false, RetryAfter: 90 * time.Second}, f.reserve(t, "acme", "r2", 100, 100),
		"at 100 a minute: owed 100, 50 paid back in 30 s, 150 to go = 90 s")
}

// Redis' clock has microseconds. Calls within one millisecond refill
// nothing between them, however many there are.
func TestCallsWithinOneMillisecondMintNothing(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 60_000, 60_000) // empty; a token a millisecond back
	f.clock = f.clock.Add(500 * time.Microsecond)
	f.m.SetTime(f.clock)
	for i := range 4 {
		assert.Equal(t, 0, f.left(t, "acme", 60_000), "call %d, half a millisecond in", i)
	}
	f.clock = f.clock.Add(500 * time.Microsecond)
	f.m.SetTime(f.clock)
	assert.Equal(t, 1, f.left(t, "acme", 60_000), "one millisecond in: one token")
}

// The settle window is counted on Redis' clock as it reads when the reserve
// runs, even after that clock stepped back.
func TestAReservationMadeWhileTheClockIsBehindHasItsWindowFromThen(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "x", 600, 100)
	f.advance(2 * time.Second)
	f.left(t, "acme", 600)  // the last refill, at +2 s
	f.stepBack(time.Minute) // a failover to a replica a minute behind
	f.reserve(t, "acme", "a", 600, 100)
	f.advance(9 * time.Second)
	f.reserve(t, "acme", "b", 600, 0) // another request keeps the tenant's keys alive
	f.advance(time.Second)
	assert.False(t, f.settle(t, "acme", "a", 600, 0), "10 s after its reserve by Redis' clock: too late")
}

// RetryAfter counts the part of a token already refilled.
func TestRetryAfterCountsAFractionOfATokenAlreadyRefilled(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 7, 7) // empty; a token every 8571.43 ms
	f.advance(4286 * time.Millisecond)
	d := f.reserve(t, "acme", "r2", 7, 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 4286*time.Millisecond, d.RetryAfter, "half a token is in: 4285.43 ms to go, rounded up")
	f.advance(d.RetryAfter)
	assert.True(t, f.reserve(t, "acme", "r3", 7, 1).Allowed, "it fits when RetryAfter said")
}

// The marker a Settle leaves lasts a window from the settle, whenever the
// reservation was made: a Reserve resent soon after takes nothing.
func TestTheMarkerOfASettleLastsAWindowFromTheSettle(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "a", 600, 100)
	f.advance(9 * time.Second)
	assert.True(t, f.settle(t, "acme", "a", 600, 100), "settled late in its window")
	f.advance(2 * time.Second)
	before := f.left(t, "acme", 600) // another request of the tenant tidies its keys
	f.reserve(t, "acme", "a", 600, 100)
	assert.Equal(t, before, f.left(t, "acme", 600), "a's reserve, resent 2 s after its settle, took nothing")
}

// A settle window is kept to the millisecond, not rounded to seconds.
func TestASettleWindowOfAFractionOfASecondIsKept(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 1500 * time.Millisecond})
	f.reserve(t, "acme", "a", 600, 100)
	f.reserve(t, "acme", "b", 600, 100)
	f.advance(1200 * time.Millisecond)
	assert.True(t, f.settle(t, "acme", "a", 600, 0), "1.2 s after its reserve, within a 1.5 s window")
	f.advance(300 * time.Millisecond)
	assert.False(t, f.settle(t, "acme", "b", 600, 0), "1.5 s after: too late")
}

// Any non-empty id is a reservation's: one that looks like a settle
// marker ("settled:r1") is reserved like any other, and a reservation
// named so does not stand in for another id's marker.
func TestAnIDThatLooksLikeAMarkerIsReservedLikeAnyOther(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 100)
	assert.True(t, f.settle(t, "acme", "r1", 1000, 100))
	assert.Equal(t, 900, f.left(t, "acme", 1000))
	d := f.reserve(t, "acme", "settled:r1", 1000, 300)
	assert.True(t, d.Allowed)
	assert.Equal(t, 600, f.left(t, "acme", 1000), "a new id, a new reservation: 300 taken")
	assert.True(t, f.settle(t, "acme", "settled:r1", 1000, 300), "and it is open, to be settled")

	g := newFixture(t, Config{})
	g.reserve(t, "acme", "settled:x", 1000, 100)
	g.reserve(t, "acme", "x", 1000, 300)
	assert.Equal(t, 600, g.left(t, "acme", 1000), "x took its 300: an open reservation named like x's marker is not one")
}

// Any negative element is a reply the script never gives, whichever
// element it is.
func TestANegativeRetryAfterInAReplyIsUnexpected(t *testing.T) {
	for _, reply := range []any{[]any{int64(0), int64(5), int64(-100)}, []any{int64(-1), int64(5), int64(0)}} {
		q, err := New(oddRedis{reply: reply}, Config{})
		require.NoError(t, err)
		var d Decision
		require.NotPanics(t, func() { d, err = q.Reserve(context.Background(), "acme", "r1", 100, 1) }, "%#v", reply)
		assert.ErrorIs(t, err, ErrUnexpectedReply, "reply %#v", reply)
		assert.GreaterOrEqual(t, d.RetryAfter, time.Duration(0), "reply %#v", reply)
		_, err = q.Settle(context.Background(), "acme", "r1", 100, 1)
		assert.ErrorIs(t, err, ErrUnexpectedReply, "reply %#v", reply)
	}
}

// A burst of reservations, never settled, is forgotten whole once its
// window has passed, though the tenant stays busy.
func TestABurstOfReservationsIsForgottenWhole(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	for i := range 20 {
		f.reserve(t, "acme", fmt.Sprintf("burst-%d", i), 1_000_000, 1)
	}
	for i := range 6 {
		f.advance(3 * time.Second) // busy: the keys never expire
		f.reserve(t, "acme", fmt.Sprintf("later-%d", i), 1_000_000, 1)
	}
	assert.LessOrEqual(t, f.entries(t), 12,
		"four reservations are within the window (a member and an estimate each), and the bucket: the burst's 20 are gone")
}

// Forgetting an old reservation touches that reservation only, whatever
// its id holds: "job:b" is not "b".
func TestForgettingAnIDWithAColonLeavesOtherReservationsAlone(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "job:b", 60_000, 30_000) // never settled: forgotten after the window
	f.advance(5 * time.Second)
	f.reserve(t, "acme", "b", 60_000, 30_000)
	f.advance(6 * time.Second)
	before := f.left(t, "acme", 60_000) // tidies: job:b is 11 s old
	assert.True(t, f.settle(t, "acme", "b", 60_000, 0), "b is 6 s old: within its window")
	assert.Equal(t, before+30_000, f.left(t, "acme", 60_000), "b's 30,000 refunded")
}

// A Settle that came too late still closes its reservation: a Reserve of
// the id that Redis runs after it (stalled, or resent) takes nothing.
func TestASettleTooLateStillLeavesItsMarker(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "a", 600, 100)
	f.advance(5 * time.Second)
	f.reserve(t, "acme", "keep", 600, 0) // the tenant stays busy: its keys stay
	f.advance(5 * time.Second)
	require.False(t, f.settle(t, "acme", "a", 600, 0), "10 s after its reserve: too late")
	f.advance(time.Second)
	before := f.left(t, "acme", 600) // another request tidies the tenant's keys
	f.reserve(t, "acme", "a", 600, 100)
	assert.Equal(t, before, f.left(t, "acme", 600), "a's reserve, run after its settle, took nothing")
}

// After Redis' clock stepped back, a reservation made while it is behind
// has its whole window from then, by that clock: settled a second later,
// it applies.
func TestAReservationMadeWhileTheClockIsBehindCanBeSettled(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "x", 600, 100)
	f.advance(2 * time.Second)
	f.left(t, "acme", 600)  // the last refill, at +2 s
	f.stepBack(time.Minute) // a failover to a replica a minute behind
	f.reserve(t, "acme", "a", 600, 100)
	f.advance(time.Second)
	before := f.left(t, "acme", 600)
	assert.True(t, f.settle(t, "acme", "a", 600, 0), "1 s after its reserve by Redis' clock: within the window")
	assert.Equal(t, before+100, f.left(t, "acme", 600), "a's 100 refunded")
}
