package proofs

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/production-go/gateway-lab/gateway/quota"
	"github.com/production-go/gateway-lab/internal/testkit/linear"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxInFlight is each tenant's cap: small, so that sixteen callers over
// four tenants are refused often.
const maxInFlight = 3

// TestIntegrationTheConcurrencyLeasesAreLinearizable checks the gateway's
// in-flight cap shared by replicas (gateway/quota.Leases): sixteen callers
// hold a slot of one of four tenants, keep it up to 3 ms and release it,
// through the quiet, stalled and restarted phases. Every allow must say
// the slots left that one order of the holds and releases leaves; a hold
// whose caller gave up (its cancel runs in the background) and a release
// retried in the background may keep a slot only until the stall is over.
func TestIntegrationTheConcurrencyLeasesAreLinearizable(t *testing.T) {
	long(t)
	srv := redistest.Own(t)
	l, err := quota.NewLeases(srv.Client(), quota.LeasesConfig{Prefix: "lin", TTL: 10 * time.Minute, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer l.Close()
	rec := linear.NewRecorder()
	keys := keysOf("", 4)
	var ids atomic.Int64
	linear.Drive(t, rec, keys, clients, phases(srv, rec, keys, 1500*time.Millisecond, 3*time.Second, 1500*time.Millisecond),
		func(ctx context.Context, client int, key string) {
			id := int(ids.Add(1))
			var lease *quota.Lease
			rec.Record(client, key, linear.Hold{ID: id}, func() (any, bool) {
				h, d, err := l.Hold(ctx, key, maxInFlight)
				if err != nil {
					return linear.Outcome(err), false
				}
				lease = h
				return linear.Decision{Allowed: d.Allowed, Remaining: d.Remaining}, true
			})
			if lease == nil {
				return
			}
			linear.Work(3 * time.Millisecond) // the request's own work
			rec.Record(client, key, linear.Release{ID: id}, func() (any, bool) {
				if err := lease.Release(context.WithoutCancel(ctx)); err != nil {
					return linear.Outcome(err), false
				}
				return nil, true
			})
		})
	h := rec.History()
	calls, unknown := linear.Counts(h)
	require.Greater(t, calls-unknown, 1000, "enough calls answered to mean something")
	res := linear.Check(t, "leases", linear.Leases(maxInFlight), h, time.Minute)
	assert.Equal(t, porcupine.Ok, res, "the leases, quiet, stalled and restarted")
}
