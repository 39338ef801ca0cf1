package quota

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	quotas "github.com/production-go/gateway-lab/solutions/12-quotas"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReserveTakesTheEstimateFromAFullBucket(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	r, d := reserve(t, q, "acme", 1000, 300)
	require.True(t, d.Allowed, "a new bucket starts full")
	assert.Equal(t, 700, d.Remaining, "1000 − 300")
	assert.Zero(t, d.RetryAfter)
	assert.Equal(t, 300, r.Estimate())
	_, d = reserve(t, q, "acme", 1000, 700)
	require.True(t, d.Allowed, "the estimate equal to what is left fits")
	assert.Zero(t, d.Remaining)
	_, d = reserve(t, q, "acme", 1000, 1)
	assert.False(t, d.Allowed, "an empty bucket at the same instant refuses even one token")
}

func TestRefusedReservationTakesNothing(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "acme", 1000, 800)
	r, d := reserve(t, q, "acme", 1000, 300)
	require.False(t, d.Allowed, "200 left, 300 asked")
	assert.Nil(t, r)
	assert.Equal(t, 200, d.Remaining)
	assert.Equal(t, 6*time.Second, d.RetryAfter, "100 tokens missing at 1000 per minute: 6s")
	_, d = reserve(t, q, "acme", 1000, 200)
	assert.True(t, d.Allowed, "the refused reservation must not have taken its estimate")
}

func TestRetryAfterIsRoundedUpNeverDown(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "acme", 7, 7)
	_, d := reserve(t, q, "acme", 7, 1)
	require.False(t, d.Allowed)
	assert.Equal(t, 8572*time.Millisecond, d.RetryAfter, "one token at 7 per minute is 8571.43ms away: rounded up to 8572ms")
	f.advance(8571 * time.Millisecond)
	_, d = reserve(t, q, "acme", 7, 1)
	require.False(t, d.Allowed, "1ms before the token is back the bucket still refuses")
	assert.Equal(t, time.Millisecond, d.RetryAfter)
	f.advance(time.Millisecond)
	_, d = reserve(t, q, "acme", 7, 1)
	assert.True(t, d.Allowed, "a retry after exactly RetryAfter is admitted")
}

func TestRefillRunsOnRedisClock(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "acme", 600, 600)
	f.advance(1500 * time.Millisecond)
	_, d := reserve(t, q, "acme", 600, 15)
	require.True(t, d.Allowed, "1.5s of Redis time at 600 per minute refills 15 tokens; the refill must use Redis' TIME, not the replica's clock")
	assert.Zero(t, d.Remaining)
	_, d = reserve(t, q, "acme", 600, 1)
	assert.False(t, d.Allowed, "and not one more")
}

func TestRefillStopsAtCapacity(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "acme", 60, 10)
	f.advance(time.Hour)
	assert.Equal(t, 60, balance(t, q, "acme", 60), "an hour idle refills to the capacity, not beyond")
}

func TestEstimateLargerThanTheQuotaNeverFits(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{FailOpen: true})
	r, d, err := q.Reserve(t.Context(), "acme", 1000, 1001)
	assert.ErrorIs(t, err, ErrEstimateTooLarge, "1001 tokens can never fit a bucket of 1000: say so instead of a RetryAfter that never comes")
	assert.False(t, d.Allowed, "not even when failing open: it is the caller's bug, not an outage")
	assert.Nil(t, r)
	assert.Empty(t, f.m.Keys(), "a request that can never fit touches nothing")
	_, d = reserve(t, q, "acme", 1000, 1000)
	assert.True(t, d.Allowed, "an estimate equal to the whole quota fits a full bucket")
}

func TestSettleRefundsTheUnusedEstimate(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	r, _ := reserve(t, q, "acme", 1000, 400)
	reserve(t, q, "acme", 1000, 500)
	settle(t, r, 100)
	assert.Equal(t, 400, balance(t, q, "acme", 1000), "1000 − 400 − 500 + (400 − 100)")
}

