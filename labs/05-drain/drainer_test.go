package drain

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func enter(t *testing.T, d *Drainer) func() {
	t.Helper()
	leave, err := d.Enter()
	require.NoError(t, err, "want Enter to admit while accepting, got %v", err)
	require.NotNil(t, leave, "want a leave func from Enter, got nil")
	return leave
}

func newDrainer(t *testing.T) *Drainer {
	t.Helper()
	d := New()
	require.NotNil(t, d, "want a Drainer from New, got nil")
	return d
}

// inBubble runs f as a subtest in a synctest bubble, unless an earlier
// subtest failed: the first failure is the one to read, and the rest of a
// table would repeat it.
func inBubble(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if t.Failed() {
		return
	}
	t.Run(name, func(t *testing.T) { synctest.Test(t, f) })
}

// drainResult is what Drain returned and when, since start.
type drainResult struct {
	ok bool
	at time.Duration
}

// drainAsync runs Drain in a goroutine and reports its result and when it returned.
func drainAsync(ctx context.Context, d *Drainer, start time.Time) <-chan drainResult {
	out := make(chan drainResult, 1)
	go func() { out <- drainResult{d.Drain(ctx), time.Since(start)} }()
	return out
}

// awaitDrain waits for a Drain started with drainAsync, for at most limit of
// fake time: a Drain that ignores its budget fails the test here instead of
// deadlocking the bubble.
func awaitDrain(t *testing.T, res <-chan drainResult, limit time.Duration) drainResult {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(limit):
		t.Fatalf("want Drain to return within its budget, got it still waiting %v later", limit)
		return drainResult{}
	}
}

func TestEnterCountsActiveRequests(t *testing.T) {
	d := newDrainer(t)
	require.True(t, d.Accepting(), "want a new Drainer accepting, got Accepting() false")
	a, b := enter(t, d), enter(t, d)
	require.Equal(t, 2, d.Active(), "want 2 in flight after 2 Enters, got %d", d.Active())
	a()
	require.Equal(t, 1, d.Active(), "want 1 in flight after one leave, got %d", d.Active())
	b()
	require.Equal(t, 0, d.Active(), "want 0 in flight after both left, got %d", d.Active())
}

func TestLeaveIsIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		a, b := enter(t, d), enter(t, d)
		a()
		a() // a deferred leave plus an explicit one
		require.Equal(t, 1, d.Active(), "want 1 in flight after leaving one request twice, got %d (a second leave must count nothing)", d.Active())
		start := time.Now()
		res := drainAsync(t.Context(), d, start)
		a() // a third time, while the drain waits for b
		synctest.Wait()
		select {
		case r := <-res:
			t.Fatalf("want Drain still waiting for the other request, got it returning %v after a repeated leave", r.ok)
		default:
		}
		time.Sleep(time.Second)
		b()
		r := awaitDrain(t, res, time.Minute)
		require.Equal(t, drainResult{ok: true, at: time.Second}, r, "want Drain to return true when the last request leaves at 1 s, got %+v", r)
		require.Equal(t, 0, d.Active(), "want 0 in flight, got %d", d.Active())
	})
}

func TestDrainStopsAcceptingBeforeItWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		leave := enter(t, d)
		defer leave()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		res := drainAsync(ctx, d, time.Now())
		synctest.Wait() // Drain is now waiting for the in-flight request
		require.False(t, d.Accepting(), "want Accepting() false while Drain waits, got true: new work sneaks in while it waits")
		_, err := d.Enter()
		require.ErrorIs(t, err, ErrDraining, "want ErrDraining for a request arriving during the drain, got %v", err)
		leave()
		r := awaitDrain(t, res, time.Minute)
		require.True(t, r.ok, "want Drain true once the request left, got false")
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
		r := awaitDrain(t, drainAsync(ctx, d, start), time.Minute)
		require.Equal(t, drainResult{ok: true, at: 3 * time.Second}, r, "want true at the instant the last request leaves (3 s), got %+v", r)
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
		r := awaitDrain(t, drainAsync(ctx, d, start), time.Minute)
		require.Equal(t, drainResult{ok: false, at: 5 * time.Second}, r, "want false at the instant the 5 s budget ends (a request is still running), got %+v", r)
		require.Equal(t, 1, d.Active(), "want the unfinished request still counted (it is what Report.Cut reports), got %d", d.Active())
	})
}

