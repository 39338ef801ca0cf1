package distlimit

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
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
	f.rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = f.rdb.Close() })
	return f
}

// advance moves Redis' clock, and its key expiry, forward by d.
func (f *fixture) advance(d time.Duration) {
	f.clock = f.clock.Add(d)
	f.m.SetTime(f.clock)
	f.m.FastForward(d)
}

func newLimiter(t *testing.T, rdb redis.Scripter, cfg Config) *Limiter {
	t.Helper()
	l, err := New(rdb, cfg)
	require.NoError(t, err)
	require.NotNil(t, l, "New returned nil")
	return l
}

func allow(t *testing.T, l *Limiter, key string) Decision {
	t.Helper()
	d, err := l.Allow(t.Context(), key)
	require.NoError(t, err)
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
	l := newLimiter(t, f.rdb, Config{Rate: 1, Burst: 3, Prefix: "rl:"})
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
	l := newLimiter(t, f.rdb, Config{Rate: 10, Burst: 5, Prefix: "rl:"})
	require.Equal(t, 5, countAllowed(t, l, "k", 5))
	f.advance(300 * time.Millisecond)
	assert.Equal(t, 3, countAllowed(t, l, "k", 10),
		"300ms of Redis time at 10/s refills 3 tokens; the refill must use Redis' TIME, not the replica's clock")
	f.advance(time.Hour)
	assert.Equal(t, 5, countAllowed(t, l, "k", 10), "never above burst")
}

func TestRetryAfterComesFromTheScript(t *testing.T) {
	f := newFixture(t)
	l := newLimiter(t, f.rdb, Config{Rate: 2, Burst: 1, Prefix: "rl:"})
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
	l := newLimiter(t, f.rdb, Config{Rate: 1, Burst: 2, Prefix: "rl:"})
	require.Equal(t, 2, countAllowed(t, l, "noisy", 5))
	assert.Equal(t, 2, countAllowed(t, l, "quiet", 5), "one tenant's bucket is not another's")
}

func TestKeyHasPrefixAndHashTag(t *testing.T) {
	f := newFixture(t)
	l := newLimiter(t, f.rdb, Config{Rate: 1, Burst: 2, Prefix: "rl:"})
	allow(t, l, "tenant-42")
	assert.Equal(t, []string{"rl:{tenant-42}"}, f.m.Keys(),
		"the bucket key is Prefix + {key}: the hash tag keeps each bucket in one Redis Cluster slot")
}

func TestBucketExpiresOnceFullAgain(t *testing.T) {
	f := newFixture(t)
	l := newLimiter(t, f.rdb, Config{Rate: 10, Burst: 5, Prefix: "rl:"})
	allow(t, l, "idle") // one token spent: full again after 100ms
	key := "rl:{idle}"
	require.True(t, f.m.Exists(key))
	assert.Equal(t, 100*time.Millisecond, f.m.TTL(key), "the key should expire when the bucket would be full again")
	f.advance(100 * time.Millisecond)
	assert.False(t, f.m.Exists(key), "an idle tenant's bucket must not stay in Redis forever")
	assert.Equal(t, 5, countAllowed(t, l, "idle", 10), "an expired bucket reads as full")
}

// commandLog records the commands a client sends.
type commandLog struct {
	mu    sync.Mutex
	names []string
}

func (c *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (c *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.names = append(c.names, strings.ToLower(cmd.Name()))
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *commandLog) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	return out
}

func TestOneRoundTripPerDecision(t *testing.T) {
	f := newFixture(t)
	var log commandLog
	f.rdb.AddHook(&log)
	l := newLimiter(t, f.rdb, Config{Rate: 100, Burst: 100, Prefix: "rl:"})
	allow(t, l, "warm") // may load the script
	log.take()
	for range 10 {
		allow(t, l, "k")
	}
	assert.Equal(t, []string{"evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha", "evalsha"}, log.take(),
		"each decision is exactly one EVALSHA: no GET/SET pairs, no separate TIME or EXPIRE calls")
}

func TestNoScriptFallsBackToEval(t *testing.T) {
	f := newFixture(t)
	var log commandLog
	f.rdb.AddHook(&log)
	l := newLimiter(t, f.rdb, Config{Rate: 1, Burst: 5, Prefix: "rl:"})
	allow(t, l, "k")
	require.NoError(t, f.rdb.ScriptFlush(t.Context()).Err()) // a restart or failover empties the script cache
	log.take()
	d := allow(t, l, "k")
	assert.True(t, d.Allowed)
	assert.Equal(t, 3, d.Remaining, "the decision after a script flush still counts the bucket correctly")
	assert.Equal(t, []string{"evalsha", "eval"}, log.take(), "NOSCRIPT from EVALSHA is answered by one EVAL")
}

func TestFailsClosedWhenRedisIsDown(t *testing.T) {
	f := newFixture(t)
	var reported []error
	l := newLimiter(t, f.rdb, Config{Rate: 1, Burst: 5, Prefix: "rl:", OnError: func(err error) { reported = append(reported, err) }})
	f.m.Close()
	d, err := l.Allow(t.Context(), "k")
	assert.ErrorIs(t, err, ErrUnavailable, "by default a limiter that cannot decide refuses, and says why")
	assert.False(t, d.Allowed)
	assert.Len(t, reported, 1, "OnError hears about every Redis failure")
}

func TestFailsOpenWhenConfigured(t *testing.T) {
	f := newFixture(t)
	var reported []error
	l := newLimiter(t, f.rdb, Config{Rate: 1, Burst: 5, Prefix: "rl:", FailOpen: true, OnError: func(err error) { reported = append(reported, err) }})
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
	for _, reply := range []any{"OK", int64(1), []any{int64(1)}, []any{"1", "2", "3"}, []any{int64(1), int64(-4), int64(0)}, nil} {
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
		{"zero burst", f.rdb, Config{Rate: 1, Burst: 0}},
		{"negative timeout", f.rdb, Config{Rate: 1, Burst: 1, Timeout: -time.Second}},
		{"no client", nil, Config{Rate: 1, Burst: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := New(c.rdb, c.cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, l)
		})
	}
}

func TestEmptyKeyIsRejected(t *testing.T) {
	f := newFixture(t)
	l := newLimiter(t, f.rdb, Config{Rate: 1, Burst: 1, FailOpen: true})
	d, err := l.Allow(t.Context(), "")
	assert.ErrorIs(t, err, ErrInvalidKey, "an empty key is a caller's bug, not a Redis failure: even FailOpen must not wave it through")
	assert.False(t, d.Allowed)
	assert.Empty(t, f.m.Keys())
}
