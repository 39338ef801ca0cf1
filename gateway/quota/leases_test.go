package quota

import (
	"context"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAcquireAdmitsUpToMaxThenRefuses(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	for want := 2; want >= 0; want-- {
		_, d := acquire(t, l, "acme", 3)
		require.True(t, d.Allowed, "slot %d of 3", 3-want)
		assert.Equal(t, want, d.Remaining, "free slots left")
		assert.Zero(t, d.RetryAfter)
	}
	release, d := acquire(t, l, "acme", 3)
	assert.False(t, d.Allowed, "max 3: the 4th request in flight is refused")
	assert.Zero(t, d.Remaining)
	assert.NoError(t, release(t.Context()), "the release of a refused Acquire does nothing")
	_, d = acquire(t, l, "acme", 3)
	assert.False(t, d.Allowed, "and gave back no slot")
}

func TestReleaseFreesItsSlot(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	release, _ := acquire(t, l, "acme", 1)
	require.NoError(t, release(t.Context()))
	_, d := acquire(t, l, "acme", 1)
	assert.True(t, d.Allowed, "a released slot is free at once")
}

func TestReleaseTwiceFreesOneSlot(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	first, _ := acquire(t, l, "acme", 2)
	acquire(t, l, "acme", 2)
	require.NoError(t, first(t.Context()))
	require.NoError(t, first(t.Context()), "releasing twice is safe")
	_, d := acquire(t, l, "acme", 2)
	require.True(t, d.Allowed, "the released slot is free")
	_, d = acquire(t, l, "acme", 2)
	assert.False(t, d.Allowed, "the second release must not free someone else's slot")
}

func TestLeaseExpiresAfterItsTTLOnRedisClock(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: 30 * time.Second})
	acquire(t, l, "acme", 1) // its replica crashes: never released
	f.advance(30*time.Second - time.Millisecond)
	_, d := acquire(t, l, "acme", 1)
	require.False(t, d.Allowed, "1ms before its TTL the lease still holds the slot")
	f.advance(time.Millisecond)
	_, d = acquire(t, l, "acme", 1)
	assert.True(t, d.Allowed, "a crashed replica's lease frees its slot after exactly TTL of Redis time")
}

func TestExpiredLeaseFreesItsSlotWhileOthersLive(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: 30 * time.Second})
	acquire(t, l, "acme", 2) // crashed at T: expires at T+30s
	f.advance(20 * time.Second)
	acquire(t, l, "acme", 2) // live until T+50s, and keeps the set alive
	f.advance(10*time.Second - time.Millisecond)
	_, d := acquire(t, l, "acme", 2)
	require.False(t, d.Allowed, "1ms before the first lease expires both slots are taken")
	f.advance(time.Millisecond)
	_, d = acquire(t, l, "acme", 2)
	require.True(t, d.Allowed, "at T+30s the first lease is dropped though the set lives on")
	_, d = acquire(t, l, "acme", 2)
	assert.False(t, d.Allowed, "and only its slot is free")
}

func TestReleaseAfterExpiryFreesNoOtherSlot(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Second})
	slow, _ := acquire(t, l, "acme", 1)
	f.advance(time.Second)
	_, d := acquire(t, l, "acme", 1)
	require.True(t, d.Allowed, "the slow request's lease expired")
	require.NoError(t, slow(t.Context()), "releasing an expired lease is not an error")
	_, d = acquire(t, l, "acme", 1)
	assert.False(t, d.Allowed, "the late release must not free the slot its successor holds")
}

func TestLeaseSetExpiresWithItsLastLease(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: 30 * time.Second})
	key := l.Key("acme")
	acquire(t, l, "acme", 5)
	f.advance(10 * time.Second)
	acquire(t, l, "acme", 5)
	assert.Equal(t, 30*time.Second, f.m.TTL(key), "the set lives as long as its newest lease")
	f.advance(30 * time.Second)
	assert.False(t, f.m.Exists(key), "a tenant with no live lease leaves no key behind")
}

func TestLeaseSetOutlivesAStepBack(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: 30 * time.Second})
	key := l.Key("acme")
	acquire(t, l, "acme", 5)
	f.stepBack(10 * time.Second)
	acquire(t, l, "acme", 5)
	assert.Equal(t, 40*time.Second, f.m.TTL(key), "after the clock stepped back 10s, the first lease still has 40s to live on the new clock")
}

