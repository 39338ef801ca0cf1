package quotas

// Tests for the bugs of an outsider's eighth bank aimed at the tests' gaps,
// and for two holes the bank's reader found in the reference (a nil reply;
// a settle window finer than Redis' clock): each passes on the reference
// and fails with its bug.

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 01-estimate-too-large-is-an-invalid-argument: "ErrInvalidArgument: an
// empty or brace-holding tenant, an empty id, a quota outside [1,
// MaxPerMinute], a negative estimate or usage"; README: "arguments checked
// before Redis (ErrInvalidArgument; ErrEstimateTooLarge for an estimate
// above perMinute)" — two errors for two causes: a well-formed request
// that can never fit is not a malformed one, and a malformed one is not
// too large.
func TestAnEstimateAboveTheQuotaIsNotAnInvalidArgument(t *testing.T) {
	f := newFixture(t, Config{})
	_, err := f.q.Reserve(context.Background(), "acme", "r1", 100, 101)
	require.ErrorIs(t, err, ErrEstimateTooLarge)
	assert.NotErrorIs(t, err, ErrInvalidArgument, "101 of 100 is well formed: it can never fit")
	_, err = f.q.Reserve(context.Background(), "", "r1", 100, 1)
	require.ErrorIs(t, err, ErrInvalidArgument)
	assert.NotErrorIs(t, err, ErrEstimateTooLarge, "an empty tenant is malformed, not too large")
}

// 02-id-with-a-brace-refused: "ErrInvalidArgument: an empty or
// brace-holding tenant, an empty id, ..." — a brace is refused in a tenant,
// which is inside the keys' hash tag; an id is not in any key, and any
// non-empty id is a reservation's.
func TestAnIDWithBracesIsAnIDLikeAnyOther(t *testing.T) {
	f := newFixture(t, Config{})
	for _, id := range []string{"{req-1}", "a}b", "{"} {
		d, err := f.q.Reserve(context.Background(), "acme", id, 1000, 100)
		require.NoError(t, err, "id %q", id)
		assert.Equal(t, Decision{Allowed: true, Remaining: 900}, d, "id %q", id)
		applied, err := f.q.Settle(context.Background(), "acme", id, 1000, 0)
		require.NoError(t, err, "id %q", id)
		assert.True(t, applied, "id %q: open, to be settled", id)
		assert.Equal(t, 1000, f.left(t, "acme", 1000), "id %q: refunded", id)
	}
}

// 04-cancelled-reserve-settled-in-place: README, "Reserve: arguments
// checked before Redis ...; one script call"; Settle: "false for an id ...
// never reserved (then a later Reserve of it takes nothing)" — that is the
// caller's Settle, not one Reserve sends on its own: a Reserve whose caller
// left before it ran makes one script call at most, and the caller's retry
// of the id takes its estimate like any first Reserve.
func TestAReserveRetriedAfterItsCallerLeftTakesItsEstimate(t *testing.T) {
	f := newFixture(t, Config{})
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.q.Reserve(ctx, "acme", "r1", 100, 60)
	require.ErrorIs(t, err, context.Canceled)
	assert.LessOrEqual(t, len(log.Take()), 1, "one script call at most, and no settle of its own")
	assert.Equal(t, Decision{Allowed: true, Remaining: 40}, f.reserve(t, "acme", "r1", 100, 60),
		"the first attempt never ran: the retry takes its 60")
	assert.True(t, f.settle(t, "acme", "r1", 100, 0), "and it is open, to be settled")
	assert.Equal(t, 100, f.left(t, "acme", 100))
}

// 05-redis-errors-read-as-unexpected-replies: "ErrUnexpectedReply: Redis
// answered something the script never returns"; README, "A caller's
// cancelled context comes back as its error" — a caller that left, or a
// Redis that never answered, is not an unexpected reply.
func TestNoAnswerIsNotAnUnexpectedReply(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.q.Reserve(ctx, "acme", "r1", 100, 10)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrUnexpectedReply, "the caller left: Redis answered nothing")
	dctx, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	_, err = f.q.Settle(dctx, "acme", "r1", 100, 10)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, ErrUnexpectedReply, "the deadline passed: Redis answered nothing")
	f.m.Close() // Redis is gone: connections are refused
	_, err = f.q.Reserve(context.Background(), "acme", "r2", 100, 10)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrUnexpectedReply, "Redis is down: no reply at all")
	_, err = f.q.Settle(context.Background(), "acme", "r2", 100, 10)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrUnexpectedReply, "Redis is down: no reply at all")
}

// 06-unknown-settle-charges-its-usage: Settle "reports whether it applied:
// false for ... never reserved"; README, "a Settle removes the reservation
// and leaves a marker of its id" and "Settle is told what was used, not
// what was reserved: Redis keeps the estimate" — a Settle with no
// reservation to close applies nothing, whatever usage it reports.
func TestASettleOfAnIDNeverReservedChargesNothing(t *testing.T) {
	f := newFixture(t, Config{})
	assert.False(t, f.settle(t, "acme", "never", 1000, 300))
	assert.Equal(t, 1000, f.left(t, "acme", 1000), "nothing reserved, nothing applied: the bucket is full")
	f.reserve(t, "acme", "never", 1000, 300)
	assert.Equal(t, 1000, f.left(t, "acme", 1000), "and its late reserve takes nothing")
}

