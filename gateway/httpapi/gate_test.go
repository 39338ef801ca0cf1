package httpapi

// The tenant gate as the HTTP layer uses it: edges an outsider's bug bank
// found the first tests left open (issue 34) — whose cap a refusal names,
// who hears of it, what the connection and the rate token become.

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/production-go/gateway-lab/internal/testkit/promtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The gate's own cap (-max-per-tenant) is the server's limit, not the
// caller's: CallerLimited hears only of an identity's own cap.
func TestTheGatesCapIsNotCountedAsTheCallersOwnLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var limited []string
		r := newRigWith(t, baseConfig(), gated(1000, 1000, 1, func(o *Options) {
			o.CallerLimited = func(id tenant.Identity, l policy.Limit) { limited = append(limited, id.Key+":"+string(l)) }
		}), simProvider(t, sim.Config{Name: "alpha", Latency: time.Second}))
		done := make(chan int, 1)
		go func() { done <- r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "greedy").Code }()
		synctest.Wait()
		rec := r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "greedy")
		assert.Equal(t, "too_many_concurrent_requests", decodeError(t, rec).code())
		assert.Empty(t, limited, "the gate's cap, not the identity's: no caller limit was reached")
		assert.Equal(t, http.StatusOK, <-done)
	})
}

// The gate's Observer hears every refusal — one at the identity's own cap
// too — so gateway_admission_rejections_total{reason="tenant_busy"} counts it.
func TestARefusalAtTheCallersOwnCapIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, baseConfig(), gated(1000, 1000, 0, capped(1)), simProvider(t, sim.Config{Name: "alpha", Latency: time.Second}))
		done := make(chan int, 1)
		go func() { done <- r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "acme").Code }()
		synctest.Wait()
		rec := r.do(http.MethodPost, "/v1/generate", `{"prompt":"hi"}`, "X-Tenant-ID", "acme")
		assert.Equal(t, "too_many_concurrent_requests", decodeError(t, rec).code())
		assert.Equal(t, 1.0, promtest.Counter(t, r.reg, "gateway_admission_rejections_total", "reason", "tenant_busy"))
		assert.Equal(t, http.StatusOK, <-done)
	})
}

// A request refused at its in-flight cap has its body unread, like one
// over its rate: the connection is not kept for the rest of it.
func TestARequestRefusedAtItsCapClosesTheConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, baseConfig(), gated(1000, 1000, 1), simProvider(t, sim.Config{Name: "alpha", Latency: time.Second}))
		done := make(chan int, 1)
		go func() { done <- r.do(http.MethodPost, "/v1/chat/completions", chatBody, "X-Tenant-ID", "acme").Code }()
		synctest.Wait()
		b := &watchedBody{r: strings.NewReader(chatBody)}
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", b)
		req.Header.Set("X-Tenant-ID", "acme")
		rec := httptest.NewRecorder()
		r.srv.ServeHTTP(rec, req)
		assert.Equal(t, "too_many_concurrent_requests", decodeError(t, rec).code())
		assert.False(t, b.read.Load())
		assert.Equal(t, "close", rec.Header().Get("Connection"), "the unread body is not waited for on a kept connection")
		assert.Equal(t, http.StatusOK, <-done)
	})
}

// A body the caller got wrong (too large, unreadable) is the tenant's own
// doing: its rate token is kept, never refunded.
func TestABodyRefusedKeepsItsRateToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lim := &refunding{}
		r := newRigWith(t, baseConfig(), func(o *Options) {
			g, err := tenant.NewGate(tenant.GateConfig{Limiter: lim})
			require.NoError(t, err)
			o.Gate = g
			o.MaxBodyBytes = 1000
		}, simProvider(t, sim.Config{Name: "alpha"}))
		rec := r.do(http.MethodPost, "/v1/chat/completions", strings.Repeat(" ", 2000), "X-Tenant-ID", "acme")
		require.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
		assert.Equal(t, []string{"tenant:acme"}, lim.taken)
		assert.Empty(t, lim.refunds(), "the tenant sent too much: not a refusal for want of capacity")
	})
}

// A refusal at the caller's own cap names that cap.
func TestARefusalAtTheCallersOwnCapNamesIt(t *testing.T) {
	e := classify(&tenant.Refusal{Limit: policy.LimitInFlight, RetryAfter: time.Second, Max: 2, Own: true}, nil)
	assert.Contains(t, e.Message, "may have 2 requests in flight")
}
