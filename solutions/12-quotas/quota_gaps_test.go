package quotas

// Tests for eight bugs aimed at what the suite left open (an outsider's fourth
// bank). Each passes on the reference and fails with the bug named in its comment.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// 01-estimate-too-large-after-redis: "arguments checked before Redis
// (ErrInvalidArgument; ErrEstimateTooLarge for an estimate above perMinute)".
func TestAnEstimateAboveTheQuotaIsRefusedBeforeRedis(t *testing.T) {
	f := newFixture(t, Config{})
	before := f.m.CommandCount()
	_, err := f.q.Reserve(context.Background(), "acme", "r1", 100, 101)
	assert.ErrorIs(t, err, ErrEstimateTooLarge)
	assert.Equal(t, before, f.m.CommandCount(), "an impossible estimate never reaches Redis")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = f.q.Reserve(ctx, "acme", "r2", 100, 101)
	assert.ErrorIs(t, err, ErrEstimateTooLarge, "the argument error, whatever Redis or the context would say")
}

// 02-bucket-ttl-is-window: "none [expires] before what it holds could be
// rebuilt without it (a bucket forgotten before it is full again hands out
// free tokens)" — with a settle window shorter than the refill.
func TestASpentBucketOutlivesAShortSettleWindow(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Second})
	f.reserve(t, "acme", "r1", 600, 600) // empty: 60 s to full
	f.advance(2 * time.Second)
	assert.Equal(t, 20, f.left(t, "acme", 600), "2 s of refill, not a forgotten bucket read as full")
	assert.False(t, f.reserve(t, "acme", "r2", 600, 600).Allowed)
}

// 03-unknown-settle-leaks-marker: "Every key expires once its tenant is
// idle" — also when the tenant's only call was a Settle of an id Redis never
// reserved (the background undo of a Reserve that errored).
func TestASettleOfAnIDNeverReservedLeavesNoKeyBehind(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Minute})
	assert.False(t, f.settle(t, "acme", "never", 600, 0))
	for _, k := range f.m.Keys() {
		assert.Positive(t, f.m.TTL(k), "%s has a TTL", k)
	}
	f.advance(10 * time.Minute)
	assert.Empty(t, f.m.Keys(), "an idle tenant costs Redis nothing once the window has passed")
}

// 04-markers-never-forgotten: "a busy tenant's state stays bounded by the
// reservations the settle window still holds" — settled ones included.
func TestABusyTenantsSettleMarkersAreForgotten(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Minute})
	for i := range 50 {
		id := fmt.Sprintf("r%d", i)
		f.reserve(t, "acme", id, 1_000_000, 1)
		f.settle(t, "acme", id, 1_000_000, 1)
		f.advance(10 * time.Second)
	}
	assert.LessOrEqual(t, f.entries(t), 25,
		"about 7 settles are within the minute's window; 50 markers must not all be kept")
}

// 05-settle-skips-full-bucket: "Settle ... the bucket moves by estimate −
// used ... a further charge when it ran long" — also when the refill made
// the bucket full again while the call ran.
func TestALongAnswerIsChargedThoughTheBucketRefilledDuringTheCall(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 100) // 500 left: full again in 10 s
	f.advance(10 * time.Second)
	assert.True(t, f.settle(t, "acme", "r1", 600, 400))
	assert.Equal(t, 300, f.left(t, "acme", 600), "300 more than reserved is charged from the full bucket")

	g := newFixture(t, Config{})
	assert.True(t, g.reserve(t, "acme", "z", 600, 0).Allowed, "a zero estimate on a full bucket")
	assert.True(t, g.settle(t, "acme", "z", 600, 250))
	assert.Equal(t, 350, g.left(t, "acme", 600), "its 250 used are charged")
}

// 06-tenant-case-folded: "Keys names every key ... each with the hash tag
// {prefix:tenant}", and tenants have separate buckets.
func TestTenantsDifferingOnlyInCaseAreSeparate(t *testing.T) {
	f := newFixture(t, Config{Prefix: "tq"})
	for _, k := range f.q.Keys("Acme") {
		assert.True(t, strings.HasPrefix(k, "{tq:Acme}"), "%q: the tag is {prefix:tenant}, the tenant as given", k)
	}
	f.reserve(t, "acme", "r1", 100, 100)
	assert.True(t, f.reserve(t, "Acme", "r2", 100, 100).Allowed, "Acme's bucket is not acme's")
}

// 07-negative-max-tokens: "A request that sets no limit is reserved
// DefaultAnswerTokens" — a negative max_tokens (-1: "no limit" in some
// clients) sets no limit, and must not shrink the prompt's share.
func TestEstimateOfANegativeAnswerLimitReservesTheDefault(t *testing.T) {
	assert.Equal(t, 100+DefaultAnswerTokens, Estimate(400, -1, 1))
	assert.GreaterOrEqual(t, Estimate(0, -1, 1), 0, "never a negative estimate, which Reserve would reject")
}

// 08-settle-ignores-cancel: "A caller's cancelled context comes back as its
// error" — for Settle too, with a cancel (not only a deadline).
func TestACancelledSettleReturnsItsErrorAndAppliesNothing(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 100, 60)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	applied, err := f.q.Settle(ctx, "acme", "r1", 100, 0)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, applied)
	assert.Equal(t, 40, f.left(t, "acme", 100), "nothing refunded")
}
