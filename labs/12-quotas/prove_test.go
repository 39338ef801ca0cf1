//go:build prove

package quotas

// make prove LAB=12 runs this file: it checks your quota with a
// linearizability checker (porcupine, as MIT 6.5840 grades its labs).
// Sixteen callers reserve an estimate and settle what they used; every
// reply — allowed with so many left, or refused with a Retry-After, a
// settle applied or not — must fit one order of the calls, each applied at
// some instant between its start and its return, on the quota the lesson
// describes. A caller whose reserve's reply was lost settles 0 at once,
// and a reserve that runs after its settle must take nothing. On miniredis
// the run is quiet, then the data is wiped (a restart); with redis-server
// on PATH it also runs on a Redis of its own, stalled for 0.9 s and
// restarted. A failure writes a drawing of the history (an HTML file) and
// prints its path.

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
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

const provePerMinute, proveClients = 600, 16

func proveTenants() []string {
	return []string{"acme", "globex", "initech", "umbrella", "hooli", "wonka", "stark", "wayne"}
}

// prove drives the quota on rdb through phases and checks the history.
func prove(t *testing.T, name string, rdb redis.Scripter, rec *linear.Recorder, phases []linear.Phase) {
	q, err := New(rdb, Config{Prefix: "prove"})
	require.NoError(t, err)
	var ids atomic.Int64
	linear.Drive(t, rec, proveTenants(), proveClients, phases, func(ctx context.Context, client int, tenant string) {
		id, estimate := int(ids.Add(1)), 20+rand.IntN(81)
		allowed, known := proveReserve(ctx, q, rec, client, tenant, id, estimate)
		used := 0
		switch {
		case known && !allowed:
			return
		case known:
			linear.Work(3 * time.Millisecond)
			used = rand.IntN(estimate*3/2 + 1)
		}
		rec.Record(client, tenant, linear.Settle{ID: id, Used: used, Late: !known}, func() (any, bool) {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 200*time.Millisecond)
			defer cancel()
			applied, err := q.Settle(sctx, tenant, strconv.Itoa(id), provePerMinute, used)
			if err != nil {
				return linear.Outcome(err), false
			}
			return linear.SettledOut{Applied: applied}, true
		})
	})
	h := rec.History()
	calls, unknown := linear.Counts(h)
	require.Greater(t, calls-unknown, 500, "too few calls answered to prove anything: do Reserve and Settle return errors?")
	assert.Equal(t, porcupine.Ok, linear.Check(t, name, linear.Quota(provePerMinute, 1), h, time.Minute),
		"the history is not one the quota's contract allows")
}

// proveReserve records one Reserve by a caller who gives up after 200 ms,
// and says whether it was allowed and whether its reply came back.
func proveReserve(ctx context.Context, q *Quota, rec *linear.Recorder, client int, tenant string, id, estimate int) (allowed, known bool) {
	rec.Record(client, tenant, linear.Reserve{ID: id, Estimate: estimate}, func() (any, bool) {
		rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		d, err := q.Reserve(rctx, tenant, strconv.Itoa(id), provePerMinute, estimate)
		if err != nil {
			return linear.Outcome(err), false
		}
		allowed, known = d.Allowed, true
		return linear.Decision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter}, true
	})
	return allowed, known
}

func TestProveTheQuotaIsLinearizableOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	rec := linear.NewRecorder()
	prove(t, "lab12-miniredis", rdb, rec, linear.MiniredisPhases(m, rec, proveClients, proveTenants(), time.Second, 500*time.Millisecond))
}

func TestProveTheQuotaIsLinearizableOnRedis(t *testing.T) {
	srv := redistest.Own(t)
	rec := linear.NewRecorder()
	prove(t, "lab12-redis", srv.Client(), rec, linear.OwnRedisPhases(srv, rec, proveClients, proveTenants(), time.Second, 1500*time.Millisecond, time.Second))
}
