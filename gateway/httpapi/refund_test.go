package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/gateway/tenant"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refunding is a rate limiter that allows (unless refuse) and records what
// it took and gave back, and whether each refund's context was live.
type refunding struct {
	mu       sync.Mutex
	refuse   bool
	taken    []string
	refunded []string
	live     []bool
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

// oneSlot is a server with one slot, which tenant "a" holds with a request
// of 10 s (started here) until the test ends; its queue wait is wait and
// each tenant's cap perTenant (0: none).
func oneSlot(t *testing.T, lim *refunding, wait time.Duration, perTenant int) *rig {
	t.Helper()
	cfg := baseConfig()
	cfg.Slots.MaxConcurrent, cfg.Slots.MaxQueueWait = 1, wait
	cfg.Retry.AttemptTimeout, cfg.Retry.TotalTimeout = 20*time.Second, 30*time.Second // a's request outlives the test's
	r := newRigWith(t, cfg, func(o *Options) {
		g, err := tenant.NewGate(tenant.GateConfig{Limiter: lim, MaxInFlight: perTenant, Observer: o.Metrics})
		require.NoError(t, err)
		o.Gate = g
	}, simProvider(t, sim.Config{Name: "slow", Latency: 10 * time.Second}))
	done := make(chan int, 1)
	go func() { done <- r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "a").Code }()
	synctest.Wait()
	t.Cleanup(func() { assert.Equal(t, http.StatusOK, <-done, "a's request was served") })
	return r
}

func TestARequestRefusedForWantOfASlotGetsItsRateTokenBack(t *testing.T) {
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		t.Run("queue wait "+wait.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := &refunding{}
				r := oneSlot(t, lim, wait, 0)
				rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "b")
				require.Equal(t, http.StatusServiceUnavailable, rec.Code)
				assert.Equal(t, "overloaded", decodeError(t, rec).code())
				assert.Equal(t, []string{"tenant:a", "tenant:b"}, lim.taken, "one token each, taken once")
				assert.Equal(t, []string{"tenant:b"}, lim.refunds(), "b did no work, and was refused for what a did: its token goes back, once")
				assert.Equal(t, []bool{true}, lim.live, "the refund is not cut short by the request's end")
			})
		})
	}
}

func TestARefusalTheTenantCausedKeepsItsToken(t *testing.T) {
	t.Run("its own in-flight cap", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := &refunding{}
			r := oneSlot(t, lim, 0, 1)
			rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "a")
			require.Equal(t, "too_many_concurrent_requests", decodeError(t, rec).code())
			assert.Empty(t, lim.refunds(), "a tenant at its cap that keeps asking is still held to its rate")
		})
	})
	t.Run("its rate", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := &refunding{}
			r := oneSlot(t, lim, 0, 0)
			lim.mu.Lock()
			lim.refuse = true
			lim.mu.Unlock()
			rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "b")
			require.Equal(t, "rate_limited", decodeError(t, rec).code())
			assert.Empty(t, lim.refunds(), "nothing was taken")
		})
	})
	for _, cause := range []string{"cancel", "deadline"} {
		t.Run("a caller who left the queue: "+cause, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				lim := &refunding{}
				r := oneSlot(t, lim, 2*time.Second, 0)
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				defer cancel()
				if cause == "cancel" {
					time.AfterFunc(500*time.Millisecond, cancel)
				}
				req := httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody))
				req.Header.Set("X-Tenant-ID", "b")
				rec := httptest.NewRecorder()
				r.srv.ServeHTTP(rec, req)
				assert.Empty(t, lim.refunds(), "the caller gave up; the replica did not refuse it")
			})
		})
	}
	t.Run("a success", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			lim := &refunding{}
			r := newRigWith(t, baseConfig(), func(o *Options) {
				g, err := tenant.NewGate(tenant.GateConfig{Limiter: lim})
				require.NoError(t, err)
				o.Gate = g
			}, simProvider(t, sim.Config{Name: "alpha"}))
			require.Equal(t, http.StatusOK, r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`).Code)
			assert.Empty(t, lim.refunds(), "a request that was served keeps its token")
		})
	})
}
