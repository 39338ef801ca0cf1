package router_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ledger is a RetryBudget that allows a fixed number of withdrawals and
// records every call, in order.
type ledger struct {
	mu    sync.Mutex
	left  int
	calls []string
}

func (l *ledger) Deposit(p string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "deposit "+p)
}

func (l *ledger) Withdraw(p string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.left == 0 {
		l.calls = append(l.calls, "refused "+p)
		return false
	}
	l.left--
	l.calls = append(l.calls, "withdraw "+p)
	return true
}

func (l *ledger) history() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.calls...)
}

// refusals is an Observer that counts the retries a budget refused.
type refusals struct {
	router.NopObserver
	mu sync.Mutex
	by map[string]int
}

func (r *refusals) RetryRefused(p string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.by[p]++
}

func TestRetryBudgetDepositsOncePerRequestAndWithdrawsPerRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary, fallback := newUpstream("primary"), newUpstream("fallback")
		primary.script("default", status(http.StatusServiceUnavailable, "", 0))
		budget := &ledger{left: 10}
		cfg := config()
		cfg.RetryBudget = budget
		g := newGateway(t, cfg, primary, fallback)
		resp, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)})
		require.NoError(t, err)
		assert.Equal(t, "fallback", resp.Provider)
		assert.Equal(t, []string{"deposit primary", "withdraw fallback"}, budget.history(),
			"the request deposits to its first target; the fail-over withdraws from the target it goes to")

		resp, err = g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false), Provider: "fallback"})
		require.NoError(t, err)
		assert.Equal(t, 1, resp.Attempts)
		assert.Equal(t, []string{"deposit primary", "withdraw fallback", "deposit fallback"}, budget.history(),
			"a pinned request deposits too, and a success withdraws nothing")
	})
}

func TestRetryBudgetIsNotAskedForAnAttemptThatWillNotHappen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("default", status(http.StatusServiceUnavailable, "", 0))
		budget := &ledger{left: 10}
		cfg := config()
		cfg.RetryBudget = budget
		cfg.Health.FailureThreshold = 100
		g := newGateway(t, cfg, up)
		resp, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)})
		require.Error(t, err)
		assert.Equal(t, 3, resp.Attempts)
		assert.Equal(t, []string{"deposit up", "withdraw up", "withdraw up"}, budget.history(),
			"MaxAttempts 3: two retries withdraw; the last failure has nothing after it to pay for")

		_, err = g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false), Provider: "up"})
		require.Error(t, err)
		_, err = g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false), Route: &router.Route{Targets: []router.Target{{Provider: "nope"}}}})
		require.ErrorIs(t, err, router.ErrUnknownProvider, "a request refused before any attempt deposits nothing")
		assert.Equal(t, []string{"deposit up", "withdraw up", "withdraw up", "deposit up"}, budget.history(),
			"a pinned request gets one attempt: it deposits and never withdraws")
	})
}

func TestExhaustedRetryBudgetEndsTheRequestWithTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("default", status(http.StatusServiceUnavailable, "overloaded", 0))
		budget := &ledger{left: 0}
		obs := &refusals{by: map[string]int{}}
		cfg := config()
		cfg.RetryBudget, cfg.Observer = budget, obs
		cfg.Health.FailureThreshold = 100 // the breaker stays out of it
		g := newGateway(t, cfg, up)
		start := time.Now()
		resp, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)})
		require.ErrorIs(t, err, router.ErrRetryBudgetExhausted)
		var sc llm.StatusCoder
		require.ErrorAs(t, err, &sc, "the caller hears what the upstream said")
		assert.Equal(t, http.StatusServiceUnavailable, sc.StatusCode())
		assert.Zero(t, time.Since(start), "a refused retry is not waited for: no backoff")
		assert.Equal(t, 1, up.count("default"), "one upstream call: the retry was refused")
		assert.Equal(t, 1, resp.Attempts, "the refused retry never started")
		assert.Equal(t, []string{"deposit up", "refused up"}, budget.history())
		assert.Equal(t, map[string]int{"up": 1}, obs.by, "the Observer counts the refusal, by provider")
	})
}

