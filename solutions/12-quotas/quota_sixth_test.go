package quotas

// Tests for the bugs of an outsider's sixth bank aimed at the tests' gaps:
// each passes on the reference and fails with its bug.

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 01-quota-of-one-refused: "ErrInvalidArgument: ... a quota outside
// [1, MaxPerMinute]" (README: "a quota outside one to MaxPerMinute") — a
// quota of one token a minute is inside, and works like any other.
func TestAQuotaOfOneTokenAMinuteWorks(t *testing.T) {
	f := newFixture(t, Config{})
	assert.Equal(t, Decision{Allowed: true, Remaining: 0}, f.reserve(t, "acme", "r1", 1, 1))
	assert.Equal(t, Decision{Allowed: false, RetryAfter: time.Minute}, f.reserve(t, "acme", "r2", 1, 1),
		"the one token comes back a minute later")
	assert.True(t, f.settle(t, "acme", "r1", 1, 0))
	assert.Equal(t, 1, f.left(t, "acme", 1), "refunded")
}

// 03-late-reserve-refused: HINTS 4, "If either is there, this reserve was
// resent after a lost reply, or a stalled Redis is running it after its
// settle: answer allowed, and take nothing."
func TestAReserveAfterItsSettleIsAllowedAndTakesNothing(t *testing.T) {
	f := newFixture(t, Config{})
	require.False(t, f.settle(t, "acme", "r1", 1000, 0), "settled before its reserve ran")
	assert.Equal(t, Decision{Allowed: true, Remaining: 1000}, f.reserve(t, "acme", "r1", 1000, 300),
		"the late reserve is allowed, and the bucket stays full")
	f.reserve(t, "acme", "r2", 1000, 300)
	require.True(t, f.settle(t, "acme", "r2", 1000, 300))
	assert.Equal(t, Decision{Allowed: true, Remaining: 700}, f.reserve(t, "acme", "r2", 1000, 300),
		"a resend after the settle: allowed, nothing more taken")
}

// 04-resent-reserve-reports-a-stale-balance: "Remaining is the whole tokens
// left after this request"; HINTS 4, "The remaining count in every reply is
// the balance in whole tokens" — for a resent or late reserve too, with the
// refill since the last write counted.
func TestAResentReserveReportsTheBalanceAsOfNow(t *testing.T) {
	f := newFixture(t, Config{})
	require.Equal(t, Decision{Allowed: true, Remaining: 40}, f.reserve(t, "acme", "a", 100, 60))
	f.advance(6 * time.Second) // 10 tokens back at 100 a minute
	assert.Equal(t, Decision{Allowed: true, Remaining: 50}, f.reserve(t, "acme", "a", 100, 60),
		"the resend takes nothing, and says what is left now: 40 + 10")
	require.False(t, f.settle(t, "acme", "b", 100, 0))
	f.advance(6 * time.Second)
	assert.Equal(t, Decision{Allowed: true, Remaining: 60}, f.reserve(t, "acme", "b", 100, 60),
		"a late reserve too: 40 + 20")
}

// 05-settle-retry-deduped-before-it-ran: "Settle reports whether it
// applied: false for an id already settled, never reserved ..., or
// reserved SettleWindow or more ago" — a retry of a Settle whose first
// attempt never reached Redis (its caller left) is none of those: it
// applies, once.
func TestASettleRetriedAfterItsCallerLeftStillApplies(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 100, 60)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := f.q.Settle(ctx, "acme", "r1", 100, 0)
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, f.settle(t, "acme", "r1", 100, 0), "the first attempt applied nothing: the retry applies")
	assert.Equal(t, 100, f.left(t, "acme", 100), "60 refunded")
	assert.False(t, f.settle(t, "acme", "r1", 100, 0), "and only once")
}

// 06-context-cause-replaces-its-error: "A caller's cancelled context comes
// back as its error" — context.Canceled or context.DeadlineExceeded, also
// when the caller gave a cause.
func TestACallerWhoLeftWithACauseGetsItsContextsError(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("client hung up"))
	_, err := f.q.Reserve(ctx, "acme", "r1", 100, 10)
	assert.ErrorIs(t, err, context.Canceled)
	dctx, stop := context.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), errors.New("budget spent"))
	defer stop()
	_, err = f.q.Settle(dctx, "acme", "r1", 100, 10)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 100, f.left(t, "acme", 100), "nothing was taken")
}

