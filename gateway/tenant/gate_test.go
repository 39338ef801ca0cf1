package tenant_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/tenant"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seen records what a gate's observer hears.
type seen struct {
	mu     sync.Mutex
	events []string
}

func (s *seen) Refused(id tenant.Identity, l policy.Limit) { s.add(id.Key + ":" + string(l)) }
func (s *seen) LimitFailed()                               { s.add("limiter failed") }
func (s *seen) add(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}
func (s *seen) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

func buckets(t *testing.T, rate float64, burst int) *admission.TokenBucket {
	t.Helper()
	b, err := admission.NewTokenBucket(rate, burst)
	require.NoError(t, err)
	return b
}

func newGate(t *testing.T, cfg tenant.GateConfig) *tenant.Gate {
	t.Helper()
	g, err := tenant.NewGate(cfg)
	require.NoError(t, err)
	return g
}

var acme = tenant.Identity{Key: "tenant:acme", Tenant: "acme"}

func refusal(t *testing.T, err error) *tenant.Refusal {
	t.Helper()
	var rf *tenant.Refusal
	require.ErrorAs(t, err, &rf)
	return rf
}

func TestATenantOverItsRateIsRefusedWithTheTimeUntilItsNextToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &seen{}
		g := newGate(t, tenant.GateConfig{Limiter: buckets(t, 2, 3), Observer: obs}) // a token every 500 ms
		for range 3 {
			leave, err := g.Enter(t.Context(), acme)
			require.NoError(t, err)
			leave(false)
		}
		time.Sleep(200 * time.Millisecond)
		_, err := g.Enter(t.Context(), acme)
		rf := refusal(t, err)
		assert.Equal(t, policy.LimitRate, rf.Limit)
		assert.Equal(t, 300*time.Millisecond, rf.RetryAfter, "0.4 of a token is back after 200 ms: the next whole one in 300 ms")
		assert.Equal(t, []string{"tenant:acme:rate"}, obs.all(), "the refusal is heard once")
		_, err = g.Enter(t.Context(), tenant.Identity{Key: "tenant:other"})
		assert.NoError(t, err, "another tenant has a bucket of its own")
	})
}

func TestATenantAtItsCapIsRefusedAndTakesNoRateToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		obs := &seen{}
		g := newGate(t, tenant.GateConfig{Limiter: buckets(t, 0.001, 3), MaxInFlight: 2, Observer: obs})
		first, err := g.Enter(t.Context(), acme)
		require.NoError(t, err)
		second, err := g.Enter(t.Context(), acme)
		require.NoError(t, err)
		_, err = g.Enter(t.Context(), acme)
		rf := refusal(t, err)
		assert.Equal(t, policy.LimitInFlight, rf.Limit)
		assert.Equal(t, 2, rf.Max)
		assert.False(t, rf.Own, "the gate's cap, not the identity's")
		assert.Equal(t, time.Second, rf.RetryAfter)
		_, err = g.Enter(t.Context(), tenant.Identity{Key: "tenant:other"})
		require.NoError(t, err, "another tenant's requests are counted apart")

		first(false)
		third, err := g.Enter(t.Context(), acme)
		require.NoError(t, err, "a request that ended gives its place back: the third token of the burst")
		second(false)
		third(false)
		_, err = g.Enter(t.Context(), acme)
		assert.Equal(t, policy.LimitRate, refusal(t, err).Limit, "three tokens, three requests served: the refusal at the cap took none")
		assert.Equal(t, []string{"tenant:acme:in_flight", "tenant:acme:rate"}, obs.all())
	})
}

func TestTheSmallerOfTheGatesCapAndTheIdentitysIsTheCap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		gate, own int
		want      int
		isOwn     bool
	}{
		{"the identity's, smaller", 4, 1, 1, true},
		{"the gate's, smaller", 2, 8, 2, false},
		{"the identity's, with no gate cap", 0, 2, 2, true},
		{"equal: the identity's", 3, 3, 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate(t, tenant.GateConfig{MaxInFlight: tc.gate})
			id := tenant.Identity{Key: "k", MaxInFlight: tc.own}
			for range tc.want {
				_, err := g.Enter(t.Context(), id)
				require.NoError(t, err)
			}
			_, err := g.Enter(t.Context(), id)
			rf := refusal(t, err)
			assert.Equal(t, tc.want, rf.Max)
			assert.Equal(t, tc.isOwn, rf.Own)
		})
	}
	g := newGate(t, tenant.GateConfig{})
	for range 100 {
		_, err := g.Enter(t.Context(), tenant.Identity{Key: "k"})
		require.NoError(t, err, "no cap anywhere: no refusal")
	}
}

// refunding is a limiter that always allows and records its refunds, and
// whether the context each came with was still live.
type refunding struct {
	mu   sync.Mutex
	keys []string
	live []bool
}

