package quotas

// Tests for the bugs of two outsiders' ninth banks aimed at the tests' gaps
// (sequences of many calls; Charge, Estimate, Keys and the stub's
// promises), and for three holes a reader found in the reference (an
// Estimate that wrapped, a nil *redis.Client, an allowed reply with a
// wait): each passes on the reference and fails with its bug.

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 01-debt-bounded-per-settle: README, "Debt: usage beyond the reservations
// may take the bucket down to −DebtMinutes × perMinute (default one
// minute), no further"; Settle, "the bucket moves by what Reserve took
// minus used — never above full, never below the debt allowed". The floor
// bounds the balance, not the overrun: from a bucket that still held 500
// tokens, an answer 1,200 over owes down to the floor, not 600 from 500.
func TestAnOverrunFromAFullerBucketOwesDownToTheFloor(t *testing.T) {
	f := newFixture(t, Config{})
	require.Equal(t, Decision{Allowed: true, Remaining: 500}, f.reserve(t, "acme", "a", 600, 100))
	require.True(t, f.settle(t, "acme", "a", 600, 1300)) // 500 − 1,200 = −700: the floor is −600
	assert.Equal(t, Decision{Allowed: false, RetryAfter: 60*time.Second + 100*time.Millisecond},
		f.reserve(t, "acme", "b", 600, 1),
		"600 owed and 1 more to fit, at 10 a second — not the 100 a debt of one minute per settle would leave")
}

// 02-estimate-caps-the-answer-at-the-default: README, "The estimate is
// Estimate(promptBytes, maxTokens, choices): about four bytes a token for
// the prompt ... plus choices × maxTokens. A request that sets no limit is
// reserved DefaultAnswerTokens" — a limit above the default is reserved as
// set.
func TestEstimateReservesAnAnswerLimitAboveTheDefaultInFull(t *testing.T) {
	assert.Equal(t, 100+4096, Estimate(400, 4096, 1), "max_tokens 4096 is reserved whole")
	assert.Equal(t, 2*2000, Estimate(0, 2000, 2), "two answers of up to 2000 each")
	assert.Equal(t, DefaultAnswerTokens+1, Estimate(0, DefaultAnswerTokens+1, 1))
}

// 03-tidy-hdel-passes-the-gsub-count: Settle "reports whether it applied:
// false for an id already settled, never reserved ..., or reserved
// SettleWindow or more ago" — an open reservation named "1" (ids are often
// counters) is none of these when another, older reservation is forgotten.
func TestForgettingAReservationLeavesAnIDThatIsANumberAlone(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "old", 60, 40) // never settled: forgotten after the window
	f.advance(5 * time.Second)
	require.True(t, f.reserve(t, "acme", "1", 60, 20).Allowed)
	f.advance(6 * time.Second)
	before := f.left(t, "acme", 60) // tidies: "old" is 11 s old
	assert.True(t, f.settle(t, "acme", "1", 60, 0), `"1" is 6 s old: within its window`)
	assert.Equal(t, before+20, f.left(t, "acme", 60), `"1"'s 20 refunded`)
}

// 04-reservations-capped-by-count: README, "A reservation never settled ...
// is forgotten after SettleWindow; a Settle SettleWindow or more after its
// Reserve applies nothing" — after, not before: a busy tenant's state is
// bounded by the window, and a reservation is not dropped because many
// others followed it within the window.
func TestAReservationIsKeptItsWholeWindowHoweverManyFollowIt(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Minute})
	require.True(t, f.reserve(t, "acme", "first", 1_000_000, 1000).Allowed)
	for i := range 150 {
		f.reserve(t, "acme", fmt.Sprintf("r%d", i), 1_000_000, 1)
	}
	f.advance(time.Second)
	assert.True(t, f.settle(t, "acme", "first", 1_000_000, 0), "a second old, within its minute: it applies")
}