func TestRefusedRetryLeavesTheBreakerAsItWas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		failing := true
		up.script("default", func(context.Context) (llm.Completion, error) {
			if failing {
				return status(http.StatusServiceUnavailable, "", 0)(t.Context())
			}
			return answer("", "ok"), nil
		})
		budget := &ledger{left: 0}
		cfg := config()
		cfg.RetryBudget = budget
		cfg.Health.FailureThreshold = 3
		g := newGateway(t, cfg, up)
		for i := range 2 { // two requests, each one real failure and one refused retry
			_, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)})
			require.ErrorIs(t, err, router.ErrRetryBudgetExhausted)
			require.Equal(t, "closed", state(g, "up"), "after request %d: %d failures of 3", i+1, i+1)
		}
		_, err := g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)})
		require.ErrorIs(t, err, router.ErrNoHealthyProvider, "the third failure opened the breaker: no retry to refuse")
		assert.Equal(t, 3, up.count("default"))
		assert.Equal(t, []string{"deposit up", "refused up", "deposit up", "refused up", "deposit up"}, budget.history())
		assert.Equal(t, "open", state(g, "up"),
			"three real failures in a row open the breaker: a refused retry in between is no success")

		time.Sleep(cfg.Health.RecoveryTimeout)
		failing = false
		budget.mu.Lock()
		budget.left = 0
		budget.mu.Unlock()
		_, err = g.Generate(t.Context(), router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)})
		require.NoError(t, err, "the half-open probe is the request's first attempt: the budget does not gate it")
		assert.Equal(t, "closed", state(g, "up"))
	})
}

func TestRetryBudgetIsNotAskedWhenTheLoopWillNotRetry(t *testing.T) {
	cases := []struct {
		name  string
		setup func(up *upstream, cfg *router.Config)
		ctx   func(parent context.Context) (context.Context, context.CancelFunc)
		want  error
	}{
		{"a refusal that is the caller's fault (400)", func(up *upstream, _ *router.Config) {
			up.script("default", status(http.StatusBadRequest, "invalid_request", 0))
		}, context.WithCancel, nil},
		{"the total deadline already past", func(up *upstream, cfg *router.Config) {
			cfg.Retry.TotalTimeout = time.Second
			up.script("default", func(ctx context.Context) (llm.Completion, error) {
				<-ctx.Done()
				return llm.Completion{}, ctx.Err()
			})
		}, context.WithCancel, context.DeadlineExceeded},
		{"the caller's own deadline already past", func(up *upstream, _ *router.Config) {
			up.script("default", func(ctx context.Context) (llm.Completion, error) {
				<-ctx.Done()
				return llm.Completion{}, ctx.Err()
			})
		}, func(parent context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(parent, time.Second)
		}, context.DeadlineExceeded},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				up := newUpstream("up")
				budget := &ledger{left: 10}
				cfg := config()
				cfg.RetryBudget, cfg.Health.FailureThreshold = budget, 100
				tc.setup(up, &cfg)
				g := newGateway(t, cfg, up)
				ctx, cancel := tc.ctx(t.Context())
				_, err := g.Generate(ctx, router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)})
				cancel()
				require.Error(t, err, tc.name)
				if tc.want != nil {
					require.ErrorIs(t, err, tc.want, tc.name)
				}
				assert.Equal(t, []string{"deposit up"}, budget.history(), "%s: no retry will follow, so none is paid for", tc.name)
			})
		})
	}
}

func TestRetryBudgetIsNotAskedWhenTheCallerLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		ctx, cancel := context.WithCancel(t.Context())
		up.script("default", func(context.Context) (llm.Completion, error) {
			cancel() // the caller leaves while the attempt fails
			return status(http.StatusServiceUnavailable, "", 0)(ctx)
		})
		budget := &ledger{left: 10}
		cfg := config()
		cfg.RetryBudget, cfg.Health.FailureThreshold = budget, 100
		g := newGateway(t, cfg, up)
		_, err := g.Generate(ctx, router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)})
		require.Error(t, err)
		assert.Equal(t, []string{"deposit up"}, budget.history())
	})
}
