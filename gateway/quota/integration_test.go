package quota

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests this package exists for need a real Redis: miniredis runs one
// script at a time in one goroutine, so a read-then-write race can never
// show there. Each test stands for two replicas with two clients; without
// Redis they skip, and with REDIS_INTEGRATION_REQUIRED=1 they fail instead.
//
// Their clock is Redis' real one, so quotas are chosen to refill too slowly
// for the test's own duration to matter (seconds per estimate), and lease
// expiry is polled: fake time cannot reach a real server.

// integrationTimeout is generous: -race on a loaded machine is slow, and
// these tests are about atomicity, not latency.
const integrationTimeout = 5 * time.Second

// keyPrefix turns redistest.Prefix(t), which carries its own hash tag, into
// a Prefix without braces, as NewTokens and NewLeases require.
func keyPrefix(tb testing.TB) string {
	return strings.Trim(strings.NewReplacer("{", "", "}", "").Replace(redistest.Prefix(tb)), ":")
}

// replicas returns n clients to the real Redis, each with its own pool as
// separate processes would have, and deletes the test's keys at the end.
func replicas(t testing.TB, n int) []*redis.Client {
	t.Helper()
	url := redistest.URL(t)
	prefix := keyPrefix(t)
	clients := make([]*redis.Client, n)
	for i := range clients {
		opts, err := redis.ParseURL(url)
		require.NoError(t, err)
		opts.PoolSize = 64
		clients[i] = redis.NewClient(opts)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := clients[0].Scan(ctx, 0, "{"+prefix+":*", 100).Iterator()
		for iter.Next(ctx) {
			clients[0].Del(ctx, iter.Val())
		}
		for _, c := range clients {
			_ = c.Close()
		}
	})
	return clients
}

