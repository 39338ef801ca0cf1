package quotas

// Tests for the bugs of an outsider's seventh bank aimed at the tests' gaps:
// each passes on the reference and fails with its bug.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 02-resent-settle-keeps-the-first-marker: Settle "reports whether it
// applied: false for ... [an id] never made (then a late Reserve of id takes
// nothing)" — a Settle resent late in the window (the background undo,
// retried) is such a Settle too: a Reserve soon after it takes nothing,
// however long ago the first attempt ran.
func TestALateReserveTakesNothingWithinAWindowOfTheLastSettleOfItsID(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	require.False(t, f.settle(t, "acme", "a", 600, 0), "never reserved")
	f.advance(9 * time.Second)
	require.False(t, f.settle(t, "acme", "a", 600, 0), "the undo, resent")
	f.advance(2 * time.Second)
	before := f.left(t, "acme", 600) // another request of the tenant tidies its keys
	f.reserve(t, "acme", "a", 600, 100)
	assert.Equal(t, before, f.left(t, "acme", 600), "a's reserve, run 2 s after a settle of a, took nothing")
}

// 03-bucket-expiry-only-pushed-out: "Keys expire: the bucket when it would
// be full again, the reservations a window after the newest" — also when a
// refund brought "full again" closer.
func TestABucketRefundedCloserToFullExpiresWhenFull(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Second})
	f.reserve(t, "acme", "r1", 600, 600)                 // empty: a minute to full
	require.True(t, f.settle(t, "acme", "r1", 600, 300)) // 300 back: 30 s to full
	f.advance(30 * time.Second)
	assert.Empty(t, f.m.Keys(), "full again and the window long past: an idle tenant costs Redis nothing")
	assert.Equal(t, 600, f.left(t, "acme", 600))
}

// 04-settle-caps-the-estimate-at-the-quota: "Settle after the call with what
// was used: the bucket moves by estimate − used" and "Redis keeps the
// estimate" — the estimate Reserve took, whatever the quota is by the time
// the Settle comes.
func TestASettleAfterTheQuotaWasLoweredMovesByTheWholeEstimate(t *testing.T) {
	f := newFixture(t, Config{})
	require.Equal(t, Decision{Allowed: true, Remaining: 0}, f.reserve(t, "acme", "r1", 1000, 1000))
	assert.True(t, f.settle(t, "acme", "r1", 100, 950), "the tier moved down to 100 during the call")
	assert.Equal(t, Decision{Allowed: false, Remaining: 50, RetryAfter: 30 * time.Second}, f.reserve(t, "acme", "r2", 100, 100),
		"1000 reserved, 950 used: 50 back, not a charge of 850 against a quota of 100")
}

// 05-refill-to-full-keeps-the-old-timestamp: "The quota is a bucket of
// perMinute tokens refilled at perMinute/60 a second ...; a lowered quota
// clamps the balance at once" — time spent refilling a bucket that the
// clamp made full is not counted again.
func TestTimeBeforeALoweredQuotaFilledTheBucketIsNotCountedAgain(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 600) // 400 left
	f.advance(20 * time.Second)
	require.Equal(t, Decision{Allowed: true, Remaining: 0}, f.reserve(t, "acme", "r2", 100, 100),
		"the tier moved down to 100: clamped full, and all of it taken")
	assert.Equal(t, 0, f.left(t, "acme", 100), "nothing has refilled since")
	f.advance(30 * time.Second)
	assert.Equal(t, 50, f.left(t, "acme", 100), "30 s at 100 a minute")
}

// 06-settle-dates-the-bucket-now: "A clock that steps back (a failover to a
// replica behind) refills nothing" — also after a Settle ran while it was
// behind.
func TestASettleWhileTheClockIsBehindRefillsNothingLater(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "x", 600, 590)
	f.reserve(t, "acme", "a", 600, 10)
	f.advance(2 * time.Second)
	require.Equal(t, 20, f.left(t, "acme", 600), "refilled to 20 at the last call")
	f.stepBack(time.Minute) // a failover to a replica a minute behind
	require.True(t, f.settle(t, "acme", "a", 600, 10), "used what it reserved: the bucket does not move")
	f.advance(30 * time.Second) // still behind the last refill
	assert.Equal(t, 20, f.left(t, "acme", 600), "time before the last refill is not counted twice")
	f.advance(31 * time.Second)
	assert.Equal(t, 30, f.left(t, "acme", 600), "one second past the last refill: 10 tokens")
}

