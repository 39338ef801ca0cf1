package quotas

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Unit tests run against miniredis, an in-process Redis running the same
// Lua. The test owns Redis' clock: SetTime moves what TIME returns and
// FastForward expires keys. The local clock never moves, so a quota that
// refilled from time.Now() instead of Redis' TIME would see no refill.
// miniredis runs one command at a time: races need real Redis
// (integration_test.go).

type fixture struct {
	m     *miniredis.Miniredis
	rdb   *redis.Client
	clock time.Time
	q     *Quota
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	m := miniredis.RunT(t)
	f := &fixture{m: m, clock: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	m.SetTime(f.clock)
	f.rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = f.rdb.Close() })
	q, err := New(f.rdb, cfg)
	require.NoError(t, err)
	require.NotNil(t, q, "New returns a Quota")
	f.q = q
	return f
}

// advance moves Redis' clock, and its key expiry, forward by d.
func (f *fixture) advance(d time.Duration) {
	f.clock = f.clock.Add(d)
	f.m.SetTime(f.clock)
	f.m.FastForward(d)
}

func (f *fixture) stepBack(d time.Duration) {
	f.clock = f.clock.Add(-d)
	f.m.SetTime(f.clock)
}

// reserve reserves and requires no error.
func (f *fixture) reserve(t *testing.T, tenant, id string, perMinute, estimate int) Decision {
	t.Helper()
	d, err := f.q.Reserve(context.Background(), tenant, id, perMinute, estimate)
	require.NoError(t, err)
	return d
}

func (f *fixture) settle(t *testing.T, tenant, id string, perMinute, used int) bool {
	t.Helper()
	applied, err := f.q.Settle(context.Background(), tenant, id, perMinute, used)
	require.NoError(t, err)
	return applied
}

// left is what a 0-token reserve says remains (a probe that takes nothing).
func (f *fixture) left(t *testing.T, tenant string, perMinute int) int {
	t.Helper()
	return f.reserve(t, tenant, fmt.Sprintf("probe-%d", f.m.CommandCount()), perMinute, 0).Remaining
}

func TestReserveTakesTheEstimateFromAFullBucket(t *testing.T) {
	f := newFixture(t, Config{})
	d := f.reserve(t, "acme", "r1", 1000, 300)
	assert.Equal(t, Decision{Allowed: true, Remaining: 700}, d)
	d = f.reserve(t, "acme", "r2", 1000, 700)
	assert.Equal(t, Decision{Allowed: true, Remaining: 0}, d, "a reserve may take the very last token")
}

func TestARefusedReserveTakesNothingAndSaysWhenItFits(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 550) // 50 left; 10 tokens a second back
	d := f.reserve(t, "acme", "r2", 600, 100)
	assert.False(t, d.Allowed)
	assert.Equal(t, 50, d.Remaining, "a refusal takes nothing")
	assert.Equal(t, 5*time.Second, d.RetryAfter, "50 more tokens at 10 a second")
	d = f.reserve(t, "acme", "r3", 600, 50)
	assert.True(t, d.Allowed, "the refusal left the 50 tokens there")
}

func TestRetryAfterIsRoundedUpNeverDown(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 7, 7) // 7 a minute: one token every 8571.43 ms
	d := f.reserve(t, "acme", "r2", 7, 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 8572*time.Millisecond, d.RetryAfter, "rounded up: one millisecond sooner it would still be refused")
	f.advance(8571 * time.Millisecond)
	assert.False(t, f.reserve(t, "acme", "r3", 7, 1).Allowed)
	f.advance(time.Millisecond)
	assert.True(t, f.reserve(t, "acme", "r4", 7, 1).Allowed)
}

func TestTheBucketRefillsOnRedisClock(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600)
	f.advance(3 * time.Second) // 10 tokens a second
	assert.Equal(t, 30, f.left(t, "acme", 600))
	f.advance(time.Hour)
	assert.Equal(t, 600, f.left(t, "acme", 600), "never above a minute's quota")
}