// race starts n calls at once and counts those allowed; call i runs on
// replica i%len(replicas). A call that errors fails the test.
func race(t *testing.T, n int, call func(i int) (bool, error)) int {
	t.Helper()
	var allowed atomic.Int32
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			ok, err := call(i)
			if !assert.NoError(t, err, "call %d", i) {
				return
			}
			if ok {
				allowed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	return int(allowed.Load())
}

func TestIntegrationTwoReplicasShareOneTokenQuota(t *testing.T) {
	clients := replicas(t, 2)
	prefix := keyPrefix(t)
	quotas := []*Tokens{
		newTokens(t, clients[0], TokensConfig{Prefix: prefix, Timeout: integrationTimeout}),
		newTokens(t, clients[1], TokensConfig{Prefix: prefix, Timeout: integrationTimeout}),
	}
	// 600 per minute, 30 per request: 20 fit; one more estimate takes 3s
	// to refill, far longer than a round.
	const perMinute, estimate, fit, rounds = 600, 30, 20, 20
	for round := range rounds {
		tenant := fmt.Sprintf("tenant-%d", round)
		got := race(t, 2*fit, func(i int) (bool, error) {
			_, d, err := quotas[i%2].Reserve(t.Context(), tenant, perMinute, estimate)
			return d.Allowed, err
		})
		require.Equal(t, fit, got,
			"round %d: two replicas racing for a quota of %d at %d a request: exactly %d may pass; more means the check and the charge are not one atomic step", round, perMinute, estimate, fit)
	}
}

func TestIntegrationParallelReservesAtANearlySpentQuotaDoNotOvershoot(t *testing.T) {
	clients := replicas(t, 2)
	prefix := keyPrefix(t)
	quotas := []*Tokens{
		newTokens(t, clients[0], TokensConfig{Prefix: prefix, Timeout: integrationTimeout}),
		newTokens(t, clients[1], TokensConfig{Prefix: prefix, Timeout: integrationTimeout}),
	}
	const perMinute, spent, estimate, parallel, rounds = 1000, 870, 50, 50, 10
	for round := range rounds {
		tenant := fmt.Sprintf("tenant-%d", round)
		start := time.Now()
		r, _ := reserve(t, quotas[0], tenant, perMinute, spent)
		settle(t, r, spent) // 130 left: room for 2 requests of 50
		var mu sync.Mutex
		var admitted []*Reservation
		got := race(t, parallel, func(i int) (bool, error) {
			r, d, err := quotas[i%2].Reserve(t.Context(), tenant, perMinute, estimate)
			if d.Allowed {
				mu.Lock()
				admitted = append(admitted, r)
				mu.Unlock()
			}
			return d.Allowed, err
		})
		require.Equal(t, 2, got,
			"round %d: %d parallel requests of %d against %d tokens left: exactly 2 may pass (zero overshoot: each reservation is taken atomically)", round, parallel, estimate, perMinute-spent)
		for _, r := range admitted {
			settle(t, r, estimate)
		}
		// Redis' real clock kept refilling meanwhile: at most this much.
		refill := int(time.Since(start).Seconds()*perMinute/60) + 1
		left := balance(t, quotas[1], tenant, perMinute)
		assert.True(t, left >= perMinute-spent-2*estimate && left <= perMinute-spent-2*estimate+refill,
			"round %d: %d left after two requests settled at their estimate, want %d plus at most %d of refill", round, left, perMinute-spent-2*estimate, refill)
	}
}

func TestIntegrationSettleRefundsAndChargesExactly(t *testing.T) {
	clients := replicas(t, 2)
	prefix := keyPrefix(t)
	a := newTokens(t, clients[0], TokensConfig{Prefix: prefix, Timeout: integrationTimeout})
	b := newTokens(t, clients[1], TokensConfig{Prefix: prefix, Timeout: integrationTimeout})
	// 60 per minute: one token a second, so the test's milliseconds refill
	// less than one whole token.
	r, d := reserve(t, a, "acme", 60, 50)
	require.Equal(t, 10, d.Remaining)
	settle(t, r, 20)
	assert.Equal(t, 40, balance(t, b, "acme", 60), "10 + the refund of 30, seen from the other replica")
	r, _ = reserve(t, b, "acme", 60, 30)
	settle(t, r, 45)
	_, d = reserve(t, a, "acme", 60, 0)
	require.False(t, d.Allowed, "10 − 15 leaves the tenant 5 tokens in debt")
	assert.Greater(t, d.RetryAfter, 4*time.Second, "5 tokens of debt at one a second")
	assert.LessOrEqual(t, d.RetryAfter, 5*time.Second)
	require.NoError(t, r.Settle(t.Context(), 0), "settle twice")
	_, d = reserve(t, a, "acme", 60, 0)
	assert.False(t, d.Allowed, "the second Settle is a no-op: still in debt")
}

func TestIntegrationLeasesCapInFlightAcrossReplicas(t *testing.T) {
	clients := replicas(t, 2)
	prefix := keyPrefix(t)
	leases := []*Leases{
		newLeases(t, clients[0], LeasesConfig{Prefix: prefix, TTL: time.Minute, Timeout: integrationTimeout}),
		newLeases(t, clients[1], LeasesConfig{Prefix: prefix, TTL: time.Minute, Timeout: integrationTimeout}),
	}
	const max, rounds = 5, 20
	for round := range rounds {
		tenant := fmt.Sprintf("tenant-%d", round)
		var mu sync.Mutex
		var releases []func(context.Context) error
		got := race(t, 2*max, func(i int) (bool, error) {
			release, d, err := leases[i%2].Acquire(t.Context(), tenant, max)
			if d.Allowed {
				mu.Lock()
				releases = append(releases, release)
				mu.Unlock()
			}
			return d.Allowed, err
		})
		require.Equal(t, max, got,
			"round %d: %d concurrent acquires from two replicas against a cap of %d: exactly %d may hold a lease", round, 2*max, max, max)
		for _, release := range releases {
			require.NoError(t, release(t.Context()))
			require.NoError(t, release(t.Context()), "release twice is safe")
		}
		got = race(t, 2*max, func(i int) (bool, error) {
			_, d, err := leases[i%2].Acquire(t.Context(), tenant, max)
			return d.Allowed, err
		})
		require.Equal(t, max, got, "round %d: after every release, exactly %d slots again: a double release must not free extra ones", round, max)
	}
}

func TestIntegrationCrashedReplicasLeasesExpire(t *testing.T) {
	clients := replicas(t, 2)
	prefix := keyPrefix(t)
	const ttl = 300 * time.Millisecond
	crashed := newLeases(t, clients[0], LeasesConfig{Prefix: prefix, TTL: ttl, Timeout: integrationTimeout})
	survivor := newLeases(t, clients[1], LeasesConfig{Prefix: prefix, TTL: ttl, Timeout: integrationTimeout})
	acquire(t, crashed, "acme", 2)
	acquire(t, crashed, "acme", 2) // and then its replica dies: never released
	_, d := acquire(t, survivor, "acme", 2)
	require.False(t, d.Allowed, "both slots are held by the crashed replica")
	pttl, err := clients[1].PTTL(t.Context(), survivor.Key("acme")).Result()
	require.NoError(t, err)
	assert.True(t, pttl > 0 && pttl <= ttl, "the lease set expires with its last lease: PTTL %s, want (0, %s]", pttl, ttl)
	require.Eventually(t, func() bool {
		_, d, err := survivor.Acquire(context.Background(), "acme", 2)
		return err == nil && d.Allowed
	}, 5*time.Second, 10*time.Millisecond, "the crashed replica's leases must come back by themselves after their TTL")
}