// 05-refused-reserve-records-its-estimate: README (Keys), "a busy tenant's
// state stays bounded by the reservations the settle window still holds";
// Reserve, "otherwise it takes nothing" — a refused reserve holds no
// reservation, and leaves nothing in Redis for the tenant's next hour of
// traffic to carry.
func TestRefusedReservesLeaveNothingBehind(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Minute})
	require.True(t, f.reserve(t, "acme", "drain", 60, 60).Allowed) // empty; a token a second back
	for i := range 50 {
		f.advance(10 * time.Second) // 10 tokens back: the tenant is never idle
		require.False(t, f.reserve(t, "acme", fmt.Sprintf("big-%d", i), 60, 60).Allowed)
		require.True(t, f.reserve(t, "acme", fmt.Sprintf("small-%d", i), 60, 10).Allowed)
	}
	assert.LessOrEqual(t, f.entries(t), 25,
		"about 6 allowed reservations are within the minute's window; 50 refusals must leave nothing")
}

// 06-lowered-quota-clamped-only-on-reserve: README, "perMinute is passed on
// each call (a tenant's tier may change); a lowered quota clamps the
// balance at once" — on a Settle too, before it moves the bucket.
func TestASettleAtALoweredQuotaMovesTheClampedBalance(t *testing.T) {
	f := newFixture(t, Config{})
	require.Equal(t, Decision{Allowed: true, Remaining: 900}, f.reserve(t, "acme", "a", 1000, 100))
	require.True(t, f.settle(t, "acme", "a", 500, 400), "the tier moved down to 500 during the call")
	assert.Equal(t, 200, f.left(t, "acme", 500), "clamped to 500, then 300 more than reserved charged: 200")

	g := newFixture(t, Config{})
	g.reserve(t, "acme", "b", 1000, 200)
	g.reserve(t, "acme", "a", 1000, 800)
	require.True(t, g.settle(t, "acme", "a", 1000, 5000)) // −1,000: a minute of the old quota owed
	require.True(t, g.settle(t, "acme", "b", 100, 0), "the tier moved down to 100; b used nothing")
	assert.Equal(t, 100, g.left(t, "acme", 100), "the debt clamped to −100, then b's 200 refunded: full at 100")
}

// 07-late-reserve-refused-when-low: HINTS 4, "look the id up in the
// reservations set, both as itself and as the settled marker for it. If
// either is there, this reserve was resent after a lost reply, or a stalled
// Redis is running it after its settle: answer allowed, and take nothing"
// — whatever the bucket holds now.
func TestALateReserveIsAllowedWhenTheBucketIsLow(t *testing.T) {
	f := newFixture(t, Config{})
	require.True(t, f.reserve(t, "acme", "a", 100, 60).Allowed) // 40 left
	require.False(t, f.settle(t, "acme", "b", 100, 0), "b settled at 0 before its reserve ran")
	assert.Equal(t, Decision{Allowed: true, Remaining: 40}, f.reserve(t, "acme", "b", 100, 60),
		"the late reserve of b is allowed, though 60 do not fit in 40, and takes nothing")

	g := newFixture(t, Config{})
	g.reserve(t, "acme", "x", 600, 600)
	require.True(t, g.settle(t, "acme", "x", 600, 900)) // in debt: −300
	require.False(t, g.settle(t, "acme", "y", 600, 0))
	assert.Equal(t, Decision{Allowed: true}, g.reserve(t, "acme", "y", 600, 100),
		"in debt too: a reserve that runs after its settle is allowed and takes nothing")
}