func TestAClockThatStepsBackRefillsNothing(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600)
	f.advance(2 * time.Second)
	assert.Equal(t, 20, f.left(t, "acme", 600))
	f.stepBack(time.Minute) // a failover to a replica whose clock is behind
	assert.Equal(t, 20, f.left(t, "acme", 600), "no refill, and no tokens taken back")
	f.advance(30 * time.Second) // still behind the last refill
	assert.Equal(t, 20, f.left(t, "acme", 600), "time before the last refill is not counted twice")
	f.advance(31 * time.Second)
	assert.Equal(t, 30, f.left(t, "acme", 600), "one second past the last refill: 10 tokens")
}

func TestAnEstimateAboveTheQuotaIsAnError(t *testing.T) {
	f := newFixture(t, Config{})
	_, err := f.q.Reserve(context.Background(), "acme", "r1", 100, 101)
	require.ErrorIs(t, err, ErrEstimateTooLarge, "it could never fit: waiting would not help")
	assert.Equal(t, 100, f.left(t, "acme", 100))
	assert.True(t, f.reserve(t, "acme", "r2", 100, 100).Allowed, "exactly the quota fits a full bucket")
}

func TestSettleRefundsWhatWasNotUsed(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 400)
	assert.True(t, f.settle(t, "acme", "r1", 1000, 150))
	assert.Equal(t, 850, f.left(t, "acme", 1000), "400 reserved, 150 used: 250 back")
}

func TestSettleChargesAnAnswerLongerThanReserved(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 100)
	assert.True(t, f.settle(t, "acme", "r1", 1000, 350))
	assert.Equal(t, 650, f.left(t, "acme", 1000), "250 more than reserved is charged too")
}

func TestSettleNeverFillsTheBucketAboveItsQuota(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 300)
	f.advance(2 * time.Minute) // refilled to full while the call ran
	assert.True(t, f.settle(t, "acme", "r1", 600, 0))
	assert.Equal(t, 600, f.left(t, "acme", 600), "a refund tops a full bucket up to full, no more")
	f.reserve(t, "acme", "r2", 600, 600)
	assert.False(t, f.reserve(t, "acme", "r3", 600, 1).Allowed)
}

func TestSettleRefundsWhatReserveTookWhateverTheCallerClaims(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 100)
	f.reserve(t, "acme", "r2", 1000, 100)
	// r1 used 0: 100 back, not more — Settle is not told the estimate,
	// Redis remembers it.
	assert.True(t, f.settle(t, "acme", "r1", 1000, 0))
	assert.Equal(t, 900, f.left(t, "acme", 1000))
}

func TestDebtIsOneMinuteOfQuotaByDefault(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600)
	assert.True(t, f.settle(t, "acme", "r1", 600, 600+5000)) // 5000 more than reserved: 600 of it owed
	assert.Equal(t, 0, f.left(t, "acme", 600), "in debt: nothing remains")
	d := f.reserve(t, "acme", "r2", 600, 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 60*time.Second+100*time.Millisecond, d.RetryAfter, "600 owed and 1 more to fit, at 10 a second")
	f.advance(60 * time.Second)
	assert.Equal(t, 0, f.left(t, "acme", 600), "the debt is paid off, nothing more yet")
	f.advance(time.Second)
	assert.Equal(t, 10, f.left(t, "acme", 600))
}

func TestDebtCarriesOverUpToTheConfiguredMinutes(t *testing.T) {
	f := newFixture(t, Config{DebtMinutes: 3})
	f.reserve(t, "acme", "r1", 600, 600)
	assert.True(t, f.settle(t, "acme", "r1", 600, 600+2000)) // 2000 over: 1800 owed (3 minutes)
	f.advance(179 * time.Second)
	assert.Equal(t, 0, f.left(t, "acme", 600), "three minutes of quota owed, not one")
	f.advance(2 * time.Second)
	assert.Equal(t, 10, f.left(t, "acme", 600))
}

