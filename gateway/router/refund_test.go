package router_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refunding is a shared limiter that records what it takes and gives back.
type refunding struct {
	mu       sync.Mutex
	refuse   bool
	taken    []string
	refunded []string
	live     []bool // whether each Refund's context was still live
}

func (l *refunding) Allow(_ context.Context, key string) (admission.Decision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse {
		return admission.Decision{RetryAfter: time.Second}, nil
	}
	l.taken = append(l.taken, key)
	return admission.Decision{Allowed: true}, nil
}

func (l *refunding) Refund(ctx context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refunded = append(l.refunded, key)
	l.live = append(l.live, ctx.Err() == nil)
	return nil
}

func (l *refunding) refunds() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.refunded...)
}

// oneSlot is a gateway with one slot, held by tenant "a" until release is
// closed; its queue wait is wait.
func oneSlot(t *testing.T, lim *refunding, wait time.Duration, perTenant int) (g *router.Router, release func()) {
	t.Helper()
	cfg := small(nil)
	cfg.Limiter, cfg.MaxConcurrent, cfg.MaxQueueWait, cfg.MaxPerTenant = lim, 1, wait, perTenant
	gate := make(chan struct{})
	g = newRouter(t, cfg, &fake{name: "slow", answer: func(context.Context, int) (llm.Completion, error) {
		<-gate
		return answer("", "ok"), nil
	}})
	done := make(chan error, 1)
	go func() { _, err := g.Generate(t.Context(), request("a")); done <- err }()
	synctest.Wait()
	return g, func() {
		close(gate)
		assert.NoError(t, <-done)
		closeGateway(t, g)
	}
}

func TestARequestRefusedForWantOfASlotGetsItsRateTokenBack(t *testing.T) {
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		t.Run("queue wait "+wait.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := &refunding{}
				g, release := oneSlot(t, lim, wait, 0)
				defer release()
				_, err := g.Generate(t.Context(), request("b"))
				require.ErrorIs(t, err, router.ErrOverloaded)
				assert.Equal(t, []string{"b"}, lim.refunds(), "b did no work, and was refused for what a did: its token goes back, once")
				assert.Equal(t, []bool{true}, lim.live, "the refund is not cut short by the request's end")
			})
		})
	}
}

func TestATokenTheHTTPLayerTookIsRefundedToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := &refunding{}
		g, release := oneSlot(t, lim, 0, 0)
		defer release()
		require.NoError(t, g.Allow(t.Context(), "b"))
		req := request("b")
		req.RateChecked = true
		_, err := g.Generate(t.Context(), req)
		require.ErrorIs(t, err, router.ErrOverloaded)
		assert.Equal(t, []string{"a", "b"}, lim.taken, "one token each: Generate did not ask again")
		assert.Equal(t, []string{"b"}, lim.refunds())
	})
}

func TestARefusalTheTenantCausedKeepsItsToken(t *testing.T) {
	t.Run("its own in-flight cap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := &refunding{}
			g, release := oneSlot(t, lim, 0, 1)
			defer release()
			_, err := g.Generate(t.Context(), request("a"))
			require.ErrorIs(t, err, router.ErrTenantBusy)
			assert.Empty(t, lim.refunds(), "a tenant at its cap that keeps asking is still held to its rate")
		})
	})
	t.Run("its rate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := &refunding{}
			g, release := oneSlot(t, lim, 0, 0)
			defer release()
			lim.mu.Lock()
			lim.refuse = true
			lim.mu.Unlock()
			_, err := g.Generate(t.Context(), request("b"))
			require.ErrorIs(t, err, router.ErrRateLimited)
			assert.Empty(t, lim.refunds(), "nothing was taken")
		})
	})
	for _, cause := range []string{"cancel", "deadline"} {
		t.Run("a caller who left the queue: "+cause, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := &refunding{}
				g, release := oneSlot(t, lim, 2*time.Second, 0)
				defer release()
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				if cause == "cancel" {
					time.AfterFunc(500*time.Millisecond, cancel)
				}
				_, err := g.Generate(ctx, request("b"))
				require.Error(t, err)
				assert.NotErrorIs(t, err, router.ErrOverloaded)
				assert.Empty(t, lim.refunds(), "the caller gave up; the replica did not refuse it")
			})
		})
	}
}

func TestASuccessIsNeverRefunded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := &refunding{}
		cfg := small(nil)
		cfg.Limiter = lim
		g := newRouter(t, cfg, healthy("alpha"))
		defer closeGateway(t, g)
		_, err := g.Generate(t.Context(), request("a"))
		require.NoError(t, err)
		assert.Empty(t, lim.refunds())
	})
}