func TestSettleChargesAnUnderestimate(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	r, _ := reserve(t, q, "acme", 600, 100)
	settle(t, r, 700)
	_, d := reserve(t, q, "acme", 600, 0)
	require.False(t, d.Allowed, "600 − 700 leaves the bucket 100 tokens in debt: nothing passes, not even an estimate of 0")
	assert.Zero(t, d.Remaining, "Remaining never goes below 0")
	assert.Equal(t, 10*time.Second, d.RetryAfter, "100 tokens of debt at 600 per minute take 10s to repay")
	_, d = reserve(t, q, "acme", 600, 1)
	assert.Equal(t, 10100*time.Millisecond, d.RetryAfter, "the debt, then one token")
	f.advance(10 * time.Second)
	assert.Zero(t, balance(t, q, "acme", 600), "repaid, empty")
}

func TestSettleNeverFillsAboveCapacity(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	r, _ := reserve(t, q, "acme", 1000, 1000)
	f.advance(time.Minute) // refilled while the request ran
	settle(t, r, 0)
	_, d := reserve(t, q, "acme", 1000, 1000)
	require.True(t, d.Allowed)
	_, d = reserve(t, q, "acme", 1000, 1)
	assert.False(t, d.Allowed, "a refund on a full bucket is capped at the capacity: 1000, not 2000")
}

func TestDebtIsAtMostOneMinuteOfQuota(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	bucket, _ := keysOf(q, "acme")
	r, _ := reserve(t, q, "acme", 600, 600)
	settle(t, r, 600+5000) // a usage report far above the estimate
	assert.Equal(t, 2*time.Minute, f.m.TTL(bucket), "600 tokens of debt, then 600 to fill: the bucket key lives 2 minutes")
	_, d := reserve(t, q, "acme", 600, 0)
	assert.Equal(t, time.Minute, d.RetryAfter, "the debt stops at one capacity below zero: one absurd usage report locks a tenant out for a minute, not for ten")
}

func TestDebtCarriesOverUpToTheConfiguredMinutes(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{DebtMinutes: 10})
	bucket, _ := keysOf(q, "acme")
	first, _ := reserve(t, q, "acme", 600, 300)
	second, _ := reserve(t, q, "acme", 600, 300)
	settle(t, first, 300+3000) // a prompt of files the estimate knew nothing of
	_, d := reserve(t, q, "acme", 600, 0)
	assert.Equal(t, 5*time.Minute, d.RetryAfter, "3,000 tokens owed at 600 a minute: all of it carried over")
	settle(t, second, 1_000_000)
	_, d = reserve(t, q, "acme", 600, 0)
	assert.Equal(t, 10*time.Minute, d.RetryAfter, "then up to ten minutes of quota, no more")
	assert.Equal(t, 11*time.Minute, f.m.TTL(bucket), "ten minutes of debt, then one to fill")
	for _, bad := range []int{-1, MaxDebtMinutes + 1} {
		_, err := NewTokens(f.rdb, TokensConfig{DebtMinutes: bad})
		assert.ErrorIs(t, err, ErrInvalidConfig, "%d minutes", bad)
	}
}

func TestSettleTwiceAppliesOnce(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	r, _ := reserve(t, q, "acme", 1000, 600)
	reserve(t, q, "acme", 1000, 300)
	settle(t, r, 0)
	settle(t, r, 0)
	assert.Equal(t, 700, balance(t, q, "acme", 1000), "100 + 600 refunded once; a second Settle is a no-op")
}

func TestConcurrentSettlesApplyOnce(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	r, _ := reserve(t, q, "acme", 1000, 100)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { assert.NoError(t, r.Settle(context.Background(), 300)) })
	}
	wg.Wait()
	assert.Equal(t, 700, balance(t, q, "acme", 1000), "ten concurrent Settles of one reservation charge its overrun of 200 once")
}

func TestSettleRetriedAfterALostReplyAppliesOnce(t *testing.T) {
	f := newFixture(t)
	f.rdb.AddHook(&faultHook{mode: "settle", loseReply: true})
	q := newTokens(t, f.rdb, TokensConfig{})
	r, _ := reserve(t, q, "acme", 1000, 500)
	err := r.Settle(t.Context(), 100)
	require.ErrorIs(t, err, ErrUnavailable, "a Settle whose reply was lost reports the failure")
	require.NoError(t, r.Settle(t.Context(), 100), "and may be retried")
	assert.Equal(t, 900, balance(t, q, "acme", 1000), "the refund of 400 reached Redis twice and counted once")
}