func TestAZeroEstimatePassesUnlessInDebt(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600)
	assert.True(t, f.reserve(t, "acme", "r2", 600, 0).Allowed, "at zero, not below it")
	f.settle(t, "acme", "r1", 600, 610)
	assert.False(t, f.reserve(t, "acme", "r3", 600, 0).Allowed, "owing 10 tokens")
}

func TestSettleTwiceAppliesOnce(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 500)
	assert.True(t, f.settle(t, "acme", "r1", 1000, 100))
	assert.False(t, f.settle(t, "acme", "r1", 1000, 100), "a resent settle (a lost reply, a retry) applies nothing")
	assert.False(t, f.settle(t, "acme", "r1", 1000, 0), "whatever usage it now claims")
	assert.Equal(t, 900, f.left(t, "acme", 1000))
}

func TestConcurrentSettlesOfOneReservationApplyOnce(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 500)
	var wg sync.WaitGroup
	applied := make(chan bool, 8)
	for range 8 {
		wg.Go(func() {
			ok, err := f.q.Settle(context.Background(), "acme", "r1", 1000, 0)
			assert.NoError(t, err)
			applied <- ok
		})
	}
	wg.Wait()
	close(applied)
	n := 0
	for ok := range applied {
		if ok {
			n++
		}
	}
	assert.Equal(t, 1, n, "exactly one settle applied")
	assert.Equal(t, 1000, f.left(t, "acme", 1000))
}

func TestAReserveResentWithTheSameIDTakesOnce(t *testing.T) {
	f := newFixture(t, Config{})
	assert.True(t, f.reserve(t, "acme", "r1", 1000, 300).Allowed)
	d := f.reserve(t, "acme", "r1", 1000, 300)
	assert.True(t, d.Allowed, "the resent reserve is the same reservation, allowed")
	assert.Equal(t, 700, f.left(t, "acme", 1000), "taken once")
	assert.True(t, f.settle(t, "acme", "r1", 1000, 300))
	assert.Equal(t, 700, f.left(t, "acme", 1000))
}

func TestAReserveThatArrivesAfterItsSettleTakesNothing(t *testing.T) {
	f := newFixture(t, Config{})
	// A Reserve that timed out on the replica's side may still run on
	// Redis; the replica settles its id at 0, and that settle may run
	// first. The reserve must then take nothing.
	assert.False(t, f.settle(t, "acme", "r1", 1000, 0), "nothing to settle yet")
	f.reserve(t, "acme", "r1", 1000, 300)
	assert.Equal(t, 1000, f.left(t, "acme", 1000), "the late reserve took nothing")
	assert.False(t, f.settle(t, "acme", "r1", 1000, 0))
	f.reserve(t, "acme", "r2", 1000, 300)
	assert.Equal(t, 700, f.left(t, "acme", 1000), "another id is not affected")
}

func TestASettleAfterTheWindowLeavesTheReservationCharged(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Minute})
	f.reserve(t, "acme", "r1", 60_000, 60_000)
	f.reserve(t, "acme", "r2", 60_000, 0)
	f.advance(59999 * time.Millisecond)
	assert.True(t, f.settle(t, "acme", "r2", 60_000, 0), "within the window")
	f.advance(time.Millisecond)
	assert.False(t, f.settle(t, "acme", "r1", 60_000, 0), "a minute after its reserve: too late")
	assert.Equal(t, 60_000, f.left(t, "acme", 60_000), "refilled by the clock — but not refunded on top")
	f.reserve(t, "acme", "r3", 60_000, 60_000)
	assert.Equal(t, 0, f.left(t, "acme", 60_000))
}

func TestAReservationNeverSettledStaysCharged(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 600) // the replica crashed: no settle ever comes
	f.advance(30 * time.Second)
	assert.Equal(t, 300, f.left(t, "acme", 600), "charged its estimate; only the clock gives tokens back")
}