func (r *refunding) Allow(context.Context, string) (admission.Decision, error) {
	return admission.Decision{Allowed: true}, nil
}

func (r *refunding) Refund(ctx context.Context, key string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
	r.live = append(r.live, ctx.Err() == nil)
	return nil
}

func TestOnlyARequestTurnedAwayForWantOfCapacityGetsItsTokenBack(t *testing.T) {
	lim := &refunding{}
	g := newGate(t, tenant.GateConfig{Limiter: lim, MaxInFlight: 1})
	served, err := g.Enter(t.Context(), acme)
	require.NoError(t, err)
	served(false)
	assert.Empty(t, lim.keys, "a request that was served keeps its token")

	ctx, cancel := context.WithCancel(t.Context())
	overloaded, err := g.Enter(ctx, acme)
	require.NoError(t, err)
	_, err = g.Enter(ctx, acme)
	require.Error(t, err, "at the cap")
	cancel() // the caller is gone by the time the refusal is answered
	overloaded(true)
	assert.Equal(t, []string{"tenant:acme"}, lim.keys, "turned away for want of capacity: the token comes back, once — the refusal at the cap took none to give back")
	assert.Equal(t, []bool{true}, lim.live, "detached from the caller who left")
	again, err := g.Enter(t.Context(), acme)
	require.NoError(t, err, "and its place is free again")
	again(false)
}

// broken is a limiter whose store is down.
type broken struct{}

func (broken) Allow(context.Context, string) (admission.Decision, error) {
	return admission.Decision{}, errors.New("redis: connection refused")
}

func TestALimiterThatCannotDecideRefusesWithItsOwnErrorAndGivesThePlaceBack(t *testing.T) {
	obs := &seen{}
	g := newGate(t, tenant.GateConfig{Limiter: broken{}, MaxInFlight: 1, Observer: obs})
	_, err := g.Enter(t.Context(), acme)
	require.ErrorIs(t, err, tenant.ErrLimitFailed)
	assert.ErrorContains(t, err, "connection refused", "the cause is kept")
	var rf *tenant.Refusal
	assert.False(t, errors.As(err, &rf), "no refusal of the tenant's: the limiter failed")
	assert.Equal(t, []string{"limiter failed"}, obs.all())

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = g.Enter(cancelled, acme)
	assert.ErrorIs(t, err, context.Canceled, "a caller who left is not a limiter failure")
	assert.NotErrorIs(t, err, tenant.ErrLimitFailed)
	late, stop := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer stop()
	_, err = g.Enter(late, acme)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "nor is a caller whose deadline passed")
	assert.Equal(t, []string{"limiter failed"}, obs.all(), "neither is heard as a failure")
	assert.Zero(t, g.Busy(), "every refused request gave its place back (a cap of 1 would refuse the next otherwise)")
}

func TestARateRefusalGivesTheTenantsPlaceBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGate(t, tenant.GateConfig{Limiter: buckets(t, 1, 1), MaxInFlight: 1})
		held, err := g.Enter(t.Context(), acme)
		require.NoError(t, err)
		held(false)
		_, err = g.Enter(t.Context(), acme)
		require.Equal(t, policy.LimitRate, refusal(t, err).Limit)
		time.Sleep(time.Second)
		_, err = g.Enter(t.Context(), acme)
		assert.NoError(t, err, "the refused request held no place: with a token back, a cap of 1 admits the next")
	})
}

func TestManyTenantsLeaveNoStateBehind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := buckets(t, 10, 20) // a bucket is full again 2 s after its last request
		g := newGate(t, tenant.GateConfig{Limiter: b, MaxInFlight: 4})
		const n = 10_000
		for i := range n {
			leave, err := g.Enter(t.Context(), tenant.Identity{Key: fmt.Sprintf("t%d", i)})
			require.NoError(t, err)
			if i < n-1 {
				leave(false)
			}
		}
		assert.Equal(t, 1, g.Busy(), "only the tenant with a request in flight is counted")
		assert.Equal(t, n, b.Len(), "each tenant that just spent a token holds a bucket")
		time.Sleep(2 * time.Second)
		leave, err := g.Enter(t.Context(), tenant.Identity{Key: "late"})
		require.NoError(t, err)
		leave(false)
		assert.LessOrEqual(t, b.Len(), 2, "once their buckets are full again the idle tenants are forgotten")
	})
}

func TestBadSettingsAndIdentitiesAreRefused(t *testing.T) {
	_, err := tenant.NewGate(tenant.GateConfig{MaxInFlight: -1})
	assert.Error(t, err)
	g := newGate(t, tenant.GateConfig{})
	_, err = g.Enter(t.Context(), tenant.Identity{})
	assert.Error(t, err, "an identity with no key has no quota to be held to")
}
