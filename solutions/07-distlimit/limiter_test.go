package distlimit

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Unit tests run against miniredis, an in-process Redis. The test owns its
// clock: SetTime moves what Redis' TIME returns, FastForward expires keys.
// The local clock never moves, so a limiter that refilled from time.Now()
// instead of Redis' TIME would see no refill at all.

type fixture struct {
	m     *miniredis.Miniredis
	rdb   *redis.Client
	clock time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	m := miniredis.RunT(t)
	f := &fixture{m: m, clock: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	m.SetTime(f.clock)
	// No retries: a closed miniredis refuses at once, and the failure tests
	// need not wait out go-redis' dial backoff.
	f.rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = f.rdb.Close() })
	return f
}

// advance moves Redis' clock, and its key expiry, forward by d.
func (f *fixture) advance(d time.Duration) {
	f.clock = f.clock.Add(d)
	f.m.SetTime(f.clock)
	f.m.FastForward(d)
}

// limiter is a Limiter on the fixture's miniredis. Timeout 0 becomes a
// minute: under -race on a busy machine miniredis can take longer than
// DefaultTimeout, and these tests are about the bucket, not the timeout.
func (f *fixture) limiter(t *testing.T, cfg Config) *Limiter {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Minute
	}
	return newLimiter(t, f.rdb, cfg)
}

func newLimiter(t *testing.T, rdb redis.Scripter, cfg Config) *Limiter {
	t.Helper()
	l, err := New(rdb, cfg)
	require.NoError(t, err, "want New to accept a valid config, got an error")
	require.NotNil(t, l, "want a Limiter from New, got nil")
	return l
}

func allow(t *testing.T, l *Limiter, key string) Decision {
	t.Helper()
	d, err := l.Allow(t.Context(), key)
	require.NoError(t, err, "want a decision from Allow(%q), got an error", key)
	return d
}

func countAllowed(t *testing.T, l *Limiter, key string, n int) int {
	t.Helper()
	got := 0
	for range n {
		if allow(t, l, key).Allowed {
			got++
		}
	}
	return got
}

func TestAllowsBurstThenRefuses(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 1, Burst: 3, Prefix: "rl:"})
	for want := 2; want >= 0; want-- {
		d := allow(t, l, "tenant")
		require.True(t, d.Allowed, "a new bucket starts full")
		assert.Equal(t, want, d.Remaining)
		assert.Zero(t, d.RetryAfter)
	}
	d := allow(t, l, "tenant")
	assert.False(t, d.Allowed, "burst 3: the 4th request at the same instant is refused")
	assert.Zero(t, d.Remaining)
}

func TestRefillsOnRedisClock(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 10, Burst: 5, Prefix: "rl:"})
	require.Equal(t, 5, countAllowed(t, l, "k", 5))
	f.advance(300 * time.Millisecond)
	assert.Equal(t, 3, countAllowed(t, l, "k", 10),
		"300ms of Redis time at 10/s refills 3 tokens; the refill must use Redis' TIME, not the replica's clock")
	f.advance(time.Hour)
	assert.Equal(t, 5, countAllowed(t, l, "k", 10), "never above burst")
}

func TestRetryAfterComesFromTheScript(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 2, Burst: 1, Prefix: "rl:"})
	require.True(t, allow(t, l, "k").Allowed)
	d := allow(t, l, "k")
	require.False(t, d.Allowed)
	assert.Equal(t, 500*time.Millisecond, d.RetryAfter, "empty at 2/s: the next token is 500ms away")
	f.advance(200 * time.Millisecond)
	d = allow(t, l, "k")
	require.False(t, d.Allowed, "a refused request takes no token")
	assert.Equal(t, 300*time.Millisecond, d.RetryAfter)
	f.advance(d.RetryAfter)
	assert.True(t, allow(t, l, "k").Allowed, "retrying after exactly RetryAfter succeeds")
}

func TestKeysAreSeparateBuckets(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 1, Burst: 2, Prefix: "rl:"})
	require.Equal(t, 2, countAllowed(t, l, "noisy", 5))
	assert.Equal(t, 2, countAllowed(t, l, "quiet", 5), "one tenant's bucket is not another's")
}

