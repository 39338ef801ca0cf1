package quotas

// Edges of the quota's contract an outsider found the first tests left
// open (issue 34): a clock that stepped back, ids resent or refused, a
// settle after its window, and keys that must all expire.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A spent bucket is kept until it would be full again, counting the wait for
// a clock that stepped back: forgotten, it would read as a fresh, full bucket.
func TestASpentBucketOutlivesAClockThatSteppedBack(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600)
	f.advance(2 * time.Second)
	assert.Equal(t, 20, f.left(t, "acme", 600), "refilled to 20 at the last call")
	f.stepBack(time.Minute) // a failover to a replica a minute behind
	assert.Equal(t, 20, f.left(t, "acme", 600))
	f.advance(59 * time.Second) // still a second behind the last refill
	assert.Equal(t, 20, f.left(t, "acme", 600), "no refill yet, and not a forgotten bucket read as full")
}

// A reservation never settled (the replica crashed) does not keep any of its
// tenant's keys alive once the window has passed.
func TestAnUnsettledTenantsKeysAllExpire(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Minute})
	f.reserve(t, "acme", "r1", 600, 300)
	for _, k := range f.m.Keys() {
		assert.Positive(t, f.m.TTL(k), "%s has a TTL", k)
	}
	f.advance(10 * time.Minute)
	assert.Empty(t, f.m.Keys(), "an idle tenant costs Redis nothing once the window has passed")
}

// A Settle past the window applies nothing — no refund, and no charge for an
// answer that ran past its reservation either.
func TestASettleAfterTheWindowChargesNothingMore(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Minute})
	f.reserve(t, "acme", "r1", 600, 100)
	f.advance(30 * time.Second)
	f.reserve(t, "acme", "r2", 600, 0) // another request keeps the tenant's reservations alive
	f.advance(30 * time.Second)
	assert.False(t, f.settle(t, "acme", "r1", 600, 700), "a minute after its reserve: too late")
	assert.Equal(t, 600, f.left(t, "acme", 600), "it applied nothing: the bucket is as the clock left it")
}

// A call the upstream refused with a non-2xx costs nothing, whatever usage
// its error response carried.
func TestARefusedCallCostsNothingWhateverItReported(t *testing.T) {
	assert.Equal(t, 0, Charge(Refused, 1000, 50), "a non-2xx did no work it bills")
	assert.Equal(t, 0, Charge(Refused, 0, 1700))
}

// A refused Reserve makes no reservation: the client's retry of the same id,
// once it fits, takes its estimate like any other.
func TestARetryOfARefusedReserveTakesItsEstimate(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 550) // 50 left
	d := f.reserve(t, "acme", "r2", 600, 100)
	require.False(t, d.Allowed)
	f.advance(d.RetryAfter)
	assert.Equal(t, Decision{Allowed: true, Remaining: 0}, f.reserve(t, "acme", "r2", 600, 100),
		"the refusal reserved nothing: the retry takes its 100")
	assert.True(t, f.settle(t, "acme", "r2", 600, 100), "and it is open, to be settled")
}

// The settle window runs from the Reserve that took the tokens: a resend of
// it does not start the window again.
func TestAResentReserveDoesNotRestartTheSettleWindow(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "a", 600, 600)
	f.advance(6 * time.Second)
	f.reserve(t, "acme", "a", 600, 600) // resent: the same reservation
	f.reserve(t, "acme", "b", 600, 0)   // another request keeps the tenant's reservations alive
	f.advance(4 * time.Second)
	assert.False(t, f.settle(t, "acme", "a", 600, 0), "10 s after its reserve: too late, however it was resent")
	assert.Equal(t, 100, f.left(t, "acme", 600), "refilled by the clock, not refunded on top")
	assert.True(t, f.settle(t, "acme", "b", 600, 0), "b, 4 s old, is within its window")
}

// A resent Reserve with another estimate takes nothing more, and changes
// nothing of what the Settle refunds: Redis keeps what was taken.
func TestAResentReserveDoesNotChangeWhatTheSettleRefunds(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "a", 1000, 100)
	f.reserve(t, "acme", "b", 1000, 500) // 400 left
	assert.True(t, f.reserve(t, "acme", "a", 1000, 600).Allowed, "a resend of a, with a confused estimate")
	assert.True(t, f.settle(t, "acme", "a", 1000, 0))
	assert.Equal(t, 500, f.left(t, "acme", 1000), "a took 100: 100 back, not 600")
}

// After Redis' clock stepped back, refill waits for it to pass the last
// refill: RetryAfter counts that wait, and the estimate fits exactly then.
func TestRetryAfterCountsTheWaitForAClockThatSteppedBack(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600)
	f.advance(2 * time.Second)
	require.Equal(t, 20, f.left(t, "acme", 600), "refilled to 20 at the last call")
	f.stepBack(time.Minute) // a failover to a replica a minute behind
	d := f.reserve(t, "acme", "r2", 600, 100)
	require.False(t, d.Allowed)
	assert.Equal(t, 68*time.Second, d.RetryAfter, "a minute until the clock passes the last refill, then 80 tokens at 10 a second")
	f.advance(d.RetryAfter - time.Millisecond)
	assert.False(t, f.reserve(t, "acme", "r3", 600, 100).Allowed, "a millisecond early it still does not fit")
	f.advance(time.Millisecond)
	assert.True(t, f.reserve(t, "acme", "r4", 600, 100).Allowed, "it fits when RetryAfter said")
}
