package router_test

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failsThen fails the first n calls with fail, then answers.
func failsThen(n int, fail func(context.Context) (llm.Completion, error)) func(context.Context) (llm.Completion, error) {
	calls := 0
	return func(ctx context.Context) (llm.Completion, error) {
		calls++
		if calls <= n {
			return fail(ctx)
		}
		return answer("primary", "primary ok"), nil
	}
}

func reset(context.Context) (llm.Completion, error) {
	return llm.Completion{}, &netError{syscall.ECONNRESET}
}

type netError struct{ err error }

func (e *netError) Error() string { return "read tcp: " + e.err.Error() }
func (e *netError) Unwrap() error { return e.err }

// retrying asks a route of primary then secondary, with the route's
// RetrySame and WaitRetryAfter as given, and returns the calls made.
func retrying(t *testing.T, same bool, wait time.Duration, primary func(context.Context) (llm.Completion, error), cfg router.Config) ([]string, error) {
	t.Helper()
	up := newUpstream("up")
	up.script("primary", primary)
	g := newGateway(t, cfg, up)
	req := ask(route("primary", "secondary"))
	req.Route.RetrySame, req.Route.WaitRetryAfter = same, wait
	_, err := g.Generate(t.Context(), req)
	return up.history(), err
}

func TestRetrySameTriesAFailedTargetOnceMoreBeforeTheNext(t *testing.T) {
	for _, c := range []struct {
		name string
		fail func(context.Context) (llm.Completion, error)
	}{{"500", status(http.StatusInternalServerError, "", 0)}, {"reset", reset}, {"502", status(http.StatusBadGateway, "", 0)}} {
		synctest.Test(t, func(t *testing.T) {
			cfg := config()
			cfg.Retry.BaseBackoff = 0 // no jitter to reason about: the retry comes at once
			calls, err := retrying(t, true, 0, failsThen(1, c.fail), cfg)
			require.NoError(t, err, c.name)
			assert.Equal(t, []string{"primary@0s", "primary@0s"}, calls, "%s: the same target, once more", c.name)

			calls, err = retrying(t, true, 0, failsThen(2, c.fail), cfg)
			require.NoError(t, err, c.name)
			assert.Equal(t, []string{"primary@0s", "primary@0s", "secondary@0s"}, calls, "%s: once, then the next target", c.name)

			calls, err = retrying(t, false, 0, failsThen(1, c.fail), cfg)
			require.NoError(t, err, c.name)
			assert.Equal(t, []string{"primary@0s", "secondary@0s"}, calls, "%s: without RetrySame, the next target at once", c.name)
		})
	}
}

func TestRetrySameLeavesTimeoutsRefusalsAndRateLimitsToTheNextTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Retry.AttemptTimeout = time.Second
		hang := func(ctx context.Context) (llm.Completion, error) { <-ctx.Done(); return llm.Completion{}, ctx.Err() }
		calls, err := retrying(t, true, 0, failsThen(1, hang), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "secondary@1s"}, calls, "a slow target is not waited on twice")

		calls, err = retrying(t, true, 0, failsThen(1, status(http.StatusTooManyRequests, "", 0)), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "secondary@0s"}, calls, "a 429 says slow down, not try again")

		_, err = retrying(t, true, 0, failsThen(1, status(http.StatusBadRequest, "", 0)), cfg)
		require.Error(t, err, "a 400 is the request's fault: neither retried nor passed on")
	})
}

func TestAShortRetryAfterIsWaitedOutOnTheSameTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		unavailable := status(http.StatusServiceUnavailable, "", time.Second)
		calls, err := retrying(t, false, 2*time.Second, failsThen(1, unavailable), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "primary@1s"}, calls, "Retry-After 1s ≤ 2s: waited, then the same target")

		calls, err = retrying(t, false, 2*time.Second, failsThen(1, status(http.StatusTooManyRequests, "", 2*time.Second)), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "primary@2s"}, calls, "exactly at the limit is still waited for")

		calls, err = retrying(t, false, 2*time.Second, failsThen(1, status(http.StatusServiceUnavailable, "", 3*time.Second)), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "secondary@0s"}, calls, "Retry-After 3s > 2s: the next target at once")

		calls, err = retrying(t, false, 2*time.Second, failsThen(2, unavailable), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "primary@1s", "secondary@1s"}, calls, "waited for once, then the next target")

		calls, err = retrying(t, true, 0, failsThen(1, unavailable), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "secondary@0s"}, calls, "WaitRetryAfter 0: a Retry-After is not waited for, RetrySame or not")
	})
}

func TestARetryAfterPastTheDeadlineIsNotWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Retry.TotalTimeout = 1500 * time.Millisecond
		calls, err := retrying(t, false, 2*time.Second, failsThen(1, status(http.StatusServiceUnavailable, "", 2*time.Second)), cfg)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "secondary@0s"}, calls, "waiting 2 s would pass the 1.5 s deadline")
		assert.False(t, errors.Is(err, context.DeadlineExceeded))
	})
}

func TestNegativeWaitRetryAfterIsRefused(t *testing.T) {
	cfg := config()
	cfg.Routes = []router.Route{{Name: "chat", Targets: route("a"), WaitRetryAfter: -time.Second}}
	_, err := router.New(cfg, newUpstream("up"))
	assert.ErrorIs(t, err, router.ErrInvalidConfig)
}