func TestDrainWithAContextAlreadyDone(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}},
		{"past its deadline", func() (context.Context, context.CancelFunc) {
			return context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		}},
	} {
		inBubble(t, c.name+", nothing in flight", func(t *testing.T) {
			ctx, cancel := c.ctx()
			defer cancel()
			d := newDrainer(t)
			require.True(t, d.Drain(ctx), "want true (nothing was in flight, so everything finished, spent budget or not), got false")
			require.False(t, d.Accepting(), "want accepting stopped, got Accepting() true")
		})
		inBubble(t, c.name+", one request in flight", func(t *testing.T) {
			ctx, cancel := c.ctx()
			defer cancel()
			d := newDrainer(t)
			leave := enter(t, d)
			defer leave()
			start := time.Now()
			r := awaitDrain(t, drainAsync(ctx, d, start), time.Minute)
			require.Equal(t, drainResult{ok: false, at: 0}, r, "want false at once: the budget was spent before Drain began, got %+v", r)
			require.False(t, d.Accepting(), "want accepting stopped even with no budget left: the flip comes before the wait, got Accepting() true")
			_, err := d.Enter()
			require.ErrorIs(t, err, ErrDraining, "want ErrDraining after a Drain that had no budget, got %v", err)
			select {
			case <-d.Draining():
			default:
				t.Fatal("want Draining() closed after a Drain that had no budget, got it open")
			}
		})
	}
}

func TestDrainTwice(t *testing.T) {
	inBubble(t, "again, with a longer budget", func(t *testing.T) {
		d := newDrainer(t)
		leave := enter(t, d)
		start := time.Now()
		defer time.AfterFunc(3*time.Second, leave).Stop() // the request finishes at 3 s
		short, cancelShort := context.WithTimeout(t.Context(), time.Second)
		defer cancelShort()
		r := awaitDrain(t, drainAsync(short, d, start), time.Minute)
		require.Equal(t, drainResult{ok: false, at: time.Second}, r, "want the first Drain to give up when its 1 s budget ends, got %+v", r)
		long, cancelLong := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancelLong()
		r = awaitDrain(t, drainAsync(long, d, start), time.Minute)
		require.Equal(t, drainResult{ok: true, at: 3 * time.Second}, r, "want a second Drain to wait again and return true when the request leaves at 3 s, got %+v", r)
	})
	inBubble(t, "two at once", func(t *testing.T) {
		d := newDrainer(t)
		leave := enter(t, d)
		start := time.Now()
		defer time.AfterFunc(3*time.Second, leave).Stop()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		first, second := drainAsync(ctx, d, start), drainAsync(ctx, d, start)
		for i, res := range []<-chan drainResult{first, second} {
			r := awaitDrain(t, res, time.Minute)
			require.Equal(t, drainResult{ok: true, at: 3 * time.Second}, r, "want Drain %d of 2 to return true when the request leaves at 3 s, got %+v", i+1, r)
		}
	})
	inBubble(t, "after everything finished", func(t *testing.T) {
		d := newDrainer(t)
		enter(t, d)()
		require.True(t, d.Drain(t.Context()), "want the first Drain true (nothing in flight), got false")
		start := time.Now()
		require.True(t, d.Drain(t.Context()), "want a second Drain true as well (still nothing in flight), got false")
		require.Zero(t, time.Since(start), "want the second Drain to return at once, got %v", time.Since(start))
	})
}

