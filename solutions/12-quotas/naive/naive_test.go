package naive

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }

// TestIntegrationNaiveQuotaOvershootsWhenReadsInterleave forces, on a real
// Redis, the interleaving a real race produces now and then: two replicas
// both read the balance before either writes. 100 tokens, two requests of
// 60: both are admitted, and the balance says 40 — 20 tokens were spent
// twice and nobody can tell. Lab 12's script makes this impossible.
func TestIntegrationNaiveQuotaOvershootsWhenReadsInterleave(t *testing.T) {
	url := redistest.URL(t)
	key := redistest.Prefix(t) + "acme"
	var admitted atomic.Int32
	var bothRead, wg sync.WaitGroup
	bothRead.Add(2)
	var first *redis.Client
	for range 2 { // two replicas, two clients
		opts, err := redis.ParseURL(url)
		require.NoError(t, err)
		rdb := redis.NewClient(opts)
		t.Cleanup(func() { _ = rdb.Close() })
		if first == nil {
			first = rdb
		}
		q := New(rdb, 100)
		q.BetweenReadAndWrite = func() {
			bothRead.Done()
			bothRead.Wait() // hold the write until the other replica has read too
		}
		wg.Go(func() {
			ok, err := q.Reserve(context.Background(), key, 60)
			if assert.NoError(t, err) && ok {
				admitted.Add(1)
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() { first.Del(context.Background(), key) })
	assert.Equal(t, int32(2), admitted.Load(), "100 tokens, two reserves of 60, both admitted: get-then-set is not atomic")
	balance, err := New(first, 100).Balance(context.Background(), key)
	require.NoError(t, err)
	assert.Equal(t, 40, balance, "and the balance hides it: 120 tokens spent, 60 recorded")
}

// TestIntegrationNaiveQuotaIsRightOneAtATime shows why the bug survives
// review: with one request at a time, it behaves.
func TestIntegrationNaiveQuotaIsRightOneAtATime(t *testing.T) {
	opts, err := redis.ParseURL(redistest.URL(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	key := redistest.Prefix(t) + "acme"
	t.Cleanup(func() { rdb.Del(context.Background(), key) })
	q := New(rdb, 100)
	ok, err := q.Reserve(context.Background(), key, 60)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = q.Reserve(context.Background(), key, 60)
	require.NoError(t, err)
	assert.False(t, ok, "40 left: the second is refused")
}
