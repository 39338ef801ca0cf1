//go:build prove

package distlimit

// make prove LAB=07 runs this file: it checks your limiter with a
// linearizability checker (porcupine, as MIT 6.5840 grades its labs).
// Sixteen callers hammer a few keys; every reply — allowed with so many
// left, or refused with a Retry-After — must fit one order of the calls,
// each applied at some instant between its start and its return, on the
// bucket the lesson describes. On miniredis the run is quiet, then the
// data is wiped (a restart); with redis-server on PATH it also runs on a
// Redis of its own, stalled for 0.9 s and restarted. A failure writes a
// drawing of the history (an HTML file) and prints its path.

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/anishathalye/porcupine"
	"github.com/production-go/gateway-lab/internal/testkit/linear"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const proveRate, proveBurst, proveClients = 20.0, 5, 16

func proveKeys() []string { return []string{"acme", "globex", "initech", "umbrella"} }

// prove drives the limiter on rdb through phases and checks the history.
func prove(t *testing.T, name string, rdb redis.Scripter, rec *linear.Recorder, phases []linear.Phase) {
	l, err := New(rdb, Config{Rate: proveRate, Burst: proveBurst, Prefix: "prove:", Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	linear.Drive(t, rec, proveKeys(), proveClients, phases, func(ctx context.Context, client int, key string) {
		rec.Record(client, key, linear.Allow{}, func() (any, bool) {
			d, err := l.Allow(ctx, key)
			if err != nil {
				return linear.Outcome(err), false
			}
			return linear.Decision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter}, true
		})
	})
	h := rec.History()
	calls, unknown := linear.Counts(h)
	require.Greater(t, calls-unknown, 500, "too few calls answered to prove anything: does Allow return errors?")
	assert.Equal(t, porcupine.Ok, linear.Check(t, name, linear.Bucket(proveRate, proveBurst), h, time.Minute),
		"the history is not one the bucket's contract allows")
}

func TestProveTheLimiterIsLinearizableOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	rec := linear.NewRecorder()
	prove(t, "lab07-miniredis", rdb, rec, linear.MiniredisPhases(m, rec, proveClients, proveKeys(), time.Second, 500*time.Millisecond))
}

func TestProveTheLimiterIsLinearizableOnRedis(t *testing.T) {
	srv := redistest.Own(t)
	rec := linear.NewRecorder()
	prove(t, "lab07-redis", srv.Client(), rec, linear.OwnRedisPhases(srv, rec, proveClients, proveKeys(), time.Second, 1500*time.Millisecond, time.Second))
}