// This test runs in real time: it races goroutines, not clocks. Workers
// enter and leave in a loop, so the in-flight count keeps touching zero
// while Drain begins. A worker admitted as the drain began holds its
// request, so a Drain that returns true while it is still here is caught.
func TestEnterRacingDrainNeverAdmitsLate(t *testing.T) {
	const rounds, workers = 300, 3
	for round := range rounds {
		d := newDrainer(t)
		var drained atomic.Bool // set once Drain has returned true
		var late, lowActive atomic.Int32
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for n := 0; ; n++ {
					leave, err := d.Enter()
					if err != nil {
						return
					}
					if d.Active() < 1 {
						lowActive.Add(1)
					}
					held := !d.Accepting()
					if held { // admitted as the drain began: Drain must wait for this one
						for range 50 {
							if drained.Load() {
								late.Add(1)
								break
							}
							runtime.Gosched()
						}
					}
					if held || n%8 == 0 {
						var both sync.WaitGroup
						both.Go(leave) // a stream's cleanup and the handler's defer
						leave()        // may both leave, at once
						both.Wait()
					} else {
						leave()
					}
					runtime.Gosched()
				}
			})
		}
		for range 1 + round%4 { // let Drain meet the workers at different points
			runtime.Gosched()
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second) // a bound for a hang, not a timing assertion
		ok := d.Drain(ctx)
		cancel()
		if ok {
			drained.Store(true)
		}
		active := d.Active()
		wg.Wait()
		require.True(t, ok, "round %d: want Drain true once the racing requests left, got false", round)
		require.Zero(t, late.Load(), "round %d: want no request in flight after Drain returned true, got %d", round, late.Load())
		require.Zero(t, active, "round %d: want Active() 0 the moment Drain returned true, got %d", round, active)
		require.Zero(t, lowActive.Load(), "round %d: want Active() at least 1 while a request is in flight, got less %d times", round, lowActive.Load())
		require.Equal(t, 0, d.Active(), "round %d: want Active() 0 after every request left (twice), got %d", round, d.Active())
		_, err := d.Enter()
		require.ErrorIs(t, err, ErrDraining, "round %d: want ErrDraining after the drain, got %v", round, err)
	}
}

func TestDrainWithNothingInFlightReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		start := time.Now()
		require.True(t, d.Drain(t.Context()), "want true (nothing in flight), got false")
		require.Zero(t, time.Since(start), "want Drain to return at once, got %v", time.Since(start))
		require.False(t, d.Accepting(), "want accepting stopped, got Accepting() true")
	})
}

func TestDrainingChannelClosesWhenDrainBegins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDrainer(t)
		ch := d.Draining()
		require.NotNil(t, ch, "want a channel from Draining, got nil")
		select {
		case <-ch:
			t.Fatal("want Draining() open before any drain, got it closed")
		default:
		}
		d.Drain(t.Context())
		select {
		case <-ch:
		default:
			t.Fatal("want Draining() closed once Drain begins (streams finish early on it), got it open")
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
		require.Equal(t, http.StatusOK, rec.Code, "want 200 while accepting, got %d", rec.Code)

		d.Drain(t.Context())
		rec = httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/models", nil))
		resp := rec.Result() // what was sent: headers set after WriteHeader never reach the client
		defer resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "want 503 for a request arriving while draining, got %d", resp.StatusCode)
		require.Equal(t, "close", resp.Header.Get("Connection"), "want Connection: close sent with the 503 (set it before WriteHeader), got %q", resp.Header.Get("Connection"))
		require.Equal(t, 1, called, "want the handler run once (not for the refused request), got %d", called)
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
		require.Equal(t, 1, during, "want the request counted while its handler runs, got Active() %d", during)
		require.Equal(t, 0, d.Active(), "want it uncounted after the handler panicked, got Active() %d", d.Active())
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
		c := code(d.Readiness())
		require.Equal(t, http.StatusOK, c, "want /readyz 200 while accepting, got %d", c)
		c = code(d.Liveness())
		require.Equal(t, http.StatusOK, c, "want /healthz 200 while running, got %d", c)
		leave := enter(t, d)
		defer leave()
		res := drainAsync(t.Context(), d, time.Now())
		synctest.Wait() // draining, one request still in flight
		c = code(d.Readiness())
		require.Equal(t, http.StatusServiceUnavailable, c, "want /readyz 503 while draining (route traffic elsewhere), got %d", c)
		c = code(d.Liveness())
		require.Equal(t, http.StatusOK, c, "want /healthz 200 while draining (or the orchestrator kills the pod mid-drain), got %d", c)
		leave()
		awaitDrain(t, res, time.Minute)
		c = code(d.Liveness())
		require.Equal(t, http.StatusOK, c, "want /healthz 200 after the drain: the process still runs, got %d", c)
	})
}

func TestMarkUnreadyKeepsServing(t *testing.T) {
	d := newDrainer(t)
	d.MarkUnready()
	rec := httptest.NewRecorder()
	d.Readiness().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, "want /readyz 503 after MarkUnready, got %d", rec.Code)
	require.True(t, d.Accepting(), "want requests still accepted after MarkUnready (until the drain itself), got Accepting() false")
	enter(t, d)()
}