func TestReserveResentByTheClientTakesOnce(t *testing.T) {
	f := newFixture(t)
	f.rdb.AddHook(&faultHook{mode: "reserve", duplicate: true})
	q := newTokens(t, f.rdb, TokensConfig{})
	r, d := reserve(t, q, "acme", 1000, 300)
	require.True(t, d.Allowed)
	assert.Equal(t, 700, balance(t, q, "acme", 1000), "a reservation delivered twice (a client retry after a lost reply) takes its estimate once")
	settle(t, r, 300)
	assert.Equal(t, 700, balance(t, q, "acme", 1000))
}

func TestSettleAfterTheWindowLeavesTheReservationCharged(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{SettleWindow: 10 * time.Second})
	// Two tenants, the same story: a reservation of 30 at T, and one of 10
	// at T+5s that keeps the set of open reservations alive past T+10s.
	// 60 per minute refills one token a second.
	var first []*Reservation
	for _, tenant := range []string{"in-time", "late"} {
		r, _ := reserve(t, q, tenant, 60, 30)
		first = append(first, r)
	}
	f.advance(5 * time.Second)
	for _, tenant := range []string{"in-time", "late"} {
		reserve(t, q, tenant, 60, 10)
	}
	f.advance(5*time.Second - time.Millisecond)
	settle(t, first[0], 0)
	assert.Equal(t, 59, balance(t, q, "in-time", 60), "settled 1ms inside its window: 30 − 10 + 9.999 of refill + the refund of 30")
	f.advance(time.Millisecond)
	settle(t, first[1], 0)
	assert.Equal(t, 30, balance(t, q, "late", 60), "settled at its window's end: a no-op, the reservation stays charged (30 − 10 + 10 of refill)")
}

func TestUnsettledReservationStaysCharged(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "acme", 600, 500) // a stream cut before usage arrived: never settled
	assert.Equal(t, 100, balance(t, q, "acme", 600), "the reservation is the charge until a Settle says otherwise")
}

func TestSettleOnARefusedReservationIsANoop(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "acme", 100, 100)
	r, d := reserve(t, q, "acme", 100, 50)
	require.False(t, d.Allowed)
	assert.NoError(t, r.Settle(t.Context(), 0), "Settle on the nil Reservation of a refused Reserve does nothing")
	assert.Zero(t, r.Estimate())
	assert.Zero(t, balance(t, q, "acme", 100))
}

func TestSettleRejectsImpossibleUsage(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	r, _ := reserve(t, q, "acme", 100, 50)
	assert.ErrorIs(t, r.Settle(t.Context(), -1), ErrInvalidLimit)
	assert.ErrorIs(t, r.Settle(t.Context(), MaxPerMinute+1), ErrInvalidLimit)
	settle(t, r, 10)
	assert.Equal(t, 90, balance(t, q, "acme", 100), "the rejected Settles changed nothing; the valid one applied")
}

func TestQuotaChangeKeepsTheBalanceWithinTheNewBounds(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "down", 1000, 100)
	assert.Equal(t, 500, balance(t, q, "down", 500), "900 left, quota lowered to 500: the bucket holds at most 500")
	reserve(t, q, "up", 1000, 900)
	assert.Equal(t, 100, balance(t, q, "up", 2000), "quota raised: the balance stays 100, it does not jump to the new capacity")
	f.advance(3 * time.Second)
	assert.Equal(t, 200, balance(t, q, "up", 2000), "and refills at the new rate: 3s at 2000 per minute is 100 tokens")
}