// 07-reply-strings-read-as-numbers: "Replies are read defensively: anything
// but three non-negative integers is ErrUnexpectedReply" (HINTS 7: "each an
// int64 that is not negative") — strings that spell numbers are not
// integers.
func TestAReplyOfStringsIsUnexpected(t *testing.T) {
	for _, reply := range []any{[]any{int64(1), "5", int64(0)}, []any{"1", "5", "0"}} {
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

// 08-short-wait-retried-inside-reserve: "Reserve: arguments checked before
// Redis ...; one script call; refused → nothing taken, RetryAfter until the
// estimate fits" — however short the wait, the refusal is answered, with
// one script call; the caller decides whether to wait.
func TestARefusalWithAShortWaitIsAnsweredWithOneScriptCall(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 60_000, 60_000) // empty; a token a millisecond back
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	d := f.reserve(t, "acme", "r2", 60_000, 10)
	assert.Equal(t, Decision{Allowed: false, RetryAfter: 10 * time.Millisecond}, d)
	assert.Equal(t, []string{"evalsha"}, log.Take(), "one script call, not a wait and a second try")
}

// 09-reservations-re-armed-once-a-tenth-has-run-down: "Keys expire: the
// bucket when it would be full again, the reservations a window after the
// newest" — a reservation made half a second after another is kept its
// whole window, and can be settled 9.6 s later.
func TestAReservationMadeJustAfterAnotherIsKeptItsWholeWindow(t *testing.T) {
	f := newFixture(t, Config{SettleWindow: 10 * time.Second})
	f.reserve(t, "acme", "a", 600, 10)
	f.advance(500 * time.Millisecond)
	f.reserve(t, "acme", "b", 600, 10)
	f.advance(9600 * time.Millisecond)
	assert.True(t, f.settle(t, "acme", "b", 600, 0), "b is 9.6 s old: within its 10 s window")
}

// 10-tenant-with-a-colon-refused: "ErrInvalidArgument: an empty or
// brace-holding tenant, an empty id, ..." — a tenant with a colon is
// neither, and has a bucket of its own under the tag {prefix:tenant}.
func TestATenantWithAColonIsATenantLikeAnyOther(t *testing.T) {
	f := newFixture(t, Config{})
	assert.Equal(t, Decision{Allowed: true, Remaining: 40}, f.reserve(t, "org:42", "r1", 100, 60))
	assert.Equal(t, 100, f.left(t, "org", 100), "org:42's bucket is not org's")
	assert.True(t, f.settle(t, "org:42", "r1", 100, 0))
	assert.Equal(t, 100, f.left(t, "org:42", 100))
	for _, k := range f.q.Keys("org:42") {
		assert.True(t, strings.HasPrefix(k, "{"+DefaultPrefix+":org:42}"), "%q", k)
	}
}

// 'Every key expires once its tenant is idle, none before what it holds could
// be rebuilt without it' — at the quota the tenant has now. A call that
// applies nothing (a resent reserve, a settle too late or twice) still runs
// at the new quota: a bucket half spent at 100 a minute is 30 s from full,
// but at 1000 a minute it is 57 s from full, and must be kept that long.
func TestABucketIsKeptUntilFullAtTheQuotaOfACallThatAppliesNothing(t *testing.T) {
	for _, noop := range []string{"a resent reserve", "a settle of an unknown id"} {
		t.Run(noop, func(t *testing.T) {
			f := newFixture(t, Config{})
			require.Equal(t, Decision{Allowed: true, Remaining: 50}, f.reserve(t, "acme", "r1", 100, 50))
			if noop == "a resent reserve" {
				require.Equal(t, Decision{Allowed: true, Remaining: 50}, f.reserve(t, "acme", "r1", 1000, 50))
			} else {
				require.False(t, f.settle(t, "acme", "unknown", 1000, 0))
			}
			f.advance(30 * time.Second) // 50 + 30 s at 1000 a minute: 550, not full
			d := f.reserve(t, "acme", "r2", 1000, 600)
			assert.False(t, d.Allowed, "550 tokens do not hold 600: the bucket was not forgotten as full")
			assert.Equal(t, 550, d.Remaining)
		})
	}
}