func TestReleasingTheLastLeaseDeletesTheSet(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	release, _ := acquire(t, l, "acme", 5)
	require.NoError(t, release(t.Context()))
	assert.False(t, f.m.Exists(l.Key("acme")))
}

func TestLoweredMaxRefusesWhileOverIt(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	for range 3 {
		acquire(t, l, "acme", 3)
	}
	_, d := acquire(t, l, "acme", 2)
	assert.False(t, d.Allowed, "3 in flight, the cap lowered to 2: refused until they end")
}

func TestTenantsHaveSeparateLeases(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	acquire(t, l, "noisy", 1)
	_, d := acquire(t, l, "quiet", 1)
	assert.True(t, d.Allowed, "one tenant's requests in flight are not another's")
}

func TestAcquireResentByTheClientHoldsOneSlot(t *testing.T) {
	f := newFixture(t)
	f.rdb.AddHook(&faultHook{mode: "acquire", duplicate: true})
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	release, d := acquire(t, l, "acme", 2)
	require.True(t, d.Allowed, "an acquire delivered twice (a client retry after a lost reply) is still one lease")
	assert.Equal(t, 1, d.Remaining)
	_, d = acquire(t, l, "acme", 2)
	require.True(t, d.Allowed, "it took one slot, not two")
	require.NoError(t, release(t.Context()))
	_, d = acquire(t, l, "acme", 2)
	assert.True(t, d.Allowed, "and its release frees that slot")
}

func TestAcquireResentAtTheCapIsStillAcquired(t *testing.T) {
	f := newFixture(t)
	f.rdb.AddHook(&faultHook{mode: "acquire", duplicate: true})
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	release, d := acquire(t, l, "acme", 1)
	assert.True(t, d.Allowed, "the resent copy finds its own lease: it must not count it against the cap and refuse")
	require.NoError(t, release(t.Context()))
	assert.False(t, f.m.Exists(l.Key("acme")), "the lease is released, not left to expire")
}

func TestLeaseKeyIsHashTaggedByTenant(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{Prefix: "gw", TTL: time.Minute})
	assert.Equal(t, "{gw:acme}:leases", l.Key("acme"))
	acquire(t, l, "acme", 1)
	assert.Equal(t, []string{"{gw:acme}:leases"}, f.m.Keys())
	assert.Equal(t, "{quota:acme}:leases", newLeases(t, f.rdb, LeasesConfig{}).Key("acme"), "the default prefix")
}

func TestOneRoundTripPerAcquireAndRelease(t *testing.T) {
	f := newFixture(t)
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	release, _ := acquire(t, l, "warm", 1)
	require.NoError(t, release(t.Context()))
	log.Take()
	release, _ = acquire(t, l, "acme", 1)
	require.NoError(t, release(t.Context()))
	require.NoError(t, release(t.Context()))
	assert.Equal(t, []string{"evalsha", "evalsha"}, log.Take(),
		"an acquire and a release are one EVALSHA each; a repeated release needs no round trip")
}

func TestAcquireRejectsBadArguments(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{FailOpen: true})
	for _, c := range []struct {
		name   string
		tenant string
		max    int
		want   error
	}{
		{"empty tenant", "", 1, ErrInvalidTenant},
		{"tenant with a brace", "a}", 1, ErrInvalidTenant},
		{"zero cap", "acme", 0, ErrInvalidLimit},
		{"negative cap", "acme", -1, ErrInvalidLimit},
	} {
		t.Run(c.name, func(t *testing.T) {
			release, d, err := l.Acquire(t.Context(), c.tenant, c.max)
			assert.ErrorIs(t, err, c.want, "even FailOpen must not wave a caller's bug through")
			assert.False(t, d.Allowed)
			require.NotNil(t, release)
			assert.NoError(t, release(context.Background()))
		})
	}
	assert.Empty(t, f.m.Keys())
}

func TestNewLeasesRejectsBadConfig(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		name string
		cfg  LeasesConfig
	}{
		{"prefix with a brace", LeasesConfig{Prefix: "gw}"}},
		{"negative TTL", LeasesConfig{TTL: -time.Second}},
		{"TTL below a millisecond", LeasesConfig{TTL: time.Microsecond}},
		{"negative timeout", LeasesConfig{Timeout: -time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := NewLeases(f.rdb, c.cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, l)
		})
	}
	l, err := NewLeases(nil, LeasesConfig{})
	assert.ErrorIs(t, err, ErrInvalidConfig, "no client")
	assert.Nil(t, l)
}

