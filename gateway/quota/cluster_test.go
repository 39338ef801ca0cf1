package quota

import (
	"fmt"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIntegrationClusterSharesOneQuotaAndKeepsATenantInOneSlot runs on a
// real three-master Redis Cluster (started by redistest.Cluster, ~1s, so
// its checks share one). A script may touch only keys of one slot: without
// the {prefix:tenant} hash tag, Reserve would fail with CROSSSLOT.
func TestIntegrationClusterSharesOneQuotaAndKeepsATenantInOneSlot(t *testing.T) {
	first := redistest.Cluster(t)
	second := redis.NewClusterClient(&redis.ClusterOptions{Addrs: first.Options().Addrs, PoolSize: 64})
	t.Cleanup(func() { _ = second.Close() })
	clients := []*redis.ClusterClient{first, second}
	prefix := keyPrefix(t)

	t.Run("two replicas share one token quota", func(t *testing.T) {
		quotas := []*Tokens{
			newTokens(t, clients[0], TokensConfig{Prefix: prefix, Timeout: integrationTimeout}),
			newTokens(t, clients[1], TokensConfig{Prefix: prefix, Timeout: integrationTimeout}),
		}
		const perMinute, estimate, fit, rounds = 600, 30, 20, 10
		for round := range rounds {
			tenant := fmt.Sprintf("share-%d", round)
			got := race(t, 2*fit, func(i int) (bool, error) {
				_, d, err := quotas[i%2].Reserve(t.Context(), tenant, perMinute, estimate)
				return d.Allowed, err
			})
			require.Equal(t, fit, got, "round %d: on the cluster too, exactly %d requests fit one quota", round, fit)
		}
	})

	t.Run("two replicas share one in-flight cap", func(t *testing.T) {
		leases := []*Leases{
			newLeases(t, clients[0], LeasesConfig{Prefix: prefix, TTL: time.Minute, Timeout: integrationTimeout}),
			newLeases(t, clients[1], LeasesConfig{Prefix: prefix, TTL: time.Minute, Timeout: integrationTimeout}),
		}
		got := race(t, 10, func(i int) (bool, error) {
			_, d, err := leases[i%2].Acquire(t.Context(), "leases", 5)
			return d.Allowed, err
		})
		require.Equal(t, 5, got, "exactly the cap of 5 holds a lease")
	})

	t.Run("a tenant's keys land in one slot, tenants spread", func(t *testing.T) {
		q := newTokens(t, first, TokensConfig{Prefix: prefix, Timeout: integrationTimeout})
		l := newLeases(t, first, LeasesConfig{Prefix: prefix, TTL: time.Minute, Timeout: integrationTimeout})
		ctx := t.Context()
		nodes := map[string]bool{}
		for i := range 30 {
			tenant := fmt.Sprintf("slot-%d", i)
			reserve(t, q, tenant, 100, 10)
			acquire(t, l, tenant, 1)
			bucket, open := keysOf(q, tenant)
			var slots []int64
			for _, key := range []string{bucket, open, l.Key(tenant)} {
				slot, err := first.ClusterKeySlot(ctx, key).Result()
				require.NoError(t, err)
				slots = append(slots, slot)
			}
			require.Equal(t, []int64{slots[0], slots[0], slots[0]}, slots, "tenant %q: its bucket, reservations and leases must share one slot", tenant)
			node, err := first.MasterForKey(ctx, bucket)
			require.NoError(t, err)
			n, err := node.Exists(ctx, bucket, open, l.Key(tenant)).Result()
			require.NoError(t, err)
			require.Equal(t, int64(3), n, "tenant %q: all three keys live on the master that owns the slot", tenant)
			nodes[node.Options().Addr] = true
		}
		assert.Len(t, nodes, 3, "30 tenants should spread over all three masters: the hash tag is per tenant, not one for everything")
	})
}