// 07-settled-ids-remembered-without-their-tenant: README, "a Settle removes
// the reservation and leaves a marker of its id: a second Settle finds
// nothing to apply" — the same reservation's, of the same tenant; the same
// id under another tenant is another reservation (TestTenantsHaveSeparate
// Buckets), settled on its own.
func TestTheSameIDIsSettledOnceForEachTenant(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 1000, 400)
	f.reserve(t, "globex", "r1", 1000, 400)
	assert.True(t, f.settle(t, "acme", "r1", 1000, 0))
	assert.True(t, f.settle(t, "globex", "r1", 1000, 100), "globex's r1 is open: acme's settle did not close it")
	assert.Equal(t, 900, f.left(t, "globex", 1000), "globex's 300 unused refunded")
	assert.False(t, f.settle(t, "globex", "r1", 1000, 100), "and only once")
	assert.Equal(t, 1000, f.left(t, "acme", 1000))
}

// 08-redis-errors-flattened: Reserve's doc (lab stub), "Redis' errors come
// back wrapped, so a caller's cancelled context stays errors.Is-able";
// HINTS 7, "Wrap Redis' own error with the %w verb" — Redis' error reply,
// or the network's error, is still itself for errors.As.
func TestRedisOwnErrorsComeBackWrapped(t *testing.T) {
	f := newFixture(t, Config{})
	f.m.SetError("LOADING Redis is loading the dataset in memory")
	_, err := f.q.Reserve(context.Background(), "acme", "r1", 100, 10)
	assert.True(t, redis.HasErrorPrefix(err, "LOADING"), "Reserve: %v", err)
	_, err = f.q.Settle(context.Background(), "acme", "r1", 100, 10)
	assert.True(t, redis.HasErrorPrefix(err, "LOADING"), "Settle: %v", err)
	f.m.SetError("")
	f.m.Close() // Redis is gone: connections are refused
	var opErr *net.OpError
	_, err = f.q.Reserve(context.Background(), "acme", "r2", 100, 10)
	assert.True(t, errors.As(err, &opErr), "Reserve: %v", err)
	_, err = f.q.Settle(context.Background(), "acme", "r2", 100, 10)
	assert.True(t, errors.As(err, &opErr), "Settle: %v", err)
}

// 10-retry-after-capped-at-two-minutes: Decision.RetryAfter "is, for a
// refused request, the time until its estimate fits"; Config.DebtMinutes,
// "how many minutes of quota a tenant may owe" — three minutes of debt and
// a minute's estimate are four minutes away, and not a millisecond sooner.
func TestRetryAfterCountsEveryMinuteOfDebt(t *testing.T) {
	f := newFixture(t, Config{DebtMinutes: 3})
	f.reserve(t, "acme", "r1", 600, 600)
	require.True(t, f.settle(t, "acme", "r1", 600, 600+2000)) // 2000 over: 1800 owed (3 minutes)
	d := f.reserve(t, "acme", "r2", 600, 600)
	assert.Equal(t, Decision{Allowed: false, RetryAfter: 4 * time.Minute}, d, "1800 owed and 600 to fit, at 10 a second")
	f.advance(4*time.Minute - time.Millisecond)
	assert.False(t, f.reserve(t, "acme", "r3", 600, 600).Allowed, "a millisecond early it does not fit")
	f.advance(time.Millisecond)
	assert.True(t, f.reserve(t, "acme", "r4", 600, 600).Allowed, "it fits when RetryAfter said")
}

// nilReplyRedis answers as go-redis does when a script returns nil: no
// value, and the error redis.Nil (oddRedis{reply: nil} has no error, which a
// real client never gives).
type nilReplyRedis struct{ oddRedis }

func (nilReplyRedis) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	c := redis.NewCmd(ctx)
	c.SetErr(redis.Nil)
	return c
}

// "Replies are read defensively: anything but three non-negative integers
// is ErrUnexpectedReply" — a nil reply too, as go-redis delivers it.
// Reference: "quotas: reserve for acme: redis: nil", not ErrUnexpectedReply.
func TestANilReplyAsGoRedisGivesItIsUnexpected(t *testing.T) {
	q, err := New(nilReplyRedis{}, Config{})
	require.NoError(t, err)
	_, err = q.Reserve(context.Background(), "acme", "r1", 100, 1)
	assert.ErrorIs(t, err, ErrUnexpectedReply)
}

// Config.SettleWindow "must be a whole number of milliseconds": the
// script reads Redis' clock to the millisecond, so a window of 1.5 ms could
// be neither 1 nor 2 of them — New refuses it rather than round it.
func TestASettleWindowWithAFractionOfAMillisecondIsRefused(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for _, w := range []time.Duration{1500 * time.Microsecond, time.Millisecond + time.Nanosecond, time.Hour + 500*time.Microsecond} {
		_, err := New(rdb, Config{SettleWindow: w})
		assert.ErrorIs(t, err, ErrInvalidConfig, "%s", w)
	}
	_, err := New(rdb, Config{SettleWindow: 1501 * time.Millisecond})
	assert.NoError(t, err, "a whole number of milliseconds is fine")
}