// 08-settle-window-through-float-seconds: Config.SettleWindow "must be a
// whole number of milliseconds ... A Settle SettleWindow or more after its
// Reserve applies nothing" — and one a millisecond sooner applies, for a
// window such as 32.3 s whose seconds are no exact binary fraction.
func TestASettleWindowIsKeptToTheMillisecondWhateverItsValue(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 32300 * time.Millisecond})
	f.reserve(t, "acme", "a", 600, 100)
	f.reserve(t, "acme", "b", 600, 100)
	f.advance(32299 * time.Millisecond)
	assert.True(t, f.settle(t, "acme", "a", 600, 0), "32.299 s after its reserve, within a 32.3 s window")
	f.advance(time.Millisecond)
	assert.False(t, f.settle(t, "acme", "b", 600, 0), "32.3 s after: too late")
}

// 09-nil-element-read-as-zero: README, "Replies are read defensively:
// anything but three non-negative integers is ErrUnexpectedReply, never a
// panic" — a nil element (what a Lua false becomes) is not an integer.
func TestANilElementInAReplyIsUnexpected(t *testing.T) {
	for _, reply := range []any{[]any{int64(1), int64(5), nil}, []any{nil, int64(5), int64(0)}, []any{int64(1), nil, int64(0)}} {
		q, err := New(oddRedis{reply: reply}, Config{})
		require.NoError(t, err)
		var d Decision
		require.NotPanics(t, func() { d, err = q.Reserve(context.Background(), "acme", "r1", 100, 1) }, "%#v", reply)
		assert.ErrorIs(t, err, ErrUnexpectedReply, "reply %#v", reply)
		assert.False(t, d.Allowed, "reply %#v admits nothing", reply)
		var applied bool
		require.NotPanics(t, func() { applied, err = q.Settle(context.Background(), "acme", "r1", 100, 1) }, "%#v", reply)
		assert.ErrorIs(t, err, ErrUnexpectedReply, "reply %#v", reply)
		assert.False(t, applied, "reply %#v applies nothing", reply)
	}
}

// 10-settle-window-floored-at-a-second: Config.SettleWindow "is how long a
// reservation waits for its Settle ... A Settle SettleWindow or more after
// its Reserve applies nothing" (New accepts any whole number of
// milliseconds) — half a second is half a second, not a second.
func TestASettleWindowShorterThanASecondIsKept(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 500 * time.Millisecond})
	f.reserve(t, "acme", "a", 600, 100)
	f.reserve(t, "acme", "b", 600, 100)
	f.advance(400 * time.Millisecond)
	assert.True(t, f.settle(t, "acme", "a", 600, 0), "0.4 s after its reserve, within a 0.5 s window")
	f.advance(100 * time.Millisecond)
	assert.False(t, f.settle(t, "acme", "b", 600, 0), "0.5 s after: too late, it stays charged")
}

// 02-broken-with-nothing-reserved-ignores-its-report: Charge, "Broken: at
// least the reservation, more if a report says so"; README table, Broken:
// "at least the reservation" — a report of 300 after nothing was reserved
// is more than the reservation: 300.
func TestABrokenCallWithNothingReservedIsChargedItsReport(t *testing.T) {
	assert.Equal(t, 300, Charge(Broken, 0, 300), "the upstream reported 300 before the cut")
	assert.Equal(t, 300, Charge(Answered, 0, 300), "as an answered call would be")
}

// 03-settled-ids-in-a-key-keys-does-not-name: README, "Keys names every key
// the quota writes for a tenant, each with the hash tag {prefix:tenant}";
// lab stub, Keys "returns every key the quota may write for tenant ... an
// operator reads Keys to find (or delete) what a tenant holds" — the keys a
// Settle writes too, not only a Reserve's.
func TestEveryKeyASettleWritesIsNamedByKeys(t *testing.T) {
	f := newFixture(t, Config{Prefix: "tq"})
	keys := f.q.Keys("acme")
	f.reserve(t, "acme", "r1", 1000, 300)
	require.True(t, f.settle(t, "acme", "r1", 1000, 100))
	require.False(t, f.settle(t, "acme", "never", 1000, 0), "the undo of a reserve that never ran")
	require.NotEmpty(t, f.m.Keys())
	for _, k := range f.m.Keys() {
		assert.Contains(t, keys, k, "the quota wrote %q, which Keys does not name", k)
	}
}

