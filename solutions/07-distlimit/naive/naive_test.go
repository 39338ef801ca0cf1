package naive

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNaiveLimiterOverAdmitsWhenReadsInterleave forces the interleaving that
// a real race produces now and then: two replicas both read the bucket
// before either writes. Burst is 1, and both are allowed.
func TestNaiveLimiterOverAdmitsWhenReadsInterleave(t *testing.T) {
	m := miniredis.RunT(t)
	var allowed atomic.Int32
	var bothRead sync.WaitGroup
	bothRead.Add(2)
	var wg sync.WaitGroup
	for range 2 { // two replicas, two clients
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		l := New(rdb, 0.001, 1)
		l.BetweenReadAndWrite = func() {
			bothRead.Done()
			bothRead.Wait() // hold the write until the other replica has read too
		}
		wg.Go(func() {
			ok, err := l.Allow(t.Context(), "tenant")
			if err == nil && ok {
				allowed.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int32(2), allowed.Load(),
		"burst 1, two requests, both allowed: read-compute-write is not atomic. The Lua script in distlimit makes this interleaving impossible.")
}

// TestNaiveLimiterIsCorrectWithoutInterleaving shows why the bug survives
// review: one request at a time, it behaves.
func TestNaiveLimiterIsCorrectWithoutInterleaving(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	l := New(rdb, 0.001, 1)
	first, err := l.Allow(t.Context(), "tenant")
	require.NoError(t, err)
	second, err := l.Allow(t.Context(), "tenant")
	require.NoError(t, err)
	assert.True(t, first)
	assert.False(t, second)
}
