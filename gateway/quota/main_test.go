package quota

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestMain fails the package if any test leaves a goroutine running, and
// stops the redis-server the real-Redis tests may have started.
func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }

// Unit tests run against miniredis, an in-process Redis that runs the same
// Lua. The test owns Redis' clock: SetTime moves what TIME returns and
// FastForward expires keys. The local clock never moves, so a script that
// took its time from the replica instead of from Redis would see none pass.
// miniredis runs one command at a time, so races need the real-Redis tests
// (integration_test.go).

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
	f.rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = f.rdb.Close() })
	return f
}

// advance moves Redis' clock, and its key expiry, forward by d.
func (f *fixture) advance(d time.Duration) {
	f.clock = f.clock.Add(d)
	f.m.SetTime(f.clock)
	f.m.FastForward(d)
}

// stepBack moves Redis' clock back by d, as a failover to a replica whose
// clock is behind would.
func (f *fixture) stepBack(d time.Duration) {
	f.clock = f.clock.Add(-d)
	f.m.SetTime(f.clock)
}

// unitTimeout replaces the 50ms default in tests that do not test the
// timeout: a loaded CI machine running -race may take longer than that to
// reach miniredis, and a test about refill must not fail on it.
const unitTimeout = 5 * time.Second

func newTokens(t testing.TB, rdb redis.Scripter, cfg TokensConfig) *Tokens {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = unitTimeout
	}
	q, err := NewTokens(rdb, cfg)
	require.NoError(t, err)
	require.NotNil(t, q)
	t.Cleanup(q.Close)
	return q
}

func newLeases(t testing.TB, rdb redis.Scripter, cfg LeasesConfig) *Leases {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = unitTimeout
	}
	l, err := NewLeases(rdb, cfg)
	require.NoError(t, err)
	require.NotNil(t, l)
	t.Cleanup(l.Close)
	return l
}

// reserve is a Reserve that must not fail.
func reserve(t testing.TB, q *Tokens, tenant string, perMinute, estimate int) (*Reservation, Decision) {
	t.Helper()
	r, d, err := q.Reserve(context.Background(), tenant, perMinute, estimate)
	require.NoError(t, err, "Reserve(%q, %d, %d)", tenant, perMinute, estimate)
	if d.Allowed {
		require.NotNil(t, r, "an allowed Reserve returns a Reservation to settle")
	} else {
		require.Nil(t, r, "a refused Reserve returns no Reservation")
	}
	return r, d
}

// balance reads a tenant's whole tokens (0 in debt) with an estimate of 0,
// which takes nothing.
func balance(t testing.TB, q *Tokens, tenant string, perMinute int) int {
	t.Helper()
	_, d := reserve(t, q, tenant, perMinute, 0)
	return d.Remaining
}

func settle(t testing.TB, r *Reservation, actual int) {
	t.Helper()
	require.NoError(t, r.Settle(context.Background(), actual))
}

func acquire(t testing.TB, l *Leases, tenant string, max int) (func(context.Context) error, Decision) {
	t.Helper()
	release, d, err := l.Acquire(context.Background(), tenant, max)
	require.NoError(t, err, "Acquire(%q, %d)", tenant, max)
	require.NotNil(t, release, "release is never nil")
	return release, d
}

// scriptMode is the mode argument of an EVAL/EVALSHA command ("" if none).
func scriptMode(cmd redis.Cmder) string {
	args := cmd.Args()
	name := strings.ToLower(cmd.Name())
	if name != "evalsha" && name != "eval" || len(args) < 3 {
		return ""
	}
	n, ok := args[2].(int)
	if !ok || len(args) <= 3+n {
		return ""
	}
	mode, _ := args[3+n].(string)
	return mode
}

// faultHook disturbs the first script call of one mode: it sends it twice
// (a client library resending after a lost reply), or sends it and then
// reports an error (the reply lost on the way back).
type faultHook struct {
	mode      string
	duplicate bool
	loseReply bool

	mu   sync.Mutex
	done bool
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		hit := !h.done && scriptMode(cmd) == h.mode
		if hit {
			h.done = true
		}
		h.mu.Unlock()
		if !hit {
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			h.mu.Lock()
			h.done = false // not run yet: disturb the EVAL that follows
			h.mu.Unlock()
			return err
		}
		if h.duplicate {
			err = next(ctx, cmd)
		}
		if h.loseReply && err == nil {
			err = errLostReply
			cmd.SetErr(err)
		}
		return err
	}
}

var errLostReply = &lostReply{}

type lostReply struct{}

func (*lostReply) Error() string { return "connection reset after the command was sent" }

// keysOf is a tenant's bucket and reservations keys.
func keysOf(q *Tokens, tenant string) (bucket, reservations string) {
	k := q.Keys(tenant)
	return k[0], k[1]
}