// 04-a-settle-that-moves-nothing-writes-nothing: README, "Every key expires
// once its tenant is idle, none before what it holds could be rebuilt
// without it (a bucket forgotten before it is full again hands out free
// tokens)"; HINTS 3, "Store on every call ...: the quota it brings may be
// new" — a Settle that used exactly its estimate moves the bucket by
// nothing, but runs at the quota it brings: half spent at 100 a minute is
// 30 s from full, at 1000 a minute it is 57 s from full.
func TestASettleThatMovesNothingKeepsTheBucketUntilFullAtItsQuota(t *testing.T) {
	f := newFixture(t, Config{})
	require.Equal(t, Decision{Allowed: true, Remaining: 50}, f.reserve(t, "acme", "r1", 100, 50))
	require.True(t, f.settle(t, "acme", "r1", 1000, 50), "the tier moved up to 1000 during the call; it used what it reserved")
	f.advance(30 * time.Second) // 50 + 30 s at 1000 a minute: 550, not full
	d := f.reserve(t, "acme", "r2", 1000, 600)
	assert.False(t, d.Allowed, "550 tokens do not hold 600: the bucket was not forgotten as full")
	assert.Equal(t, 550, d.Remaining)
}

// 05-prefix-trailing-colon-trimmed: Config.Prefix "starts each key's hash
// tag, {Prefix:tenant}; "" means DefaultPrefix. It must not contain braces"
// — any other prefix is kept as given, a trailing colon too: "gw:" and "gw"
// are two prefixes, and two quotas under them do not share a bucket.
func TestAPrefixEndingInAColonIsKeptAsGiven(t *testing.T) {
	f := newFixture(t, Config{Prefix: "gw"})
	other, err := New(f.rdb, Config{Prefix: "gw:"})
	require.NoError(t, err)
	for _, k := range other.Keys("acme") {
		assert.True(t, strings.HasPrefix(k, "{gw::acme}"), "%q: the tag is {Prefix:tenant}, the prefix as given", k)
	}
	f.reserve(t, "acme", "r1", 100, 100)
	d, err := other.Reserve(context.Background(), "acme", "r2", 100, 100)
	require.NoError(t, err)
	assert.Equal(t, Decision{Allowed: true, Remaining: 0}, d, "the quota under \"gw:\" has a bucket of its own, full")
}

// 06-long-ids-cut-short: ErrInvalidArgument is for "an empty id" (of the
// ids); README, "a Reserve that finds its id already open takes nothing
// more" — its own id: two long ids that share their first 64 bytes are two
// reservations, each charged, each settled on its own.
func TestLongIDsThatShareABeginningAreSeparateReservations(t *testing.T) {
	f := newFixture(t, Config{})
	common := strings.Repeat("request-", 12) // 96 bytes
	a, b := common+"a", common+"b"
	assert.Equal(t, Decision{Allowed: true, Remaining: 700}, f.reserve(t, "acme", a, 1000, 300))
	assert.Equal(t, Decision{Allowed: true, Remaining: 400}, f.reserve(t, "acme", b, 1000, 300),
		"another id: another reservation, which takes its 300")
	assert.True(t, f.settle(t, "acme", a, 1000, 0))
	assert.True(t, f.settle(t, "acme", b, 1000, 100), "b is open too, to be settled")
	assert.Equal(t, 900, f.left(t, "acme", 1000), "300 back for a, 200 for b")
}

// garbleOnce is a Redis client whose next script reply, once armed, is
// replaced by "OK" after the script ran — a proxy that garbles one answer
// — or, with lose set, by that error: a connection dropped before the
// reply came back.
type garbleOnce struct {
	*redis.Client
	lose  error
	calls atomic.Int32
	armed atomic.Bool
}

