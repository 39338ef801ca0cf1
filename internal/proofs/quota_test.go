package proofs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/production-go/gateway-lab/internal/testkit/linear"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	quotas "github.com/production-go/gateway-lab/solutions/12-quotas"
	"github.com/production-go/gateway-lab/solutions/12-quotas/naive"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// perMinute is each tenant's token quota: ten tokens a second of refill,
// against estimates of 20 to 100, so that reserves are refused often.
const perMinute = 600

// TestIntegrationTheTokenQuotaIsLinearizable checks lab 12's quota:
// sixteen callers over four tenants reserve an estimate, and settle what
// they "used" (up to half as much again) — or, when the reserve's reply
// was lost, settle 0 at once, as a gateway undoes a reserve it cannot
// know ran — through the quiet, stalled and restarted phases. Every
// allow, remaining and Retry-After must fit one order of the calls; a
// settle applies once; a reserve that runs after its settle takes nothing.
func TestIntegrationTheTokenQuotaIsLinearizable(t *testing.T) {
	long(t)
	srv := redistest.Own(t)
	q, err := quotas.New(srv.Client(), quotas.Config{Prefix: "lin"})
	require.NoError(t, err)
	rec := linear.NewRecorder()
	keys := keysOf("", 8)
	var ids atomic.Int64
	linear.Drive(t, rec, keys, clients, phases(srv, rec, keys, 1500*time.Millisecond, 2*time.Second, 1500*time.Millisecond),
		func(ctx context.Context, client int, key string) {
			id, estimate := int(ids.Add(1)), 20+rand.IntN(81)
			var allowed, known bool
			rec.Record(client, key, linear.Reserve{ID: id, Estimate: estimate}, func() (any, bool) {
				rctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond) // a caller that gives up
				defer cancel()
				d, err := q.Reserve(rctx, key, fmt.Sprint(id), perMinute, estimate)
				if err != nil {
					return linear.Outcome(err), false
				}
				allowed, known = d.Allowed, true
				return linear.Decision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter}, true
			})
			used := 0
			switch {
			case known && !allowed:
				return
			case known:
				linear.Work(3 * time.Millisecond)
				used = rand.IntN(estimate*3/2 + 1)
			}
			rec.Record(client, key, linear.Settle{ID: id, Used: used, Late: !known}, func() (any, bool) {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 200*time.Millisecond)
				defer cancel()
				applied, err := q.Settle(sctx, key, fmt.Sprint(id), perMinute, used)
				if err != nil {
					return linear.Outcome(err), false
				}
				return linear.SettledOut{Applied: applied}, true
			})
		})
	h := rec.History()
	calls, unknown := linear.Counts(h)
	require.Greater(t, calls-unknown, 1000, "enough calls answered to mean something")
	res := linear.Check(t, "quota", linear.Quota(perMinute, 1), h, time.Minute)
	assert.Equal(t, porcupine.Ok, res, "lab 12's quota, quiet, stalled and restarted")
}

// TestIntegrationTheNaiveTokenQuotaIsCaught runs the check on lab 12's
// naive quota (read the balance, decide in Go, write it back): two
// replicas spend the same tokens, and the checker must say so.
func TestIntegrationTheNaiveTokenQuotaIsCaught(t *testing.T) {
	long(t)
	srv := redistest.Own(t)
	q := naive.New(srv.Client(), perMinute)
	rec := linear.NewRecorder()
	keys := keysOf("naive:", 2)
	var ids atomic.Int64
	linear.Drive(t, rec, keys, clients, []linear.Phase{{Name: "quiet", Length: 500 * time.Millisecond}}, func(ctx context.Context, client int, key string) {
		id, estimate := int(ids.Add(1)), 20+rand.IntN(81)
		rec.Record(client, key, linear.Reserve{ID: id, Estimate: estimate}, func() (any, bool) {
			ok, err := q.Reserve(ctx, key, estimate)
			if err != nil {
				return linear.Outcome(err), false
			}
			return linear.Decision{Allowed: ok, OnlyAllowed: true}, true
		})
	})
	res := linear.Check(t, "naive-quota", linear.Quota(perMinute, 1), rec.History(), time.Minute)
	assert.Equal(t, porcupine.Illegal, res, "the naive quota's lost updates are not linearizable")
}
