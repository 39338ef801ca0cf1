package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clusterRecTB stands in for a test so Cluster's skip-or-fail decision can
// be observed instead of ending the real test.
type clusterRecTB struct {
	testing.TB
	mu              sync.Mutex
	skipped, failed bool
	msg             string
}

func (r *clusterRecTB) Helper() {}
func (r *clusterRecTB) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}
func (r *clusterRecTB) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// clusterWith runs f against a recording TB in its own goroutine (Skipf and
// Fatalf end that goroutine, as they end a real test).
func clusterWith(f clusterFinder) *clusterRecTB {
	rec := &clusterRecTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.cluster(rec)
	}()
	<-done
	return rec
}

func clusterEnv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func noBinaries(string) (string, error) { return "", exec.ErrNotFound }

func TestMissingClusterSkipsWhenNotRequired(t *testing.T) {
	rec := clusterWith(clusterFinder{getenv: clusterEnv(nil), lookPath: noBinaries})
	assert.True(t, rec.skipped, "without %s a missing redis-server skips", RequiredEnv)
	assert.False(t, rec.failed)
	assert.Contains(t, rec.msg, "no redis-server on PATH")
	assert.Contains(t, rec.msg, RequiredEnv, "the skip message should say how to make it a failure")
}

func TestMissingClusterFailsWhenRequired(t *testing.T) {
	rec := clusterWith(clusterFinder{getenv: clusterEnv(map[string]string{RequiredEnv: "1"}), lookPath: noBinaries})
	assert.True(t, rec.failed, "with %s=1 a missing cluster must fail the test", RequiredEnv)
	assert.False(t, rec.skipped)
}

func TestMissingRedisCLIIsNamed(t *testing.T) {
	onlyServer := func(name string) (string, error) {
		if name == "redis-server" {
			return "/usr/bin/redis-server", nil
		}
		return "", exec.ErrNotFound
	}
	rec := clusterWith(clusterFinder{getenv: clusterEnv(nil), lookPath: onlyServer})
	assert.True(t, rec.skipped)
	assert.Contains(t, rec.msg, "no redis-cli on PATH")
}

func TestUnhealthyClusterAddrsFailWhenRequired(t *testing.T) {
	rec := clusterWith(clusterFinder{
		getenv:   clusterEnv(map[string]string{ClusterEnv: "127.0.0.1:1", RequiredEnv: "1"}),
		patience: 100 * time.Millisecond,
		lookPath: func(string) (string, error) {
			t.Error("REDIS_CLUSTER_ADDRS is set: PATH must not be searched")
			return "", exec.ErrNotFound
		},
	})
	assert.True(t, rec.failed, "an explicit cluster that does not answer must fail when Redis is required")
	assert.Contains(t, rec.msg, "not a healthy cluster")
}

// TestIntegrationClusterHasThreeMastersServingEverySlot is the cluster
// helper's own real-Redis test.
func TestIntegrationClusterHasThreeMastersServingEverySlot(t *testing.T) {
	rdb := Cluster(t)
	ctx := t.Context()
	var masters []string
	var mu sync.Mutex
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		masters = append(masters, node.Options().Addr)
		return nil
	}))
	assert.Len(t, masters, 3, "three masters")
	info, err := rdb.ClusterInfo(ctx).Result()
	require.NoError(t, err)
	assert.Contains(t, info, "cluster_slots_assigned:16384", "every slot is served")

	// Keys with different hash tags spread over the nodes; the client
	// follows them there.
	prefix := Prefix(t)
	nodes := map[string]bool{}
	for i := range 30 {
		key := fmt.Sprintf("{%s-%d}", strings.Trim(prefix, "{}:"), i)
		require.NoError(t, rdb.Set(ctx, key, i, 0).Err())
		node, err := rdb.MasterForKey(ctx, key)
		require.NoError(t, err)
		nodes[node.Options().Addr] = true
	}
	assert.Len(t, nodes, 3, "30 hash tags should land on all three masters")
}