func (g *garbleOnce) reply(ctx context.Context, c *redis.Cmd) *redis.Cmd {
	g.calls.Add(1)
	if c.Err() == nil && g.armed.CompareAndSwap(true, false) {
		odd := redis.NewCmd(ctx)
		if g.lose != nil {
			odd.SetErr(g.lose)
		} else {
			odd.SetVal("OK")
		}
		return odd
	}
	return c
}

func (g *garbleOnce) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return g.reply(ctx, g.Client.EvalSha(ctx, sha, keys, args...))
}

func (g *garbleOnce) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return g.reply(ctx, g.Client.Eval(ctx, script, keys, args...))
}

// 07-unexpected-reply-asked-again: README, "Reserve: ... one script call";
// "Replies are read defensively: anything but three non-negative integers
// is ErrUnexpectedReply"; Settle "reports whether it applied" — a garbled
// reply is the caller's ErrUnexpectedReply after one script call, never
// turned, by running the script again, into a Settle that "did not apply"
// when it did.
func TestAnUnexpectedReplyIsOneScriptCallAndNeverReadAsNotApplied(t *testing.T) {
	f := newFixture(t, Config{})
	g := &garbleOnce{Client: f.rdb}
	q, err := New(g, Config{})
	require.NoError(t, err)
	_, err = q.Reserve(context.Background(), "acme", "r1", 1000, 400) // loads the script
	require.NoError(t, err)

	g.armed.Store(true)
	before := g.calls.Load()
	_, err = q.Reserve(context.Background(), "acme", "r2", 1000, 100)
	assert.ErrorIs(t, err, ErrUnexpectedReply)
	assert.Equal(t, int32(1), g.calls.Load()-before, "one script call for a Reserve, whatever its reply")

	g.armed.Store(true)
	before = g.calls.Load()
	applied, err := q.Settle(context.Background(), "acme", "r1", 1000, 100)
	assert.ErrorIs(t, err, ErrUnexpectedReply, "the reply was garbled: the caller is told so")
	assert.False(t, applied)
	assert.Equal(t, int32(1), g.calls.Load()-before, "one script call for a Settle, whatever its reply")
	assert.Equal(t, 800, f.left(t, "acme", 1000), "the settle ran (300 of r1 back), r2 took its 100")
}

// 09-an-empty-id-passes-with-zero-tokens: ErrInvalidArgument: "an empty or
// brace-holding tenant, an empty id, ..."; README, "arguments checked
// before Redis (ErrInvalidArgument ...)" — an empty id, for any count, 0
// too.
func TestAnEmptyIDIsRefusedEvenForZeroTokens(t *testing.T) {
	f := newFixture(t, Config{})
	before := f.m.CommandCount()
	_, err := f.q.Reserve(context.Background(), "acme", "", 100, 0)
	assert.ErrorIs(t, err, ErrInvalidArgument, "Reserve of 0 under an empty id")
	_, err = f.q.Settle(context.Background(), "acme", "", 100, 0)
	assert.ErrorIs(t, err, ErrInvalidArgument, "Settle of 0 under an empty id")
	assert.Equal(t, before, f.m.CommandCount(), "nothing reached Redis")
	assert.Empty(t, f.m.Keys())
}

// 10-settle-answers-a-caller-who-left-before-its-arguments: README,
// "arguments checked before Redis (ErrInvalidArgument ...)"; lab stub,
// Settle: "Arguments, round trips, replies and errors as for Reserve" (and
// TestAnEstimateAboveTheQuotaIsRefusedBeforeRedis: "the argument error,
// whatever Redis or the context would say") — a malformed Settle is
// ErrInvalidArgument, also from a caller who left: it is a bug to fix, not
// a call to retry.
func TestASettleWithBadArgumentsIsRefusedWhateverTheContextSays(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dctx, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	for _, c := range []struct {
		tenant, id   string
		perMinute, n int
	}{
		{"", "r1", 100, 1}, {"ac{me", "r1", 100, 1}, {"acme", "", 100, 1}, {"acme", "r1", 0, 1},
		{"acme", "r1", 100, -1}, {"acme", "r1", 100, MaxPerMinute + 1},
	} {
		_, err := f.q.Settle(ctx, c.tenant, c.id, c.perMinute, c.n)
		assert.ErrorIs(t, err, ErrInvalidArgument, "Settle %+v, caller gone", c)
		_, err = f.q.Settle(dctx, c.tenant, c.id, c.perMinute, c.n)
		assert.ErrorIs(t, err, ErrInvalidArgument, "Settle %+v, deadline passed", c)
	}
}

