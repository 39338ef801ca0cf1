package quota

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIntegrationAStalledRedisLeavesNoOrphans: a call the client gave up
// on during a stall still runs when the stall ends. Without an undo, a
// tenant with nothing in flight would find its one slot taken until the
// lease's TTL, and a refused request's reservation charged; with it, both
// are given back as soon as Redis runs what was queued.
func TestIntegrationAStalledRedisLeavesNoOrphans(t *testing.T) {
	srv := redistest.Own(t)
	rdb := srv.Client()
	leases := newLeases(t, rdb, LeasesConfig{Timeout: 50 * time.Millisecond, TTL: time.Hour})
	tokens := newTokens(t, rdb, TokensConfig{Timeout: 50 * time.Millisecond})
	ctx := context.Background()
	_, _, err := leases.Hold(ctx, "warm", 1) // load the scripts before the stall
	require.NoError(t, err)
	_, _, err = tokens.Reserve(ctx, "warm", 1000, 1)
	require.NoError(t, err)

	srv.Stall(500 * time.Millisecond)
	_, _, err = leases.Hold(ctx, "acme", 1)
	require.ErrorIs(t, err, ErrUnavailable, "the stall outlasts the call's timeout")
	_, _, err = tokens.Reserve(ctx, "acme", 1000, 600)
	require.ErrorIs(t, err, ErrUnavailable)
	leases.Close() // the undo calls have been sent (and timed out on this side too)
	tokens.Close()

	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 10*time.Second, 20*time.Millisecond, "the stall ends")
	n, err := rdb.ZCard(ctx, leases.Key("acme")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the lease the stalled Hold took when Redis ran it was released by its undo")
	_, d, err := tokens.Reserve(ctx, "acme", 1000, 1000)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "and the stalled Reserve's 600 tokens were settled back: the whole quota is there")
}

// TestIntegrationATenantHasAllItsSlotsSoonAfterAStall: the attack that
// found orphans — a tier of 3 slots, one request in flight, Redis stalled
// for 0.9 s while that request ends and three more arrive and give up.
// Every acquire queued in the stall runs when it ends, on connections the
// client has closed, in an order Redis chooses; the releases sent for
// them, and the in-flight request's own, may run before or after. Within
// 3 s of Redis answering again the tenant has its 3 slots.
func TestIntegrationATenantHasAllItsSlotsSoonAfterAStall(t *testing.T) {
	srv := redistest.Own(t)
	rdb := srv.Client()
	leases := newLeases(t, rdb, LeasesConfig{Timeout: 50 * time.Millisecond, TTL: time.Hour})
	ctx := context.Background()
	inFlight, d, err := leases.Hold(ctx, "acme", 3)
	require.NoError(t, err)
	require.True(t, d.Allowed)

	srv.Stall(900 * time.Millisecond)
	var wg sync.WaitGroup
	wg.Go(func() { _ = inFlight.Release(ctx) }) // the request in flight ends during the stall
	for range 3 {
		wg.Go(func() {
			_, _, err := leases.Hold(ctx, "acme", 3)
			assert.ErrorIs(t, err, ErrUnavailable, "the stall outlasts the call's timeout")
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool { return rdb.Ping(ctx).Err() == nil }, 10*time.Second, 10*time.Millisecond, "the stall ends")
	resumed := time.Now()
	assert.Eventually(t, func() bool {
		n, err := rdb.ZCard(ctx, leases.Key("acme")).Result()
		return err == nil && n == 0
	}, 3*time.Second, 20*time.Millisecond, "no lease is left behind by the stall")
	t.Logf("all slots back %v after Redis answered", time.Since(resumed).Round(time.Millisecond))
	for i := range 3 {
		_, d, err := leases.Hold(ctx, "acme", 3)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "slot %d of 3", i+1)
	}
}

// failOnceRelease is a Redis whose first release never leaves the client:
// a connection reset before the command was written.
type failOnceRelease struct {
	redis.Scripter
	failed atomic.Bool
}

func (f *failOnceRelease) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	if len(args) > 0 && args[0] == "release" && f.failed.CompareAndSwap(false, true) {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(errors.New("write tcp: connection reset by peer"))
		return cmd
	}
	return f.Scripter.EvalSha(ctx, sha, keys, args...)
}

// A release that never reached Redis is sent again in the background: the
// slot is not held for the lease's TTL because one write failed.
func TestIntegrationAFailedReleaseIsRetriedInTheBackground(t *testing.T) {
	srv := redistest.Own(t)
	rdb := srv.Client()
	leases := newLeases(t, &failOnceRelease{Scripter: rdb}, LeasesConfig{TTL: time.Hour})
	ctx := context.Background()
	lease, d, err := leases.Hold(ctx, "acme", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Error(t, lease.Release(ctx), "the first release fails")
	assert.Eventually(t, func() bool {
		n, err := rdb.ZCard(ctx, leases.Key("acme")).Result()
		return err == nil && n == 0
	}, 3*time.Second, 20*time.Millisecond, "the failed release is retried until Redis has it")
}
