package quotas

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replicas is n Quotas on n clients of one real Redis: n replicas.
func replicas(t *testing.T, n int, cfg Config) ([]*Quota, *redis.Client) {
	t.Helper()
	url := redistest.URL(t)
	// The helper's prefix carries a hash tag of its own; ours goes inside
	// the quota's tag, so it loses its braces and its last ':'.
	cfg.Prefix = strings.TrimSuffix(strings.NewReplacer("{", "", "}", "").Replace(redistest.Prefix(t)), ":")
	var qs []*Quota
	var first *redis.Client
	for range n {
		opts, err := redis.ParseURL(url)
		require.NoError(t, err)
		opts.PoolSize = 32
		rdb := redis.NewClient(opts)
		t.Cleanup(func() { _ = rdb.Close() })
		q, err := New(rdb, cfg)
		require.NoError(t, err)
		qs = append(qs, q)
		if first == nil {
			first = rdb
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := first.Keys(ctx, "{"+cfg.Prefix+":*").Result()
		if len(keys) > 0 {
			first.Del(ctx, keys...)
		}
	})
	return qs, first
}

// TestIntegrationParallelReservesNeverOvershootTheQuota is what the lab
// exists for, and it needs a real Redis: miniredis runs one command at a
// time, so a read-then-write race never shows there. Three replicas send
// 60 reserves of 10 tokens at once against 200 tokens a tenant: exactly 20
// may pass, in every one of 30 rounds.
//
// Without Redis it skips; with REDIS_INTEGRATION_REQUIRED=1 it fails.
func TestIntegrationParallelReservesNeverOvershootTheQuota(t *testing.T) {
	qs, _ := replicas(t, 3, Config{})
	for round := range 30 {
		tenant := fmt.Sprintf("tenant-%d", round)
		var allowed, failed atomic.Int32
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range 60 {
			q := qs[i%len(qs)]
			wg.Go(func() {
				<-start
				d, err := q.Reserve(context.Background(), tenant, fmt.Sprintf("r%d", i), 200, 10)
				switch {
				case err != nil:
					failed.Add(1)
				case d.Allowed:
					allowed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		require.Zero(t, failed.Load(), "round %d: Redis errors", round)
		require.Equal(t, int32(20), allowed.Load(), "round %d: 200 tokens hold 20 reserves of 10; more is an overshoot", round)
	}
}

// TestIntegrationSettlesFromEveryReplicaAddUp reserves on one replica and
// settles on another, concurrently: the bucket ends exactly where the
// arithmetic says.
func TestIntegrationSettlesFromEveryReplicaAddUp(t *testing.T) {
	qs, _ := replicas(t, 3, Config{})
	const n, per = 40, 1_000_000
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("r%d", i)
			d, err := qs[i%3].Reserve(context.Background(), "acme", id, per, 1000)
			if !assert.NoError(t, err) || !assert.True(t, d.Allowed) {
				return
			}
			applied, err := qs[(i+1)%3].Settle(context.Background(), "acme", id, per, 250)
			assert.NoError(t, err)
			assert.True(t, applied)
			applied, err = qs[(i+2)%3].Settle(context.Background(), "acme", id, per, 0)
			assert.NoError(t, err)
			assert.False(t, applied, "a second settle, from a third replica, applies nothing")
		})
	}
	wg.Wait()
	d, err := qs[0].Reserve(context.Background(), "acme", "probe", per, 0)
	require.NoError(t, err)
	// 40 × 250 used; the refill adds a little (1M a minute) while it ran.
	assert.GreaterOrEqual(t, d.Remaining, per-n*250)
	assert.Less(t, d.Remaining, per-n*250+per/60, "settled at 250 each, not refunded twice")
}
