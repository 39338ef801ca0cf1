package router_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The first attempt runs under one context with the sooner of the two
// deadlines lab 03's Do would layer; these pin that it is the same
// contract: which deadline an attempt gets, what ends the request, and
// what the error and the attempt count say.

var errStuck = errors.New("stuck until the deadline")

// deadlines is a provider that waits for its context to end and keeps the
// deadline each call was given, relative to start.
type deadlines struct {
	fake
	mu    sync.Mutex
	start time.Time
	got   []time.Duration
}

func stuckRecording(name string, start time.Time) *deadlines {
	d := &deadlines{start: start}
	d.fake = fake{name: name, answer: func(ctx context.Context, _ int) (llm.Completion, error) {
		dl, ok := ctx.Deadline()
		d.mu.Lock()
		if ok {
			d.got = append(d.got, dl.Sub(d.start))
		} else {
			d.got = append(d.got, -1)
		}
		d.mu.Unlock()
		<-ctx.Done()
		return llm.Completion{}, fmt.Errorf("%w: %w", errStuck, ctx.Err())
	}}
	return d
}

// HonoursContext: it returns when its context ends, so the router calls it
// directly and its own error reaches the caller.
func (d *deadlines) HonoursContext() bool { return true }

func (d *deadlines) seen() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]time.Duration(nil), d.got...)
}

func TestEachAttemptGetsTheSoonerOfItsTimeoutAndTheTotal(t *testing.T) {
	for _, c := range []struct {
		name                   string
		attempt, total, caller time.Duration // caller 0: no deadline of its own
		want                   []time.Duration
		took                   time.Duration
	}{
		{"attempt sooner: every attempt its own, the last cut by the total", 2 * time.Second, 5 * time.Second, 0,
			[]time.Duration{2 * time.Second, 4 * time.Second, 5 * time.Second}, 5 * time.Second},
		{"total sooner than the first attempt's", 3 * time.Second, 2 * time.Second, 0,
			[]time.Duration{2 * time.Second}, 2 * time.Second},
		{"the caller's deadline sooner than both", 3 * time.Second, 5 * time.Second, time.Second,
			[]time.Duration{time.Second}, time.Second},
		{"attempt equal to the total", 4 * time.Second, 4 * time.Second, 0,
			[]time.Duration{4 * time.Second}, 4 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := small(nil)
				cfg.Retry.MaxAttempts, cfg.Retry.AttemptTimeout, cfg.Retry.TotalTimeout = 5, c.attempt, c.total
				cfg.Retry.BaseBackoff, cfg.Retry.MaxBackoff = 0, 0
				start := time.Now()
				p := stuckRecording("alpha", start)
				g := newRouter(t, cfg, p)
				defer closeGateway(t, g)
				ctx := t.Context()
				if c.caller > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, c.caller)
					defer cancel()
				}
				resp, err := g.Generate(ctx, request("acme"))
				assert.Equal(t, c.want, p.seen(), "the deadline each attempt was given")
				assert.Equal(t, c.took, time.Since(start))
				assert.ErrorIs(t, err, context.DeadlineExceeded)
				assert.ErrorIs(t, err, errStuck, "the last attempt's own error is kept")
				assert.Equal(t, len(c.want), resp.Attempts)
			})
		})
	}
}

func TestCallerLeavingDuringTheFirstAttemptEndsTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		p := stuckRecording("alpha", start)
		g := newRouter(t, small(nil), p)
		defer closeGateway(t, g)
		ctx, cancel := context.WithCancel(t.Context())
		defer time.AfterFunc(100*time.Millisecond, cancel).Stop()
		resp, err := g.Generate(ctx, request("acme"))
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 100*time.Millisecond, time.Since(start))
		assert.Equal(t, 1, resp.Attempts)
		assert.Equal(t, int32(1), p.calls.Load(), "no attempt after the caller left")
	})
}

func TestCallerAlreadyGoneCallsNobody(t *testing.T) {
	for _, cause := range []string{"cancelled", "deadline passed"} {
		t.Run(cause, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				alpha := healthy("alpha")
				g := newRouter(t, small(nil), alpha)
				defer closeGateway(t, g)
				ctx, cancel := context.WithCancel(t.Context())
				want := context.Canceled
				if cause == "deadline passed" {
					ctx, cancel = context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
					want = context.DeadlineExceeded
				}
				cancel()
				_, err := g.Generate(ctx, request("acme"))
				assert.ErrorIs(t, err, want)
				assert.Equal(t, int32(0), alpha.calls.Load())
			})
		})
	}
}

func TestAFailedFirstAttemptBacksOffAndRetriesUnderTheSameTotal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.MaxAttempts, cfg.Retry.AttemptTimeout, cfg.Retry.TotalTimeout = 3, 2*time.Second, 10*time.Second
		cfg.Retry.BaseBackoff, cfg.Retry.MaxBackoff = time.Second, time.Second
		cfg.Rand = rand.New(topOfRange{}) // every backoff is exactly its ceiling, 1 s
		var deadlinesSeen []time.Duration
		start := time.Now()
		alpha := &fake{name: "alpha", answer: func(ctx context.Context, call int) (llm.Completion, error) {
			dl, _ := ctx.Deadline()
			deadlinesSeen = append(deadlinesSeen, dl.Sub(start))
			if call == 1 {
				time.Sleep(500 * time.Millisecond)
				return llm.Completion{}, errUpstream
			}
			return answer("alpha-model", "second time lucky"), nil
		}}
		g := newRouter(t, cfg, alpha)
		defer closeGateway(t, g)
		resp, err := g.Generate(t.Context(), request("acme"))
		require.NoError(t, err)
		assert.Equal(t, 2, resp.Attempts)
		assert.Equal(t, "second time lucky", text(t, resp))
		assert.Equal(t, []time.Duration{2 * time.Second, 1500*time.Millisecond + 2*time.Second}, deadlinesSeen,
			"attempt 1 at 0 s, a 1 s backoff after it failed at 0.5 s, attempt 2 at 1.5 s with its own 2 s")
		assert.Equal(t, time.Second, resp.Backoff)
	})
}
