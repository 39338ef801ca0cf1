package quota

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// errorLog collects what OnError hears.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (e *errorLog) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, err)
}

func (e *errorLog) all() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.errs...)
}

func TestTokensFailClosedByDefault(t *testing.T) {
	f := newFixture(t)
	var log errorLog
	q := newTokens(t, f.rdb, TokensConfig{OnError: log.add})
	f.m.Close()
	r, d, err := q.Reserve(t.Context(), "acme", 100, 10)
	assert.ErrorIs(t, err, ErrUnavailable, "by default a quota that cannot decide refuses, and says why")
	assert.False(t, d.Allowed)
	assert.Nil(t, r)
	require.Len(t, log.all(), 1, "OnError hears about every Redis failure")
	assert.ErrorIs(t, log.all()[0], ErrUnavailable)
}

func TestTokensFailOpenWhenConfigured(t *testing.T) {
	f := newFixture(t)
	var log errorLog
	q := newTokens(t, f.rdb, TokensConfig{FailOpen: true, OnError: log.add})
	f.m.Close()
	r, d, err := q.Reserve(t.Context(), "acme", 100, 10)
	require.NoError(t, err, "fail open: the request goes through")
	assert.True(t, d.Allowed)
	require.NotNil(t, r, "with a Reservation the caller can settle as usual")
	assert.NoError(t, r.Settle(t.Context(), 50), "settling a reservation admitted by FailOpen does nothing")
	require.Len(t, log.all(), 1, "the failure is still reported, once")
	assert.ErrorIs(t, log.all()[0], ErrUnavailable)
}

func TestLeasesFailClosedByDefault(t *testing.T) {
	f := newFixture(t)
	var log errorLog
	l := newLeases(t, f.rdb, LeasesConfig{OnError: log.add})
	f.m.Close()
	release, d, err := l.Acquire(t.Context(), "acme", 5)
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.False(t, d.Allowed)
	require.NotNil(t, release, "release is never nil")
	assert.NoError(t, release(t.Context()))
	assert.Len(t, log.all(), 1, "OnError hears about the failed Acquire; the no-op release calls nothing")
}

func TestLeasesFailOpenWhenConfigured(t *testing.T) {
	f := newFixture(t)
	var log errorLog
	l := newLeases(t, f.rdb, LeasesConfig{FailOpen: true, OnError: log.add})
	f.m.Close()
	release, d, err := l.Acquire(t.Context(), "acme", 5)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.NoError(t, release(t.Context()))
	require.Len(t, log.all(), 1)
	assert.ErrorIs(t, log.all()[0], ErrUnavailable)
}

func TestASettleThatFailedIsRetriedInTheBackground(t *testing.T) {
	f := newFixture(t)
	// A closed Redis refuses at once, so a long timeout costs nothing here;
	// a short one let every background attempt time out on a loaded CI
	// machine (a redial, and EVAL after the restart emptied the script cache).
	q := newTokens(t, f.rdb, TokensConfig{Timeout: unitTimeout})
	r, _ := reserve(t, q, "acme", 1000, 400)
	f.m.Close()
	require.ErrorIs(t, r.Settle(t.Context(), 100), ErrUnavailable, "Redis is down")
	require.NoError(t, f.m.Restart())
	q.Close() // waits for the background retries
	assert.Equal(t, 900, balance(t, q, "acme", 1000), "the settle was applied once Redis was back: 400 reserved, 100 used")
}

func TestNothingIsRetriedInTheBackgroundAfterClose(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{Timeout: 20 * time.Millisecond})
	r, _ := reserve(t, q, "acme", 1000, 400)
	q.Close() // the service is shutting down; an abandoned call returns late
	f.m.Close()
	running := goleak.IgnoreCurrent()
	require.ErrorIs(t, r.Settle(t.Context(), 100), ErrUnavailable)
	goleak.VerifyNone(t, running) // no retry against a client about to be closed, that nobody would wait for
}

