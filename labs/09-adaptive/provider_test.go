package adaptive

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// provider simulates a model provider with a real capacity: up to capacity
// calls run at its base latency; past it, calls queue inside the provider
// and latency grows in proportion (n calls take base·n/capacity each).
type provider struct {
	mu       sync.Mutex
	capacity int
	base     time.Duration
	inFlight int
}

func (p *provider) setCapacity(c int) {
	p.mu.Lock()
	p.capacity = c
	p.mu.Unlock()
}

// call takes as long as the provider's load says, or returns
// context.DeadlineExceeded at the attempt timeout if that is sooner.
func (p *provider) call(timeout time.Duration) error {
	p.mu.Lock()
	p.inFlight++
	latency := p.base
	if p.inFlight > p.capacity {
		latency = p.base * time.Duration(p.inFlight) / time.Duration(p.capacity)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
	}()
	if timeout > 0 && latency > timeout {
		time.Sleep(timeout)
		return fmt.Errorf("attempt timed out: %w", context.DeadlineExceeded)
	}
	time.Sleep(latency)
	return nil
}

// load runs clients closed-loop callers (far more than the provider's
// capacity) through l for d of fake time, and returns the limit read every
// 100 ms.
func load(t *testing.T, l *Limiter, p *provider, clients int, d, timeout time.Duration) []int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for ctx.Err() == nil { // not only Acquire's word: a wrong Acquire must not loop for ever
				tok, err := l.Acquire(ctx)
				if err != nil || tok == nil {
					return
				}
				tok.Done(OutcomeOf(p.call(timeout)))
			}
		})
	}
	// One sample every 100 ms, the last at d itself: a count that does not
	// depend on whether the last tick or ctx's end is seen first.
	var trace []int
	for range int(d / (100 * time.Millisecond)) {
		time.Sleep(100 * time.Millisecond)
		trace = append(trace, l.Limit())
	}
	wg.Wait()
	return trace
}

// mean is the average limit over trace[from:to] (indices in 100 ms ticks).
func mean(trace []int, from, to int) float64 {
	if to > len(trace) || from >= to {
		return 0
	}
	sum := 0
	for _, v := range trace[from:to] {
		sum += v
	}
	return float64(sum) / float64(to-from)
}

const (
	capacity = 20
	base     = 100 * time.Millisecond
	clients  = 3 * capacity
	// An attempt timeout a little above the provider's normal latency: AIMD
	// learns of overload only from drops.
	attemptTimeout = 120 * time.Millisecond
)

func converges(t *testing.T, newLimiter func(t *testing.T, initial int) *Limiter, timeout time.Duration) {
	for _, tc := range []struct {
		name    string
		initial int
	}{{"from below", 1}, {"from above", 5 * capacity}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, tc.initial)
				p := &provider{capacity: capacity, base: base}
				trace := load(t, l, p, clients, 20*time.Second, timeout)
				got := mean(trace, 100, 200) // the last 10 s
				t.Logf("limit from %d: mean %.1f over the last 10 s", tc.initial, got)
				assert.InDelta(t, 1.2*capacity, got, 0.4*capacity,
					"starting at %d, the limit should settle near the provider's capacity (%d) — within [%.0f, %.0f] — over the last 10 s; it averaged %.1f (trace every 100 ms: %v)",
					tc.initial, capacity, 0.8*capacity, 1.6*capacity, got, trace)
				assert.Zero(t, l.InFlight(), "every permit came back")
			})
		})
	}
}

func TestAIMDConvergesNearCapacity(t *testing.T) {
	converges(t, func(t *testing.T, initial int) *Limiter {
		return newAIMD(t, AIMDConfig{Min: 1, Max: 5 * capacity, Initial: initial})
	}, attemptTimeout)
}

func TestGradientConvergesNearCapacity(t *testing.T) {
	// No attempt timeout: the gradient sees queueing in the latency itself,
	// before anything fails.
	converges(t, func(t *testing.T, initial int) *Limiter {
		return newGradient(t, GradientConfig{Min: 1, Max: 5 * capacity, Initial: initial, Tolerance: 1})
	}, 0)
}

func TestLimitRecoversAfterABrownout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		newLimiter func(t *testing.T) *Limiter
		timeout    time.Duration
	}{
		{"AIMD", func(t *testing.T) *Limiter {
			return newAIMD(t, AIMDConfig{Min: 1, Max: 5 * capacity, Initial: capacity})
		}, attemptTimeout},
		{"Gradient", func(t *testing.T) *Limiter {
			return newGradient(t, GradientConfig{Min: 1, Max: 5 * capacity, Initial: capacity, Tolerance: 1})
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := tc.newLimiter(t)
				p := &provider{capacity: capacity, base: base}
				// 0–10 s healthy, 10–20 s a brown-out at a quarter of the
				// capacity, 20–30 s healthy again.
				go func() {
					time.Sleep(10 * time.Second)
					p.setCapacity(capacity / 4)
					time.Sleep(10 * time.Second)
					p.setCapacity(capacity)
				}()
				trace := load(t, l, p, clients, 30*time.Second, tc.timeout)
				require.Len(t, trace, 300)
				before, during, after := mean(trace, 50, 100), mean(trace, 150, 200), mean(trace, 250, 300)
				t.Logf("mean limit: %.1f before, %.1f during, %.1f after the brown-out", before, during, after)
				assert.Less(t, during, 0.6*capacity,
					"during the brown-out (capacity %d) the limit should fall well below the healthy %d; it averaged %.1f (before %.1f, after %.1f)", capacity/4, capacity, during, before, after)
				assert.InDelta(t, 1.2*capacity, after, 0.4*capacity,
					"5 s after the brown-out the limit should be back near capacity %d; it averaged %.1f (before %.1f, during %.1f)", capacity, after, before, during)
			})
		})
	}
}
