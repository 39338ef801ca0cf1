package proofs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/production-go/gateway-lab/internal/testkit/linear"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	distlimit "github.com/production-go/gateway-lab/solutions/07-distlimit"
	"github.com/production-go/gateway-lab/solutions/07-distlimit/naive"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The limiter's settings: a rate slow enough that refusals are common and
// a burst big enough that allows are too, so both replies are checked.
const (
	rate  = 20.0
	burst = 5
)

// TestIntegrationTheRateLimiterIsLinearizable checks lab 07's limiter:
// sixteen callers over eight keys on a Redis of the test's own, quiet, then
// stalled for 0.9 s while every call gives up after 200 ms, then restarted
// with its data lost. Every reply — allowed with so many left, or refused
// with a Retry-After — must fit one order of the calls on Redis' clock.
func TestIntegrationTheRateLimiterIsLinearizable(t *testing.T) {
	long(t)
	srv := redistest.Own(t)
	rdb := srv.Client()
	l, err := distlimit.New(rdb, distlimit.Config{Rate: rate, Burst: burst, Prefix: "lin:", Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	rec := linear.NewRecorder()
	keys := keysOf("", 8)
	linear.Drive(t, rec, keys, clients, phases(srv, rec, keys, 1500*time.Millisecond, 2*time.Second, 1500*time.Millisecond),
		func(ctx context.Context, client int, key string) {
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
	require.Greater(t, calls-unknown, 1000, "enough calls answered to mean something")
	require.Positive(t, unknown, "the stall and the restart left calls of unknown outcome")
	res := linear.Check(t, "limiter", linear.Bucket(rate, burst), h, time.Minute)
	assert.Equal(t, porcupine.Ok, res, "lab 07's limiter, quiet, stalled and restarted")
}

// TestIntegrationTheNaiveRateLimiterIsCaught runs the same check on lab
// 07's naive limiter (read, decide in Go, write back): its lost updates
// hand the same token to two callers, and the checker must say so — or it
// proves nothing about the one that passes.
func TestIntegrationTheNaiveRateLimiterIsCaught(t *testing.T) {
	long(t)
	srv := redistest.Own(t)
	rdb := srv.Client()
	l := naive.New(rdb, rate, burst)
	rec := linear.NewRecorder()
	keys := keysOf("naive:", 2)
	linear.Drive(t, rec, keys, clients, []linear.Phase{{Name: "quiet", Length: time.Second}}, func(ctx context.Context, client int, key string) {
		rec.Record(client, key, linear.Allow{}, func() (any, bool) {
			ok, err := l.Allow(ctx, key)
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("naive: %v", err)
				}
				return nil, false
			}
			return linear.Decision{Allowed: ok, OnlyAllowed: true}, true
		})
	})
	res := linear.Check(t, "naive-limiter", linear.Bucket(rate, burst), rec.History(), time.Minute)
	assert.Equal(t, porcupine.Illegal, res, "the naive limiter's lost updates are not linearizable")
}