func TestClockSteppingBackRefillsNothing(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	bucket, _ := keysOf(q, "acme")
	reserve(t, q, "acme", 600, 600)
	f.stepBack(2 * time.Minute) // a failover to a replica whose clock is 2 minutes behind
	_, d := reserve(t, q, "acme", 600, 1)
	require.False(t, d.Allowed, "time going backwards refills nothing")
	assert.Equal(t, 2*time.Minute+100*time.Millisecond, d.RetryAfter,
		"the wait for the clock to catch up, then 100ms for one token: the step back is neither refilled nor charged")
	assert.Equal(t, 3*time.Minute, f.m.TTL(bucket), "the bucket key outlives the step back too")
	f.advance(d.RetryAfter - time.Millisecond)
	_, d = reserve(t, q, "acme", 600, 1)
	require.False(t, d.Allowed, "1ms before RetryAfter")
	f.advance(time.Millisecond)
	_, d = reserve(t, q, "acme", 600, 1)
	assert.True(t, d.Allowed, "at RetryAfter")
}

func TestTenantsHaveSeparateQuotas(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "noisy", 100, 100)
	_, d := reserve(t, q, "quiet", 100, 100)
	assert.True(t, d.Allowed, "one tenant's spending is not another's")
}

func TestTokenKeysAreHashTaggedByTenant(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{Prefix: "gw"})
	assert.Equal(t, []string{"{gw:acme}:tokens", "{gw:acme}:reservations", "{gw:acme}:estimates"}, q.Keys("acme"))
	reserve(t, q, "acme", 100, 10)
	assert.ElementsMatch(t, q.Keys("acme"), f.m.Keys(), "a tenant's keys share the hash tag {prefix:tenant}, so they live in one Redis Cluster slot")
	var bucket string
	bucket, _ = keysOf(newTokens(t, f.rdb, TokensConfig{}), "acme")
	assert.Equal(t, "{quota:acme}:tokens", bucket, "the default prefix")
}

func TestBucketKeyExpiresWhenFullAgain(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	bucket, _ := keysOf(q, "idle")
	reserve(t, q, "idle", 600, 5) // 5 tokens at 10 per second: full again in 500ms
	assert.Equal(t, 500*time.Millisecond, f.m.TTL(bucket), "the bucket expires when it would be full again")
	f.advance(500 * time.Millisecond)
	assert.False(t, f.m.Exists(bucket), "an idle tenant's bucket must not stay in Redis")
	assert.Equal(t, 600, balance(t, q, "idle", 600), "an absent bucket reads as full")

	r, _ := reserve(t, q, "idle", 600, 5)
	require.True(t, f.m.Exists(bucket))
	settle(t, r, 0)
	assert.False(t, f.m.Exists(bucket), "a bucket filled again by a refund is deleted at once")
}

func TestReservationsKeyExpiresAfterTheWindow(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{SettleWindow: time.Minute})
	_, open := keysOf(q, "acme")
	reserve(t, q, "acme", 100, 10)
	f.advance(20 * time.Second)
	reserve(t, q, "acme", 100, 10)
	assert.Equal(t, time.Minute, f.m.TTL(open), "the open reservations expire with the newest one's window")
	f.advance(time.Minute)
	assert.False(t, f.m.Exists(open), "unsettled reservations must not pile up in Redis")
}

func TestReservationsOlderThanTheWindowAreDropped(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{SettleWindow: 10 * time.Second})
	_, open := keysOf(q, "acme")
	for range 5 { // never settled, each 6s after the last: the set never expires
		reserve(t, q, "acme", 600, 1)
		f.advance(6 * time.Second)
	}
	members, err := f.m.ZMembers(open)
	require.NoError(t, err)
	assert.Len(t, members, 2, "a busy tenant's set keeps only the reservations still inside the window (the last 10s)")
}

func TestOneRoundTripPerReserveAndSettle(t *testing.T) {
	f := newFixture(t)
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	q := newTokens(t, f.rdb, TokensConfig{})
	r, _ := reserve(t, q, "warm", 100, 1) // may load the script
	settle(t, r, 1)
	log.Take()
	r, _ = reserve(t, q, "acme", 100, 10)
	settle(t, r, 5)
	settle(t, r, 5)
	assert.Equal(t, []string{"evalsha", "evalsha"}, log.Take(),
		"a reserve and a settle are one EVALSHA each; a repeated Settle needs no round trip")
}