func TestALoweredQuotaKeepsTheBalanceWithinItsBounds(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 100) // 900 left of 1000
	assert.Equal(t, 500, f.left(t, "acme", 500), "a tier moved down to 500: at most full")
	f.reserve(t, "acme", "r2", 500, 500)
	assert.True(t, f.settle(t, "acme", "r2", 500, 2000)) // 1500 over, of a 500 quota: 500 owed
	f.advance(59 * time.Second)
	assert.Equal(t, 0, f.left(t, "acme", 500))
	f.advance(2 * time.Second)
	assert.Equal(t, 8, f.left(t, "acme", 500), "owed one minute of the new quota (500), not the 1500 over: back above zero after 60 s")
}

func TestTenantsHaveSeparateBuckets(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 100, 100)
	assert.True(t, f.reserve(t, "globex", "r1", 100, 100).Allowed, "the same id under another tenant is another reservation")
	assert.True(t, f.settle(t, "acme", "r1", 100, 0))
	assert.Equal(t, 0, f.left(t, "globex", 100), "settling acme's r1 refunded nothing to globex")
}

func TestEveryKeyIsHashTaggedByTenant(t *testing.T) {
	f := newFixture(t, Config{Prefix: "tq"})
	keys := f.q.Keys("acme")
	require.NotEmpty(t, keys)
	f.reserve(t, "acme", "r1", 100, 10)
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, "{tq:acme}"), "%q: on Redis Cluster a script may only touch keys of one slot", k)
	}
	for _, k := range f.m.Keys() {
		assert.Contains(t, keys, k, "the script wrote %q, which Keys does not name", k)
	}
	other := newFixture(t, Config{})
	for _, k := range other.q.Keys("acme") {
		assert.True(t, strings.HasPrefix(k, "{"+DefaultPrefix+":acme}"), "%q: the default prefix", k)
	}
}

func TestEveryKeyExpiresOnceItsTenantIsIdle(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Minute})
	f.reserve(t, "acme", "r1", 600, 300)
	f.settle(t, "acme", "r1", 600, 100)
	for _, k := range f.m.Keys() {
		assert.Positive(t, f.m.TTL(k), "%s has a TTL", k)
	}
	f.advance(10 * time.Minute)
	assert.Empty(t, f.m.Keys(), "an idle tenant costs Redis nothing once the window has passed")
}

// A key may expire once what it holds can be rebuilt without it — a
// bucket once it would be full again — and not a moment before: a bucket
// forgotten early reads as full, and hands out tokens nobody paid for.
func TestASpentBucketIsNotForgottenBeforeItRefills(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 600, 300) // 30 s to full
	f.advance(30*time.Second - time.Millisecond)
	assert.Equal(t, 599, f.left(t, "acme", 600), "1 ms short of full, the bucket is still there: 599, not a fresh 600")
	f.advance(time.Millisecond)
	assert.Equal(t, 600, f.left(t, "acme", 600), "full")
}

// entries counts what Redis holds, whatever the design: each field of a
// hash, member of a set or sorted set, element of a list, and each string.
func (f *fixture) entries(t *testing.T) int {
	t.Helper()
	n := 0
	for _, k := range f.m.Keys() {
		var members []string
		var err error
		switch f.m.Type(k) {
		case "hash":
			members, err = f.m.HKeys(k)
		case "zset":
			members, err = f.m.ZMembers(k)
		case "set":
			members, err = f.m.Members(k)
		case "list":
			members, err = f.m.List(k)
		default:
			members = []string{k}
		}
		require.NoError(t, err)
		n += len(members)
	}
	return n
}

// A busy tenant is never idle, so its keys never expire: what Redis holds
// for it must still be bounded by the reservations the window keeps, not
// grow with every reservation it ever made.
func TestOldReservationsAreForgotten(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: time.Minute})
	for i := range 50 {
		f.reserve(t, "acme", fmt.Sprintf("r%d", i), 1_000_000, 1)
		f.advance(10 * time.Second)
	}
	assert.LessOrEqual(t, f.entries(t), 25,
		"about 7 reservations are within the minute's window; 50 made in all must not all be kept")
}