// Estimate: "its prompt ... plus choices answers of up to maxTokens each";
// README: "plus choices × maxTokens". max_tokens and n come from the
// tenant's request; a product that overflows int must not wrap round to a
// small (or negative) estimate. Reference: Estimate(0, 1<<62, 4) == 0 — a
// request for four answers of 2^62 tokens reserves nothing (and passes
// unless in debt); Estimate(0, MaxInt, 2) == -2, which Reserve calls an
// invalid argument instead of ErrEstimateTooLarge. Anything above
// MaxPerMinute (say, saturating there plus one) keeps the promise that
// matters: Reserve refuses it as ErrEstimateTooLarge.
func TestAnEstimateThatOverflowsIsNeverSmall(t *testing.T) {
	for _, c := range []struct{ prompt, maxTokens, choices int }{
		{0, 1 << 62, 4}, {0, math.MaxInt, 2}, {math.MaxInt, math.MaxInt, 1}, {400, math.MaxInt / 3, 4},
	} {
		e := Estimate(c.prompt, c.maxTokens, c.choices)
		assert.Greater(t, e, MaxPerMinute, "Estimate(%d, %d, %d) = %d: more than any quota holds", c.prompt, c.maxTokens, c.choices, e)
	}
	f := newFixture(t, Config{})
	_, err := f.q.Reserve(context.Background(), "acme", "r1", MaxPerMinute, Estimate(0, 1<<62, 4))
	assert.ErrorIs(t, err, ErrEstimateTooLarge, "four answers of 2^62 tokens can never fit")
}

// Lab stub, New: "A nil rdb ... is an error wrapping ErrInvalidConfig".
// A *redis.Client that was never made (var rdb *redis.Client) is a nil rdb
// to its caller; the reference accepts it (the interface holding it is not
// nil), and the first Reserve then panics inside go-redis.
func TestANilClientOfAConcreteTypeIsRefused(t *testing.T) {
	var rdb *redis.Client
	var q *Quota
	var err error
	require.NotPanics(t, func() { q, err = New(rdb, Config{}) })
	assert.ErrorIs(t, err, ErrInvalidConfig, "a nil *redis.Client is no Redis client")
	if err == nil && q != nil {
		assert.NotPanics(t, func() { _, _ = q.Reserve(context.Background(), "acme", "r1", 100, 1) })
	}
}

// Decision.RetryAfter "is, for a refused request, the time until its
// estimate fits ...; 0 when allowed"; README: "Replies are read
// defensively". A reply {1, 5, 250} (never the script's) comes back from
// the reference as Allowed with a RetryAfter of 250 ms — neither an
// ErrUnexpectedReply nor a Decision its doc allows. (Minor: only a reply
// the script never gives shows it.)
func TestAnAllowedDecisionNeverCarriesARetryAfter(t *testing.T) {
	q, err := New(oddRedis{reply: []any{int64(1), int64(5), int64(250)}}, Config{})
	require.NoError(t, err)
	d, err := q.Reserve(context.Background(), "acme", "r1", 100, 1)
	if err == nil {
		assert.False(t, d.Allowed && d.RetryAfter != 0, "allowed with RetryAfter %s", d.RetryAfter)
	} else {
		assert.ErrorIs(t, err, ErrUnexpectedReply)
	}
}