func TestKeyHasPrefixAndHashTag(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 1, Burst: 2, Prefix: "rl:"})
	allow(t, l, "tenant-42")
	assert.Equal(t, []string{"rl:{tenant-42}"}, f.m.Keys(),
		"the bucket key is Prefix + {key}: the hash tag keeps each bucket in one Redis Cluster slot")
}

func TestBucketExpiresOnceFullAgain(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 10, Burst: 5, Prefix: "rl:"})
	allow(t, l, "idle") // one token spent: full again after 100ms
	key := "rl:{idle}"
	require.True(t, f.m.Exists(key))
	assert.Equal(t, 100*time.Millisecond, f.m.TTL(key), "the key should expire when the bucket would be full again")
	f.advance(100 * time.Millisecond)
	assert.False(t, f.m.Exists(key), "an idle tenant's bucket must not stay in Redis forever")
	assert.Equal(t, 5, countAllowed(t, l, "idle", 10), "an expired bucket reads as full")
}

func TestOneRoundTripPerDecision(t *testing.T) {
	f := newFixture(t)
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	l := f.limiter(t, Config{Rate: 100, Burst: 100, Prefix: "rl:"})
	allow(t, l, "warm") // may load the script
	log.Take()
	for range 10 {
		allow(t, l, "k")
	}
	assert.Equal(t, []string{"evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha"}, log.Take(),
		"each decision is exactly one EVALSHA: no GET/SET pairs, no separate TIME or EXPIRE calls")
}

func TestNoScriptFallsBackToEval(t *testing.T) {
	f := newFixture(t)
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	l := f.limiter(t, Config{Rate: 1, Burst: 5, Prefix: "rl:"})
	allow(t, l, "k")
	require.NoError(t, f.rdb.ScriptFlush(t.Context()).Err()) // a restart or failover empties the script cache
	log.Take()
	d := allow(t, l, "k")
	assert.True(t, d.Allowed)
	assert.Equal(t, 3, d.Remaining, "the decision after a script flush still counts the bucket correctly")
	assert.Equal(t, []string{"evalsha", "eval"}, log.Take(), "NOSCRIPT from EVALSHA is answered by one EVAL")
}

func TestFailsClosedWhenRedisIsDown(t *testing.T) {
	f := newFixture(t)
	var reported []error
	l := f.limiter(t, Config{Rate: 1, Burst: 5, Prefix: "rl:", OnError: func(err error) { reported = append(reported, err) }})
	f.m.Close()
	d, err := l.Allow(t.Context(), "k")
	assert.ErrorIs(t, err, ErrUnavailable, "by default a limiter that cannot decide refuses, and says why")
	assert.False(t, d.Allowed)
	assert.Len(t, reported, 1, "OnError hears about every Redis failure")
}

func TestFailsOpenWhenConfigured(t *testing.T) {
	f := newFixture(t)
	var reported []error
	l := f.limiter(t, Config{Rate: 1, Burst: 5, Prefix: "rl:", FailOpen: true, OnError: func(err error) { reported = append(reported, err) }})
	f.m.Close()
	d, err := l.Allow(t.Context(), "k")
	assert.NoError(t, err, "fail open: the request goes through")
	assert.True(t, d.Allowed)
	require.Len(t, reported, 1, "but the failure is still reported")
	assert.ErrorIs(t, reported[0], ErrUnavailable)
}

// fakeRedis answers every script call with reply(ctx).
type fakeRedis struct {
	redis.Scripter // only Eval and EvalSha are called
	reply          func(ctx context.Context) *redis.Cmd
}

func (f fakeRedis) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.reply(ctx)
}

func (f fakeRedis) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return f.reply(ctx)
}

func TestSlowRedisIsBoundedByTheLimitersTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := fakeRedis{reply: func(ctx context.Context) *redis.Cmd {
			cmd := redis.NewCmd(ctx)
			select {
			case <-ctx.Done():
				cmd.SetErr(ctx.Err())
			case <-time.After(time.Hour): // a Redis that hangs
				cmd.SetVal([]any{int64(1), int64(0), int64(0)})
			}
			return cmd
		}}
		l := newLimiter(t, slow, Config{Rate: 1, Burst: 1, Timeout: 50 * time.Millisecond})
		start := time.Now()
		_, err := l.Allow(t.Context(), "k")
		assert.ErrorIs(t, err, ErrUnavailable)
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "a hung Redis must cost a request at most the limiter's own timeout")
	})
}