func TestOneRoundTripPerReserveAndSettle(t *testing.T) {
	f := newFixture(t, Config{})
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	f.reserve(t, "acme", "warm", 100, 1) // may load the script
	log.Take()
	f.reserve(t, "acme", "r1", 100, 1)
	f.settle(t, "acme", "r1", 100, 1)
	assert.Equal(t, []string{"evalsha", "evalsha"}, log.Take(), "one EVALSHA each: no GET then SET, no MULTI, no separate TIME")
}

func TestACacheFlushFallsBackToEval(t *testing.T) {
	f := newFixture(t, Config{})
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	f.reserve(t, "acme", "r1", 100, 10)
	require.NoError(t, f.rdb.ScriptFlush(context.Background()).Err()) // a restart or failover empties the cache
	log.Take()
	d := f.reserve(t, "acme", "r2", 100, 10)
	assert.Equal(t, Decision{Allowed: true, Remaining: 80}, d)
	assert.Equal(t, []string{"evalsha", "eval"}, log.Take(), "NOSCRIPT from EVALSHA is answered by one EVAL")
}

func TestBadArgumentsAreRefusedBeforeRedis(t *testing.T) {
	f := newFixture(t, Config{})
	before := f.m.CommandCount()
	for _, c := range []struct {
		tenant, id   string
		perMinute, n int
	}{
		{"", "r1", 100, 1}, {"ac{me", "r1", 100, 1}, {"acme}", "r1", 100, 1}, {"acme", "", 100, 1},
		{"acme", "r1", 0, 1}, {"acme", "r1", -5, 1}, {"acme", "r1", MaxPerMinute + 1, 1}, {"acme", "r1", 100, -1},
	} {
		_, err := f.q.Reserve(context.Background(), c.tenant, c.id, c.perMinute, c.n)
		assert.ErrorIs(t, err, ErrInvalidArgument, "Reserve %+v", c)
		_, err = f.q.Settle(context.Background(), c.tenant, c.id, c.perMinute, c.n)
		assert.ErrorIs(t, err, ErrInvalidArgument, "Settle %+v", c)
	}
	_, err := f.q.Settle(context.Background(), "acme", "r1", 100, MaxPerMinute+1)
	assert.ErrorIs(t, err, ErrInvalidArgument, "a usage beyond any quota is a bad report, not a debt")
	assert.Equal(t, before, f.m.CommandCount(), "nothing reached Redis")
	_, err = f.q.Reserve(context.Background(), "acme", "r1", MaxPerMinute, MaxPerMinute)
	assert.NoError(t, err, "the largest quota works, exactly")
}

func TestBadConfigIsRefused(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, cfg := range []Config{
		{Prefix: "a{b"}, {Prefix: "ab}"}, {SettleWindow: -time.Second}, {SettleWindow: time.Microsecond},
		{DebtMinutes: -1}, {DebtMinutes: MaxDebtMinutes + 1},
	} {
		_, err := New(rdb, cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
	}
	_, err := New(nil, Config{})
	assert.ErrorIs(t, err, ErrInvalidConfig, "no client")
	q, err := New(rdb, Config{DebtMinutes: MaxDebtMinutes, SettleWindow: time.Millisecond})
	assert.NoError(t, err, "the bounds themselves are fine")
	assert.NotNil(t, q)
}

// oddRedis answers every script call with reply, whatever it was asked.
type oddRedis struct{ reply any }

func (o oddRedis) cmd(ctx context.Context) *redis.Cmd {
	c := redis.NewCmd(ctx)
	c.SetVal(o.reply)
	return c
}
func (o oddRedis) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return o.cmd(ctx)
}
func (o oddRedis) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return o.cmd(ctx)
}
func (o oddRedis) EvalRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return o.cmd(ctx)
}
func (o oddRedis) EvalShaRO(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return o.cmd(ctx)
}
func (o oddRedis) ScriptExists(ctx context.Context, _ ...string) *redis.BoolSliceCmd {
	return redis.NewBoolSliceCmd(ctx)
}
func (o oddRedis) ScriptLoad(ctx context.Context, _ string) *redis.StringCmd {
	return redis.NewStringCmd(ctx)
}

