package quotas

// Tests for bugs an outsider aimed, after reading the tests and the
// conformance traces, at what they left open: tenants and ids as given
// (spaces are not trimmed), every choice and every report counted, a
// settle-only tenant's markers forgotten, TTLs to the millisecond, replies
// to Settle read as carefully as Reserve's. Each passes on the reference
// and fails with the mutant named in its comment.

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// settle-forgets-nothing: "a busy tenant's state stays bounded by the
// reservations the settle window still holds" — a tenant whose traffic is
// settles (background undos of reserves that never ran) is busy too.
func TestASettleOnlyTenantsMarkersAreForgotten(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Minute})
	for i := range 50 {
		require.False(t, f.settle(t, "acme", fmt.Sprintf("undo-%d", i), 1000, 0))
		f.advance(10 * time.Second)
	}
	assert.LessOrEqual(t, f.entries(t), 25,
		"about 7 settles are within the minute's window; 50 markers must not all be kept")
}

// tenant-whitespace-trimmed: "Keys names every key ... each with the hash
// tag {prefix:tenant}" — the tenant as given; " acme" is not "acme".
func TestATenantWithSurroundingSpaceIsItsOwnTenant(t *testing.T) {
	f := newFixture(t, Config{})
	for _, k := range f.q.Keys(" acme") {
		assert.True(t, strings.HasPrefix(k, "{"+DefaultPrefix+": acme}"), "%q", k)
	}
	require.Equal(t, Decision{Allowed: true, Remaining: 0}, f.reserve(t, "acme", "r1", 100, 100))
	assert.Equal(t, Decision{Allowed: true, Remaining: 0}, f.reserve(t, " acme", "r1", 100, 100),
		"\" acme\" starts full: acme's spending is not its")
}

// estimate-caps-choices: Estimate, "plus choices answers of up to
// maxTokens each" — however many choices.
func TestEstimateCountsEveryChoice(t *testing.T) {
	assert.Equal(t, 200*10, Estimate(0, 10, 200))
	assert.Equal(t, 100+1000*DefaultAnswerTokens, Estimate(400, 0, 1000))
}

// reservations-expire-in-whole-seconds: "Keys expire: ... the
// reservations a window after the newest"; "Every key expires once its
// tenant is idle" — a window of 1.5 s is 1.5 s, not 2.
func TestReservationsExpireAWindowAfterTheNewestToTheMillisecond(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 1500 * time.Millisecond})
	require.True(t, f.reserve(t, "acme", "r1", 600, 0).Allowed) // the bucket stays full: no bucket key
	require.NotEmpty(t, f.m.Keys())
	for _, k := range f.m.Keys() {
		assert.LessOrEqual(t, f.m.TTL(k), 1500*time.Millisecond, "%s lives a window, no longer", k)
	}
	f.advance(1500 * time.Millisecond)
	assert.Empty(t, f.m.Keys(), "idle for the window: nothing is left")
}

// settle-nil-reply-read-as-not-applied: "a reply your script never
// returns (..., a nil) is ErrUnexpectedReply" — for Settle as for Reserve.
func TestANilReplyToASettleIsUnexpected(t *testing.T) {
	q, err := New(nilReplyRedis{}, Config{})
	require.NoError(t, err)
	applied, err := q.Settle(context.Background(), "acme", "r1", 100, 1)
	assert.ErrorIs(t, err, ErrUnexpectedReply)
	assert.False(t, applied)
}

// dropped-connection-asked-again: "Reserve: ... one script call";
// "Settle reports whether it applied" — a settle whose reply was lost is
// an error (the caller does not know), never "not applied" when it did.
func TestALostSettleReplyIsNeverReadAsNotApplied(t *testing.T) {
	f := newFixture(t, Config{})
	d := &garbleOnce{Client: f.rdb, lose: io.EOF} // the script ran; its reply is lost
	q, err := New(d, Config{})
	require.NoError(t, err)
	_, err = q.Reserve(context.Background(), "acme", "r1", 1000, 400)
	require.NoError(t, err)

	d.armed.Store(true)
	before := d.calls.Load()
	applied, err := q.Settle(context.Background(), "acme", "r1", 1000, 100)
	assert.True(t, err != nil || applied, "the settle ran and applied: not (false, nil)")
	assert.Equal(t, int32(1), d.calls.Load()-before, "one script call for a Settle")
	assert.Equal(t, 900, f.left(t, "acme", 1000), "r1 settled once: 300 back")

	d.armed.Store(true)
	before = d.calls.Load()
	_, err = q.Reserve(context.Background(), "acme", "r2", 1000, 100)
	assert.Error(t, err, "the reply was lost: the caller is told so")
	assert.Equal(t, int32(1), d.calls.Load()-before, "one script call for a Reserve")
}

// estimate-saturates-one-early: Estimate, "plus choices answers of up
// to maxTokens each ... an estimate too large for an int is math.MaxInt" —
// one that fits an int is exact.
func TestAnEstimateThatFitsAnIntIsExact(t *testing.T) {
	assert.Equal(t, math.MaxInt-1, Estimate(0, math.MaxInt/2, 2))
	assert.Equal(t, math.MaxInt-1, Estimate(0, math.MaxInt-1, 1))
}

// refusal-without-a-wait-admits: "a reply your script never returns ...
// is ErrUnexpectedReply, never a panic, and admits nothing" — {0, 5, 0}
// (a refusal with no wait, which the script never gives) admits nothing.
func TestARefusalWithNoWaitAdmitsNothing(t *testing.T) {
	f := newFixture(t, Config{})
	require.True(t, f.reserve(t, "acme", "r1", 100, 1).Allowed, "the script's own yes admits")
	q, err := New(oddRedis{reply: []any{int64(0), int64(5), int64(0)}}, Config{})
	require.NoError(t, err)
	d, _ := q.Reserve(context.Background(), "acme", "r1", 100, 1)
	assert.False(t, d.Allowed, "reply {0, 5, 0} admits nothing")
}

// broken-report-capped: Charge, "Broken: at least the reservation, more
// if a report says so" — however much more.
func TestABrokenCallIsChargedAReportFarAboveItsReservation(t *testing.T) {
	assert.Equal(t, 2500, Charge(Broken, 1000, 2500))
	assert.Equal(t, 5000, Charge(Broken, 1, 5000))
}

// id-whitespace-trimmed: "a Reserve that finds its id already open
// takes nothing more" — its own id; ErrInvalidArgument is only for an
// empty one, so "r1 " is a reservation of its own.
func TestIDsDifferingInSpaceAreSeparateReservations(t *testing.T) {
	f := newFixture(t, Config{})
	assert.Equal(t, Decision{Allowed: true, Remaining: 700}, f.reserve(t, "acme", "r1", 1000, 300))
	assert.Equal(t, Decision{Allowed: true, Remaining: 400}, f.reserve(t, "acme", "r1 ", 1000, 300),
		"another id: another reservation, which takes its 300")
	assert.True(t, f.settle(t, "acme", "r1", 1000, 0))
	assert.True(t, f.settle(t, "acme", "r1 ", 1000, 100), "r1 is open too, to be settled")
	assert.Equal(t, 900, f.left(t, "acme", 1000), "300 back for r1, 200 for r1 ")
}