func TestQuotaRecoversWhenRedisReturns(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	r, _ := reserve(t, q, "acme", 1000, 400)
	release, _ := acquire(t, l, "acme", 1)

	f.m.Close()
	assert.ErrorIs(t, r.Settle(t.Context(), 100), ErrUnavailable, "a Settle during the outage fails")
	assert.ErrorIs(t, release(t.Context()), ErrUnavailable, "so does a release")
	_, _, err := q.Reserve(t.Context(), "acme", 1000, 1)
	require.ErrorIs(t, err, ErrUnavailable)

	require.NoError(t, f.m.Restart())
	require.NoError(t, r.Settle(t.Context(), 100), "the failed Settle may be retried once Redis is back")
	assert.Equal(t, 900, balance(t, q, "acme", 1000), "and applies its refund of 300")
	require.NoError(t, release(t.Context()), "the failed release too")
	_, d := acquire(t, l, "acme", 1)
	assert.True(t, d.Allowed, "and frees its slot")
}

// closedAddr is a loopback address on which nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestUnreachableRedisFailsClosedOrOpenAsConfigured(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t)})
	t.Cleanup(func() { _ = rdb.Close() })
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail_open=%v", failOpen), func(t *testing.T) {
			var log errorLog
			// The default Timeout: a refused connection costs at most that.
			q := newTokens(t, rdb, TokensConfig{FailOpen: failOpen, OnError: log.add, Timeout: DefaultTimeout})
			l := newLeases(t, rdb, LeasesConfig{FailOpen: failOpen, OnError: log.add, Timeout: DefaultTimeout})
			_, td, terr := q.Reserve(t.Context(), "acme", 100, 10)
			_, ld, lerr := l.Acquire(t.Context(), "acme", 5)
			if failOpen {
				assert.NoError(t, terr)
				assert.NoError(t, lerr)
				assert.True(t, td.Allowed && ld.Allowed, "FailOpen: a closed port admits")
			} else {
				assert.ErrorIs(t, terr, ErrUnavailable)
				assert.ErrorIs(t, lerr, ErrUnavailable)
				assert.False(t, td.Allowed || ld.Allowed, "fail closed: a closed port refuses")
			}
			require.Len(t, log.all(), 2, "failOpen=%v: OnError hears both failures", failOpen)
			for _, err := range log.all() {
				assert.ErrorIs(t, err, ErrUnavailable)
			}
		})
	}
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

// hungRedis answers reply after an hour, or the context's error when the
// context ends first: a caller without its own timeout would wait the hour.
func hungRedis(reply []any) fakeRedis {
	return fakeRedis{reply: func(ctx context.Context) *redis.Cmd {
		cmd := redis.NewCmd(ctx)
		select {
		case <-ctx.Done():
			cmd.SetErr(ctx.Err())
		case <-time.After(time.Hour):
			cmd.SetVal(reply)
		}
		return cmd
	}}
}

func TestSlowRedisIsBoundedByTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := hungRedis([]any{int64(1), int64(0), int64(0)})
		q, err := NewTokens(slow, TokensConfig{}) // the default Timeout
		require.NoError(t, err)
		defer q.Close()
		l := newLeases(t, slow, LeasesConfig{Timeout: 20 * time.Millisecond})

		start := time.Now()
		_, _, err = q.Reserve(t.Context(), "acme", 100, 1)
		assert.ErrorIs(t, err, ErrUnavailable)
		assert.Equal(t, DefaultTimeout, time.Since(start), "a hung Redis costs a Reserve the default 50ms, no more")

		start = time.Now()
		_, _, err = l.Acquire(t.Context(), "acme", 1)
		assert.ErrorIs(t, err, ErrUnavailable)
		assert.Equal(t, 20*time.Millisecond, time.Since(start), "and an Acquire its configured Timeout")
	})
}

func TestSlowRedisBoundsSettleAndRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		hang := false
		ok := []any{int64(1), int64(0), int64(0)}
		rdb := fakeRedis{reply: func(ctx context.Context) *redis.Cmd {
			mu.Lock()
			h := hang
			mu.Unlock()
			if h {
				return hungRedis(ok).reply(ctx)
			}
			cmd := redis.NewCmd(ctx)
			cmd.SetVal(ok)
			return cmd
		}}
		q := newTokens(t, rdb, TokensConfig{Timeout: 30 * time.Millisecond})
		l := newLeases(t, rdb, LeasesConfig{Timeout: 40 * time.Millisecond})
		r, _, err := q.Reserve(t.Context(), "acme", 100, 1)
		require.NoError(t, err)
		release, _, err := l.Acquire(t.Context(), "acme", 1)
		require.NoError(t, err)
		mu.Lock()
		hang = true
		mu.Unlock()

		start := time.Now()
		assert.ErrorIs(t, r.Settle(t.Context(), 1), ErrUnavailable)
		assert.Equal(t, 30*time.Millisecond, time.Since(start), "a hung Settle costs the Timeout")
		start = time.Now()
		assert.ErrorIs(t, release(t.Context()), ErrUnavailable)
		assert.Equal(t, 40*time.Millisecond, time.Since(start), "a hung release costs the Timeout")
	})
}

func TestCallerContextStillCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newTokens(t, hungRedis(nil), TokensConfig{Timeout: time.Second})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, _, err := q.Reserve(ctx, "acme", 100, 1)
		assert.ErrorIs(t, err, ErrUnavailable)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 10*time.Millisecond, time.Since(start), "the caller's shorter deadline wins over Timeout")

		ctx, cancel = context.WithCancel(t.Context())
		cancel()
		_, _, err = q.Reserve(ctx, "acme", 100, 1)
		assert.ErrorIs(t, err, context.Canceled, "a cancelled caller gets no decision")
	})
}

func TestUnexpectedReplyIsAnErrorNotAPanic(t *testing.T) {
	for _, c := range []struct {
		name  string
		reply any
	}{
		{"a status string", "OK"},
		{"one integer", int64(1)},
		{"no reply (nil)", nil},
		{"one element", []any{int64(1)}},
		{"three strings", []any{"1", "2", "3"}},
		{"negative remaining", []any{int64(1), int64(-4), int64(0)}},
		{"four elements", []any{int64(1), int64(0), int64(0), int64(0)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			reply := c.reply
			odd := fakeRedis{reply: func(ctx context.Context) *redis.Cmd {
				cmd := redis.NewCmd(ctx)
				cmd.SetVal(reply)
				return cmd
			}}
			q := newTokens(t, odd, TokensConfig{})
			l := newLeases(t, odd, LeasesConfig{})
			var td, ld Decision
			var terr, lerr error
			require.NotPanics(t, func() {
				_, td, terr = q.Reserve(t.Context(), "acme", 100, 1)
				_, ld, lerr = l.Acquire(t.Context(), "acme", 1)
			}, "reply %#v", reply)
			assert.ErrorIs(t, terr, ErrUnavailable, "reply %#v is not a reservation", reply)
			assert.ErrorIs(t, lerr, ErrUnavailable, "reply %#v is not a lease", reply)
			assert.False(t, td.Allowed || ld.Allowed)
		})
	}
}

func TestDefaults(t *testing.T) {
	f := newFixture(t)
	q := newTokens(t, f.rdb, TokensConfig{})
	l := newLeases(t, f.rdb, LeasesConfig{})
	reserve(t, q, "acme", 100, 1)
	acquire(t, l, "acme", 1)
	_, open := keysOf(q, "acme")
	assert.Equal(t, DefaultSettleWindow, f.m.TTL(open), "SettleWindow 0 means DefaultSettleWindow")
	assert.Equal(t, DefaultLeaseTTL, f.m.TTL(l.Key("acme")), "TTL 0 means DefaultLeaseTTL")
}