func TestNoScriptFallsBackToEval(t *testing.T) {
	f := newFixture(t)
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	q := newTokens(t, f.rdb, TokensConfig{})
	reserve(t, q, "acme", 100, 10)
	require.NoError(t, f.rdb.ScriptFlush(t.Context()).Err()) // a restart or failover empties the script cache
	log.Take()
	_, d := reserve(t, q, "acme", 100, 10)
	assert.Equal(t, 80, d.Remaining, "the reserve after a script flush still counts the bucket")
	assert.Equal(t, []string{"evalsha", "eval"}, log.Take(), "NOSCRIPT from EVALSHA is answered by one EVAL")
}

func TestReserveRejectsBadArguments(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{FailOpen: true})
	for _, c := range []struct {
		name                string
		tenant              string
		perMinute, estimate int
		want                error
	}{
		{"empty tenant", "", 100, 1, ErrInvalidTenant},
		{"tenant with a brace", "a}b", 100, 1, ErrInvalidTenant},
		{"tenant with an opening brace", "{a", 100, 1, ErrInvalidTenant},
		{"zero quota", "acme", 0, 0, ErrInvalidLimit},
		{"negative quota", "acme", -5, 0, ErrInvalidLimit},
		{"quota above the maximum", "acme", MaxPerMinute + 1, 1, ErrInvalidLimit},
		{"negative estimate", "acme", 100, -1, ErrInvalidLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, d, err := q.Reserve(t.Context(), c.tenant, c.perMinute, c.estimate)
			assert.ErrorIs(t, err, c.want, "even FailOpen must not wave a caller's bug through")
			assert.False(t, d.Allowed)
			assert.Nil(t, r)
		})
	}
	assert.Empty(t, f.m.Keys())
	_, d := reserve(t, q, "acme", MaxPerMinute, MaxPerMinute)
	assert.True(t, d.Allowed, "the largest quota works exactly")
	_, d = reserve(t, q, "acme", MaxPerMinute, 1)
	require.False(t, d.Allowed)
	assert.Equal(t, time.Millisecond, d.RetryAfter, "one token at a billion per minute is 0.06ms away: rounded up to 1ms")
}

func TestNewTokensRejectsBadConfig(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name string
		cfg  TokensConfig
	}{
		{"prefix with a brace", TokensConfig{Prefix: "{gw}"}},
		{"negative timeout", TokensConfig{Timeout: -time.Second}},
		{"negative settle window", TokensConfig{SettleWindow: -time.Second}},
		{"settle window below a millisecond", TokensConfig{SettleWindow: time.Microsecond}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, err := NewTokens(f.rdb, c.cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, q)
		})
	}
	q, err := NewTokens(nil, TokensConfig{})
	assert.ErrorIs(t, err, ErrInvalidConfig, "no client")
	assert.Nil(t, q)
}

// TestAReserveThatArrivesAfterItsUndoTakesNothing: a Reserve the client
// gave up on during a stall is undone by a settle sent on another
// connection, which Redis may run first; the reserve, run after it, must
// not charge the tenant for a request that was refused.
func TestAReserveThatArrivesAfterItsUndoTakesNothing(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{SettleWindow: time.Minute})
	_, open := keysOf(q, "acme")
	// The two calls as Redis runs them, out of order: lab 12's, which
	// Tokens sends.
	lab, err := quotas.New(f.rdb, quotas.Config{SettleWindow: time.Minute})
	require.NoError(t, err)
	_, err = lab.Settle(t.Context(), "acme", "stalled", 1000, 0) // the undo, first
	require.NoError(t, err)
	_, err = lab.Reserve(t.Context(), "acme", "stalled", 1000, 300) // the stalled reserve, after it
	require.NoError(t, err)
	assert.Equal(t, 1000, balance(t, q, "acme", 1000), "the late reserve took nothing")
	_, err = lab.Settle(t.Context(), "acme", "stalled", 1000, 0)
	require.NoError(t, err)
	assert.Equal(t, 1000, balance(t, q, "acme", 1000), "and a second undo gives nothing back")

	f.advance(time.Minute)
	assert.False(t, f.m.Exists(open), "the marker lives for the settle window, then costs nothing")
}
