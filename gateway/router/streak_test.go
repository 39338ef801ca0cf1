package router_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// byPrompt answers at once unless the prompt says how to fail: "slow"
// waits until its attempt gives up, "broken" is a 500, "status=N" is N.
type byPrompt struct{}

func (byPrompt) Name() string         { return "up" }
func (byPrompt) HonoursContext() bool { return true }
func (byPrompt) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	switch text := req.Chat.Text(); {
	case strings.Contains(text, "slow"):
		<-ctx.Done()
		return llm.Completion{}, ctx.Err()
	case strings.Contains(text, "broken"):
		return llm.Completion{}, chatapi.NewUpstreamError("up", http.StatusInternalServerError, nil, 0)
	case strings.HasPrefix(text, "status="):
		code, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(text, "status=")))
		return llm.Completion{}, chatapi.NewUpstreamError("up", code, nil, 0)
	}
	return answer("", "ok"), nil
}

// twoTenants is a gateway with one target whose breaker opens after 3
// failures in a row, one attempt per request.
func twoTenants(t *testing.T, isolate bool) *router.Router {
	cfg := config()
	cfg.Retry.MaxAttempts, cfg.Health.FailureThreshold, cfg.Health.IsolateTenantFailures = 1, 3, isolate
	return newGateway(t, cfg, byPrompt{})
}

func send(g *router.Router, tenant, prompt string) error {
	_, err := g.Generate(context.Background(), router.Request{Tenant: tenant, Chat: chatapi.NewRequest(prompt, false)})
	return err
}

func TestWhatOneTenantCanProvokeAloneNeverOpensTheBreaker(t *testing.T) {
	for _, prompt := range []string{"slow", "status=403", "status=408", "status=429"} {
		t.Run(prompt, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := twoTenants(t, true)
				for i := range 10 {
					require.Error(t, send(g, "acme", prompt), "request %d", i)
				}
				assert.Equal(t, "closed", state(g, "up"),
					"ten failures a tenant's own requests can provoke (a long answer, a filtered prompt, a request over the upstream's limits), all acme's: no sign the target is down")
				assert.NoError(t, send(g, "bob", "hi"), "and bob is served")
			})
		})
	}
}

func TestOnceTwoTenantsHaveHadThemProvokedFailuresCount(t *testing.T) {
	for _, tc := range []struct {
		order []string
		want  string
	}{
		{[]string{"acme", "bob", "acme", "bob"}, "open"},          // acme's first does not count; the next three do
		{[]string{"acme", "acme", "bob", "acme"}, "closed"},       // bob's and the last acme's count: two of three
		{[]string{"acme", "acme", "bob", "acme", "acme"}, "open"}, // and then every one of acme's too
		{[]string{"acme", "acme", "acme", "bob"}, "closed"},       // only bob's counts: one of three
	} {
		t.Run(strings.Join(tc.order, ","), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := twoTenants(t, true)
				for _, tenant := range tc.order {
					require.Error(t, send(g, tenant, "slow"))
				}
				assert.Equal(t, tc.want, state(g, "up"))
			})
		})
	}
}

func TestAnotherTenantsServerErrorDoesNotMakeOneTenantsTimeoutsCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := twoTenants(t, true)
		require.Error(t, send(g, "bob", "broken"))
		for range 5 {
			require.Error(t, send(g, "acme", "slow"))
		}
		assert.Equal(t, "closed", state(g, "up"), "bob's 500 counts, acme's timeouts never do: one stray failure of another tenant is no licence")
		require.Error(t, send(g, "bob", "broken"))
		require.Error(t, send(g, "bob", "broken"))
		assert.Equal(t, "open", state(g, "up"), "three 500s: the target's failures, whoever asked")
	})
}

func TestOneTenantCannotKeepTheBreakerOpenByFailingTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := twoTenants(t, true)
		for range 3 {
			require.Error(t, send(g, "bob", "broken"))
		}
		require.Equal(t, "open", state(g, "up"))
		time.Sleep(config().Health.RecoveryTimeout)
		require.Error(t, send(g, "acme", "slow"), "acme's request is the probe, and times out")
		assert.Equal(t, "half-open", state(g, "up"), "acme's timeout says nothing of the target: the next request probes again")
		require.NoError(t, send(g, "bob", "hi"))
		assert.Equal(t, "closed", state(g, "up"))
	})
}

func TestOneTenantsOtherFailuresStillOpenTheBreaker(t *testing.T) {
	for _, prompt := range []string{"broken", "status=502", "status=401"} {
		t.Run(prompt, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := twoTenants(t, true)
				for range 3 {
					require.Error(t, send(g, "acme", prompt))
				}
				assert.Equal(t, "open", state(g, "up"), "a 5xx, or the gateway's own key refused, is the target's failure whoever asked")
			})
		})
	}
}

func TestASuccessStartsTheRunAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := twoTenants(t, true)
		require.Error(t, send(g, "bob", "slow"))
		require.NoError(t, send(g, "bob", "hi"))
		for range 5 {
			require.Error(t, send(g, "acme", "slow"))
		}
		assert.Equal(t, "closed", state(g, "up"), "bob's timeout belongs to a run a success ended: the new run is acme's alone")
	})
}

func TestARunCountsAgainAfterTheBreakerRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := twoTenants(t, true)
		for _, tenant := range []string{"acme", "bob", "acme", "bob"} {
			require.Error(t, send(g, tenant, "slow"))
		}
		require.Equal(t, "open", state(g, "up"))
		time.Sleep(config().Health.RecoveryTimeout)
		require.NoError(t, send(g, "bob", "hi"), "the probe succeeds: closed again")
		for range 5 {
			require.Error(t, send(g, "acme", "slow"))
		}
		assert.Equal(t, "closed", state(g, "up"), "the run before the breaker opened is forgotten: this one is acme's alone")
	})
}

func TestWithoutTheOptionOneTenantsTimeoutsOpenTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := twoTenants(t, false)
		for range 3 {
			require.Error(t, send(g, "acme", "slow"))
		}
		assert.Equal(t, "open", state(g, "up"), "the default: a timeout is a failure whoever asked (one tenant, or tenants that cannot be told apart)")
	})
}
