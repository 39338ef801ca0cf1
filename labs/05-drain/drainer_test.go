package drain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func enter(t *testing.T, d *Drainer) func() {
	t.Helper()
	leave, err := d.Enter()
	require.NoError(t, err, "Enter should admit while accepting")
	require.NotNil(t, leave, "Enter admitted but returned a nil leave")
	return leave
}

func newDrainer(t *testing.T) *Drainer {
	t.Helper()
	d := New()
	require.NotNil(t, d, "New returned nil")
	return d
}

// drainAsync runs Drain in a goroutine and reports its result and when it returned.
type drainResult struct {
	ok bool
	at time.Duration
}

func drainAsync(ctx context.Context, d *Drainer, start time.Time) <-chan drainResult {
	out := make(chan drainResult, 1)
	go func() { out <- drainResult{d.Drain(ctx), time.Since(start)} }()
	return out
}

func TestEnterCountsActiveRequests(t *testing.T) {
	d := newDrainer(t)
	assert.True(t, d.Accepting(), "a new Drainer accepts")
	a, b := enter(t, d), enter(t, d)
	assert.Equal(t, 2, d.Active())
	a()
	assert.Equal(t, 1, d.Active())
	b()
	assert.Equal(t, 0, d.Active())
}

func TestLeaveIsIdempotent(t *testing.T) {
	d := newDrainer(t)
	a, b := enter(t, d), enter(t, d)
	a()
	a() // a deferred leave plus an explicit one
	assert.Equal(t, 1, d.Active(), "calling leave twice must count the request once: Active would go negative and drain would end early")
	b()
	assert.Equal(t, 0, d.Active())
}

func TestDrainStopsAcceptingBeforeItWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		leave := enter(t, d)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		res := drainAsync(ctx, d, time.Now())
		synctest.Wait() // Drain is now waiting for the in-flight request
		assert.False(t, d.Accepting(), "Drain must stop accepting first; otherwise new work sneaks in while it waits")
		_, err := d.Enter()
		assert.ErrorIs(t, err, ErrDraining, "a request arriving during the drain is refused")
		leave()
		assert.True(t, (<-res).ok)
	})
}

func TestDrainReturnsTrueWhenEverythingFinishes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		leave := enter(t, d)
		start := time.Now()
		defer time.AfterFunc(3*time.Second, leave).Stop() // the request finishes at 3 s
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		r := <-drainAsync(ctx, d, start)
		assert.True(t, r.ok, "every request finished within the budget")
		assert.Equal(t, 3*time.Second, r.at, "Drain returns the moment the last request leaves")
	})
}

func TestDrainReturnsFalseWhenTheBudgetEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		leave := enter(t, d)
		defer leave()
		start := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		r := <-drainAsync(ctx, d, start)
		assert.False(t, r.ok, "a request was still running when the budget ended: that is not a clean drain")
		assert.Equal(t, 5*time.Second, r.at, "the wait is bounded by the budget")
		assert.Equal(t, 1, d.Active(), "the unfinished request is still counted (it is what Report.Cut reports)")
	})
}

func TestDrainWithNothingInFlightReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		start := time.Now()
		assert.True(t, d.Drain(t.Context()))
		assert.Zero(t, time.Since(start))
		assert.False(t, d.Accepting())
	})
}

func TestDrainingChannelClosesWhenDrainBegins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		ch := d.Draining()
		require.NotNil(t, ch, "Draining should return a channel")
		select {
		case <-ch:
			t.Fatal("Draining is closed before any drain")
		default:
		}
		d.Drain(t.Context())
		select {
		case <-ch:
		default:
			t.Fatal("Draining should be closed once Drain begins, so streams can finish early")
		}
	})
}

func TestMiddlewareRefusesWhileDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		called := 0
		h := d.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			called++
			w.WriteHeader(http.StatusOK)
		}))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
		assert.Equal(t, http.StatusOK, rec.Code)

		d.Drain(t.Context())
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
		assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "a request arriving while draining gets 503")
		assert.Equal(t, "close", rec.Header().Get("Connection"), "and Connection: close, so the client reconnects through the load balancer")
		assert.Equal(t, 1, called, "the handler must not run for a refused request")
	})
}

func TestMiddlewareCountsTheRequestUntilItReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		var during int
		h := d.Middleware(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			during = d.Active()
			panic(http.ErrAbortHandler) // even a handler that aborts must be uncounted
		}))
		func() {
			defer func() { _ = recover() }()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
		}()
		assert.Equal(t, 1, during, "the request is in flight while its handler runs")
		assert.Equal(t, 0, d.Active(), "and is uncounted when the handler returns, however it returns")
	})
}

func TestReadinessFlipsAndLivenessStays(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		code := func(h http.Handler) int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			return rec.Code
		}
		assert.Equal(t, http.StatusOK, code(d.Readiness()), "/readyz is 200 while accepting")
		assert.Equal(t, http.StatusOK, code(d.Liveness()), "/healthz is 200 while running")
		d.Drain(t.Context())
		assert.Equal(t, http.StatusServiceUnavailable, code(d.Readiness()), "/readyz is 503 while draining: route traffic elsewhere")
		assert.Equal(t, http.StatusOK, code(d.Liveness()), "/healthz stays 200 while draining, or the orchestrator kills the pod mid-drain")
	})
}

func TestMarkUnreadyKeepsServing(t *testing.T) {
	d := newDrainer(t)
	d.MarkUnready()
	rec := httptest.NewRecorder()
	d.Readiness().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code, "MarkUnready turns /readyz to 503")
	assert.True(t, d.Accepting(), "but requests are still accepted until the drain itself")
	enter(t, d)()
}