func TestUnexpectedReplyIsAnErrorNotAPanic(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply any
	}{
		{"a status string", "OK"},
		{"one integer", int64(1)},
		{"one element", []any{int64(1)}},
		{"three strings", []any{"1", "2", "3"}},
		{"negative remaining", []any{int64(1), int64(-4), int64(0)}},
		{"no reply (nil)", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			reply := c.reply
			odd := fakeRedis{reply: func(ctx context.Context) *redis.Cmd {
				cmd := redis.NewCmd(ctx)
				cmd.SetVal(reply)
				return cmd
			}}
			l := newLimiter(t, odd, Config{Rate: 1, Burst: 1})
			var d Decision
			var err error
			require.NotPanics(t, func() { d, err = l.Allow(t.Context(), "k") }, "reply %#v", reply)
			assert.ErrorIs(t, err, ErrUnavailable, "reply %#v is not a decision", reply)
			assert.False(t, d.Allowed)
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name string
		rdb  redis.Scripter
		cfg  Config
	}{
		{"zero rate", f.rdb, Config{Rate: 0, Burst: 1}},
		{"negative rate", f.rdb, Config{Rate: -2, Burst: 1}},
		{"NaN rate", f.rdb, Config{Rate: math.NaN(), Burst: 1}},
		{"infinite rate", f.rdb, Config{Rate: math.Inf(1), Burst: 1}},
		{"zero burst", f.rdb, Config{Rate: 1, Burst: 0}},
		{"negative burst", f.rdb, Config{Rate: 1, Burst: -3}},
		{"negative timeout", f.rdb, Config{Rate: 1, Burst: 1, Timeout: -time.Second}},
		{"no client", nil, Config{Rate: 1, Burst: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.rdb, c.cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig, "%s: want ErrInvalidConfig from New", c.name)
			assert.Nil(t, l, "%s: want no Limiter", c.name)
		})
	}
}

func TestEmptyKeyIsRejected(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 1, Burst: 1, FailOpen: true})
	d, err := l.Allow(t.Context(), "")
	assert.ErrorIs(t, err, ErrInvalidKey, "an empty key is a caller's bug, not a Redis failure: even FailOpen must not wave it through")
	assert.False(t, d.Allowed)
	assert.Empty(t, f.m.Keys())
}

// The tests below pin the contract along the axes a first set of tests
// tends to miss: each cause of a missing answer, inputs already done,
// burst > 1 where "one token" and "full" differ, a clock that steps back,
// and exact values where a rounding bug moves a number by one unit.

// hungRedis never answers; a call returns only when its context ends.
// calls counts the script calls that reached it.
func hungRedis(calls *int) fakeRedis {
	return fakeRedis{reply: func(ctx context.Context) *redis.Cmd {
		*calls++
		cmd := redis.NewCmd(ctx)
		select {
		case <-ctx.Done():
			cmd.SetErr(ctx.Err())
		case <-time.After(time.Hour): // bounds a limiter that forgot every timeout
			cmd.SetVal([]any{int64(1), int64(0), int64(0)})
		}
		return cmd
	}}
}

func TestCallerAlreadyGoneTakesNothing(t *testing.T) {
	for _, c := range []struct {
		name      string
		ctx       func(context.Context) (context.Context, context.CancelFunc)
		want, not error
	}{
		{"cancelled", context.WithCancel, context.Canceled, context.DeadlineExceeded},
		{"deadline passed", func(ctx context.Context) (context.Context, context.CancelFunc) {
			return context.WithDeadline(ctx, time.Now().Add(-time.Second))
		}, context.DeadlineExceeded, context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			generous := fakeRedis{reply: func(ctx context.Context) *redis.Cmd {
				calls++
				cmd := redis.NewCmd(ctx)
				cmd.SetVal([]any{int64(1), int64(4), int64(0)}) // a Redis that would say yes
				return cmd
			}}
			var reported []error
			l := newLimiter(t, generous, Config{Rate: 1, Burst: 5, FailOpen: true, OnError: func(err error) { reported = append(reported, err) }})
			ctx, cancel := c.ctx(t.Context())
			cancel()
			d, err := l.Allow(ctx, "k")
			assert.ErrorIs(t, err, c.want, "a caller whose context is already %s gets its context's error", c.name)
			assert.NotErrorIs(t, err, c.not)
			assert.NotErrorIs(t, err, ErrUnavailable, "Redis did not fail: the caller left")
			assert.False(t, d.Allowed, "no decision for a caller who left, even with FailOpen")
			assert.Zero(t, calls, "a caller who left spends no token from the tenant's shared bucket")
			assert.Empty(t, reported, "OnError hears about Redis failures, not callers who left")
		})
	}
}

func TestCallerCancelledWhileRedisAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		var reported []error
		l := newLimiter(t, hungRedis(&calls), Config{Rate: 1, Burst: 1, FailOpen: true, Timeout: 50 * time.Millisecond,
			OnError: func(err error) { reported = append(reported, err) }})
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(10*time.Millisecond, cancel).Stop()
		start := time.Now()
		d, err := l.Allow(ctx, "k")
		assert.ErrorIs(t, err, context.Canceled, "the caller cancelled while Redis had not answered: its own error comes back")
		assert.NotErrorIs(t, err, ErrUnavailable, "Redis did not fail: the caller left")
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.False(t, d.Allowed, "FailOpen waves through requests Redis could not decide, not callers who left")
		assert.Empty(t, reported, "a cancellation is not a Redis failure: OnError (metrics, alerts) must not count it")
		assert.Equal(t, 10*time.Millisecond, time.Since(start), "Allow returns when the caller cancels")
	})
}

func TestCallerDeadlineBeforeTheLimitersTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		var reported []error
		l := newLimiter(t, hungRedis(&calls), Config{Rate: 1, Burst: 1, FailOpen: true, Timeout: 50 * time.Millisecond,
			OnError: func(err error) { reported = append(reported, err) }})
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		d, err := l.Allow(ctx, "k")
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline (20ms) came before the limiter's timeout (50ms)")
		assert.NotErrorIs(t, err, ErrUnavailable, "the caller ran out of time; Redis was not given its 50ms")
		assert.NotErrorIs(t, err, context.Canceled)
		assert.False(t, d.Allowed, "no decision for a caller whose deadline passed, even with FailOpen")
		assert.Empty(t, reported, "the caller's deadline is not a Redis failure")
		assert.Equal(t, 20*time.Millisecond, time.Since(start), "Allow returns at the caller's deadline")
	})
}

func TestLimitersTimeoutIsNotTheCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		var reported []error
		l := newLimiter(t, hungRedis(&calls), Config{Rate: 1, Burst: 1, Timeout: 50 * time.Millisecond,
			OnError: func(err error) { reported = append(reported, err) }})
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		_, err := l.Allow(ctx, "k")
		assert.ErrorIs(t, err, ErrUnavailable, "Redis gave no answer within the limiter's own timeout")
		assert.NotErrorIs(t, err, context.DeadlineExceeded,
			"the caller's deadline is an hour away: a layer that checks for deadlines first would blame the caller (504) for a Redis outage")
		assert.NotErrorIs(t, err, context.Canceled)
		require.Len(t, reported, 1, "a slow Redis is a Redis failure: OnError hears of it")
		assert.ErrorIs(t, reported[0], ErrUnavailable)
	})
}

func TestZeroTimeoutMeansDefaultTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		l := newLimiter(t, hungRedis(&calls), Config{Rate: 1, Burst: 1}) // Timeout 0
		start := time.Now()
		_, err := l.Allow(t.Context(), "k")
		assert.Equal(t, DefaultTimeout, time.Since(start), "Timeout 0 means DefaultTimeout (100ms), not no timeout at all")
		assert.ErrorIs(t, err, ErrUnavailable)
	})
}