func TestALeaseRenewedLivesOnAndOneNotRenewedExpires(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: 10 * time.Second})
	lease, d, err := l.Hold(t.Context(), "acme", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	f.advance(8 * time.Second)
	renewed, err := lease.Renew(t.Context())
	require.NoError(t, err)
	assert.True(t, renewed)
	f.advance(8 * time.Second) // 16 s after the Hold: alive only because it was renewed at 8
	_, d, err = l.Hold(t.Context(), "acme", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the renewed lease still holds the only slot")
	f.advance(3 * time.Second) // 11 s after the renewal
	renewed, err = lease.Renew(t.Context())
	require.NoError(t, err)
	assert.False(t, renewed, "an expired lease is not brought back")
	_, d, err = l.Hold(t.Context(), "acme", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "and its slot is free")
	require.NoError(t, lease.Release(t.Context()), "releasing it is harmless")
	var none *Lease
	renewed, err = none.Renew(t.Context())
	assert.False(t, renewed)
	assert.NoError(t, err)
	assert.NoError(t, none.Release(t.Context()), "a nil Lease holds nothing")
}

// cancel and acquire run the script's two ops for one id, as a Hold that
// gave up and the acquire it gave up on would, in whichever order Redis
// runs them.
func cancelID(t *testing.T, l *Leases, tenant, id string) int64 {
	t.Helper()
	reply, err := runScript(t.Context(), l.rdb, time.Second, leasesScript, []string{l.Key(tenant), l.cancelledKey(tenant)}, 3,
		"cancel", id, l.ttl.Milliseconds())
	require.NoError(t, err)
	return reply[0]
}

func acquireID(t *testing.T, l *Leases, tenant, id string, max int) bool {
	t.Helper()
	reply, err := runScript(t.Context(), l.rdb, time.Second, leasesScript, []string{l.Key(tenant), l.cancelledKey(tenant)}, 3,
		"acquire", id, max, l.ttl.Milliseconds())
	require.NoError(t, err)
	return reply[0] == 1
}

// A Hold that gave up cancels its id; the acquire it gave up on may run
// later (another connection, Redis' order). It takes nothing then — for a
// lease's lifetime, after which the mark is gone with its key.
func TestAnAcquireThatRunsAfterItsCancelTakesNothing(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	assert.Zero(t, cancelID(t, l, "acme", "gave-up"), "nothing to release yet")
	assert.False(t, acquireID(t, l, "acme", "gave-up", 1), "the acquire that runs after its cancel takes nothing")
	assert.False(t, f.m.Exists(l.Key("acme")), "and leaves no lease")
	assert.True(t, acquireID(t, l, "acme", "another", 1), "the slot is free for anyone else")
	ttl := f.m.TTL(l.cancelledKey("acme"))
	assert.Equal(t, time.Minute, ttl, "the mark lives a lease's TTL, and its key expires with it")

	f.advance(time.Minute)
	assert.False(t, f.m.Exists(l.cancelledKey("acme")), "forgotten after a lease's lifetime")
}

// A cancel that runs after its acquire releases the lease, like Release.
func TestACancelAfterItsAcquireReleasesTheLease(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	require.True(t, acquireID(t, l, "acme", "gave-up", 1))
	assert.EqualValues(t, 1, cancelID(t, l, "acme", "gave-up"), "the lease it took is released")
	assert.True(t, acquireID(t, l, "acme", "next", 1), "its slot is free")
	assert.False(t, acquireID(t, l, "acme", "gave-up", 2), "and a copy of the acquire resent later takes nothing either")
}

// A mark still live is kept when another is added; one past its time is
// dropped, so the set holds only what may still matter.
func TestCancelMarksAreForgottenOneByOne(t *testing.T) {
	f := newFixture(t)
	l := newLeases(t, f.rdb, LeasesConfig{TTL: time.Minute})
	cancelID(t, l, "acme", "first")
	f.advance(30 * time.Second)
	cancelID(t, l, "acme", "second")
	assert.False(t, acquireID(t, l, "acme", "first", 5), "30 s on, the first mark still holds")
	f.advance(30 * time.Second)
	cancelID(t, l, "acme", "third")
	members, err := f.rdb.ZRange(t.Context(), l.cancelledKey("acme"), 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"second", "third"}, members, "the first, a minute old, is dropped")
	assert.True(t, acquireID(t, l, "acme", "first", 5), "and its id may be taken again")
}