// 07-settle-drops-the-fraction-of-a-token: the bucket is "refilled
// continuously at perMinute/60 a second" and Settle moves it "by what
// Reserve took minus used" — a settle that moves it by nothing keeps the
// part of a token already refilled.
func TestASettleKeepsTheFractionOfATokenAlreadyRefilled(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 7, 7) // empty; a token every 8571.43 ms
	require.True(t, f.reserve(t, "acme", "a", 7, 0).Allowed, "a zero estimate at zero")
	f.advance(4286 * time.Millisecond) // half a token in
	require.True(t, f.settle(t, "acme", "a", 7, 0), "estimate 0, used 0: the bucket does not move")
	d := f.reserve(t, "acme", "r2", 7, 1)
	assert.Equal(t, Decision{Allowed: false, RetryAfter: 4286 * time.Millisecond}, d,
		"the half token refilled is still there: 4285.43 ms to go, rounded up")
}

// 08-zero-estimate-in-debt-told-to-retry-now: "refused → nothing taken,
// RetryAfter until the estimate fits ...; an estimate of 0 passes unless in
// debt" — a zero estimate refused in debt waits until the debt is paid.
func TestAZeroEstimateRefusedInDebtIsToldWhenItFits(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600)
	require.True(t, f.settle(t, "acme", "r1", 600, 610)) // owes 10 tokens: 1 s at 10 a second
	assert.Equal(t, Decision{Allowed: false, RetryAfter: time.Second}, f.reserve(t, "acme", "r2", 600, 0))
	f.advance(999 * time.Millisecond)
	assert.False(t, f.reserve(t, "acme", "r3", 600, 0).Allowed, "a millisecond early it is still in debt")
	f.advance(time.Millisecond)
	assert.True(t, f.reserve(t, "acme", "r4", 600, 0).Allowed, "it fits when RetryAfter said")
}

// 09-retry-after-in-floating-tokens: "RetryAfter until the estimate fits,
// rounded up to the millisecond" (HINTS: "Keep the arithmetic in whole
// numbers") — when it fits on a whole millisecond, that millisecond, not
// the next.
func TestRetryAfterIsExactWhenTheEstimateFitsOnAWholeMillisecond(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600) // empty; a token every 100 ms
	f.advance(41 * time.Millisecond)     // 0.41 of a token in
	d := f.reserve(t, "acme", "r2", 600, 1)
	assert.Equal(t, Decision{Allowed: false, RetryAfter: 59 * time.Millisecond}, d, "0.59 of a token to go: 59 ms exactly")
	f.advance(58 * time.Millisecond)
	assert.False(t, f.reserve(t, "acme", "r3", 600, 1).Allowed, "a millisecond early it does not fit")
	f.advance(time.Millisecond)
	assert.True(t, f.reserve(t, "acme", "r4", 600, 1).Allowed, "it fits when RetryAfter said")
	g := newFixture(t, Config{})
	g.reserve(t, "acme", "r1", 600, 600)
	g.advance(6 * time.Millisecond)
	assert.Equal(t, 59994*time.Millisecond, g.reserve(t, "acme", "r2", 600, 600).RetryAfter,
		"599.94 tokens to go at 0.01 a millisecond")
}

// 10-settle-window-capped-at-the-default: Config.SettleWindow "is how long a
// reservation waits for its Settle; 0 means DefaultSettleWindow" — a longer
// window (a batch job's requests run for hours) is kept as set.
func TestASettleWindowLongerThanTheDefaultIsKept(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 2 * time.Hour})
	f.reserve(t, "acme", "a", 600, 600)
	f.reserve(t, "acme", "b", 600, 0)
	f.advance(90 * time.Minute)
	f.reserve(t, "acme", "c", 600, 600) // the bucket is full again: empty it
	assert.True(t, f.settle(t, "acme", "a", 600, 0), "90 min after its reserve, within a 2 h window")
	assert.Equal(t, 600, f.left(t, "acme", 600), "a's 600 refunded")
	f.advance(30 * time.Minute)
	assert.False(t, f.settle(t, "acme", "b", 600, 0), "2 h after its reserve: too late")
}