func TestMalformedReplyFollowsTheFailurePolicy(t *testing.T) {
	odd := fakeRedis{reply: func(ctx context.Context) *redis.Cmd {
		cmd := redis.NewCmd(ctx)
		cmd.SetVal("OK") // a proxy's answer, not the script's
		return cmd
	}}
	var reported []error
	l := newLimiter(t, odd, Config{Rate: 1, Burst: 1, FailOpen: true, OnError: func(err error) { reported = append(reported, err) }})
	d, err := l.Allow(t.Context(), "k")
	assert.NoError(t, err, "a reply that is not a decision is a Redis failure like any other: FailOpen lets the request through")
	assert.True(t, d.Allowed)
	require.Len(t, reported, 1, "and OnError hears of it")
	assert.ErrorIs(t, reported[0], ErrUnavailable)
}

func TestRetryAfterIsTimeUntilOneTokenNotUntilFull(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 2, Burst: 3, Prefix: "rl:"})
	require.Equal(t, 3, countAllowed(t, l, "k", 3))
	d := allow(t, l, "k")
	require.False(t, d.Allowed)
	assert.Equal(t, 500*time.Millisecond, d.RetryAfter,
		"burst 3 at 2/s, empty: one token is 500ms away (the bucket is full only after 1.5s)")
	f.advance(d.RetryAfter)
	assert.Equal(t, 1, countAllowed(t, l, "k", 3), "after RetryAfter exactly one token is back")
}

func TestRetryAfterRoundsUpToTheMicrosecond(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 3, Burst: 3, Prefix: "rl:"})
	require.Equal(t, 3, countAllowed(t, l, "k", 3))
	d := allow(t, l, "k")
	require.False(t, d.Allowed)
	assert.Equal(t, 333334*time.Microsecond, d.RetryAfter,
		"at 3/s a token takes 333333.3µs: rounded up, so retrying after RetryAfter finds it")
	f.advance(d.RetryAfter - time.Microsecond)
	d = allow(t, l, "k")
	assert.False(t, d.Allowed, "1µs before RetryAfter the token is not whole yet")
	assert.Equal(t, time.Microsecond, d.RetryAfter)
	f.advance(time.Microsecond)
	assert.True(t, allow(t, l, "k").Allowed, "at RetryAfter it is")
}

func TestRemainingCountsWholeTokens(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 10, Burst: 5, Prefix: "rl:"})
	require.Equal(t, 5, countAllowed(t, l, "k", 5))
	f.advance(250 * time.Millisecond) // 2.5 tokens
	d := allow(t, l, "k")
	require.True(t, d.Allowed)
	assert.Equal(t, 1, d.Remaining, "1.5 tokens left: one whole token")
	d = allow(t, l, "k")
	require.True(t, d.Allowed)
	assert.Equal(t, 0, d.Remaining, "0.5 tokens left: none whole")
}

func TestRedisClockSteppingBackMintsNothing(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 10, Burst: 5, Prefix: "rl:"})
	require.Equal(t, 5, countAllowed(t, l, "k", 5))
	then := f.clock
	f.m.SetTime(then.Add(-time.Second)) // a failover to a replica whose clock is 1s behind
	d, err := l.Allow(t.Context(), "k")
	require.NoError(t, err, "a clock that steps back must not drive the bucket negative (a negative count is not a reply)")
	assert.False(t, d.Allowed, "stepping back refills nothing")
	assert.Equal(t, 100*time.Millisecond, d.RetryAfter, "the bucket is empty, not in debt: one token is 100ms away")
	f.m.SetTime(then) // the clock catches up: that second was already counted
	d = allow(t, l, "k")
	assert.False(t, d.Allowed, "a second lived twice must not mint tokens twice")
	f.advance(100 * time.Millisecond)
	assert.Equal(t, 1, countAllowed(t, l, "k", 3), "100ms after the last refill: one token")
}

func TestExpiryRoundsUp(t *testing.T) {
	f := newFixture(t)
	l := f.limiter(t, Config{Rate: 3, Burst: 5, Prefix: "rl:"})
	allow(t, l, "k") // 4 left: full again in 333.3ms
	key := "rl:{k}"
	assert.Equal(t, 334*time.Millisecond, f.m.TTL(key), "time to full, rounded up to the millisecond")
	f.advance(333 * time.Millisecond)
	assert.True(t, f.m.Exists(key), "at 333ms the bucket is not full yet: expiring it now hands out the missing fraction")
}