func TestAnUnexpectedReplyIsAnErrorNotAPanic(t *testing.T) {
	// A proxy, a stale deploy with another script under the same SHA, a
	// bug: whatever Redis answers, the quota must not panic or admit.
	for _, reply := range []any{"OK", nil, []any{int64(1), int64(2)}, []any{int64(1), int64(-1), int64(0)},
		[]any{int64(1), "x", int64(0)}, []any{int64(1), int64(2), int64(3), int64(4)}} {
		q, err := New(oddRedis{reply: reply}, Config{})
		require.NoError(t, err)
		var d Decision
		require.NotPanics(t, func() { d, err = q.Reserve(context.Background(), "acme", "r1", 100, 1) }, "%#v", reply)
		assert.ErrorIs(t, err, ErrUnexpectedReply, "reply %#v", reply)
		assert.False(t, d.Allowed, "reply %#v admits nothing", reply)
		var applied bool
		require.NotPanics(t, func() { applied, err = q.Settle(context.Background(), "acme", "r1", 100, 1) }, "%#v", reply)
		assert.ErrorIs(t, err, ErrUnexpectedReply, "reply %#v", reply)
		assert.False(t, applied)
	}
}

func TestACallerWhoLeftGetsItsContextsError(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.q.Reserve(ctx, "acme", "r1", 100, 10)
	assert.ErrorIs(t, err, context.Canceled)
	ctx, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	_, err = f.q.Settle(ctx, "acme", "r1", 100, 10)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 100, f.left(t, "acme", 100), "nothing was taken")
}

// A Reserve resent after a lost reply finds its id whatever the bucket
// holds now: the request it stands for has paid, and is not refused. A
// late Reserve, after the Settle of its id, takes nothing either.
func TestAResentOrLateReserveIsAllowedWhenTheBucketIsLow(t *testing.T) {
	f := newFixture(t, Config{})
	require.True(t, f.reserve(t, "acme", "a", 100, 60).Allowed)
	assert.Equal(t, Decision{Allowed: true, Remaining: 40}, f.reserve(t, "acme", "a", 100, 60),
		"40 left, fewer than the 60 asked: the resent reserve is allowed all the same, and takes nothing more")
	assert.False(t, f.settle(t, "acme", "b", 100, 0), "b was never reserved")
	f.reserve(t, "acme", "b", 100, 60)
	assert.Equal(t, 40, f.left(t, "acme", 100), "the late reserve of b took nothing")
}

// A quota lowered since the last call bounds the balance at once, below
// as above: a tenant moved to a smaller tier owes at most DebtMinutes of
// the new quota, not of the old.
func TestALoweredQuotaClampsDebtToTheNewFloor(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 1000)
	f.settle(t, "acme", "r1", 1000, 5000) // 4,000 over: the debt stops at one minute, -1,000
	assert.Equal(t, Decision{Allowed: false, RetryAfter: 2 * time.Minute}, f.reserve(t, "acme", "r2", 100, 100),
		"at 100 a minute the debt is at most -100: two minutes to 100, not eleven")
}

// A reservation is remembered for its whole window, however old the
// tenant's other reservations are.
func TestAReservationIsKeptItsWholeWindowWhateverCameBefore(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "a", 600, 10)
	f.advance(9 * time.Second)
	f.reserve(t, "acme", "b", 600, 10)
	f.advance(3 * time.Second)
	assert.False(t, f.settle(t, "acme", "a", 600, 0), "a is 12 s old: past its window")
	assert.True(t, f.settle(t, "acme", "b", 600, 0), "b is 3 s old: within its window, whatever became of a's")
}
