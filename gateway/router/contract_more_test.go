package router_test

// A third round of outsiders' bug banks (issue 34): a second Close with
// nothing in the bridge, a fallback after every target refused, a
// continuation whose only candidate was tried already.

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// direct answers after 3 s, honouring its context: it is called on the
// request's goroutine, with no bridge permit for Close to wait on.
type direct struct{}

func (direct) Name() string         { return "direct" }
func (direct) HonoursContext() bool { return true }
func (direct) Generate(ctx context.Context, _ llm.Request) (llm.Completion, error) {
	select {
	case <-time.After(3 * time.Second):
		return answer("", "done"), nil
	case <-ctx.Done():
		return llm.Completion{}, ctx.Err()
	}
}

// A second Close waits for the requests the first left in flight — those
// of a provider that honours its context too, which hold no bridge permit.
func TestASecondCloseWaitsForADirectProvidersRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := small(nil)
		cfg.Retry.AttemptTimeout = 10 * time.Second
		g := newRouter(t, cfg, direct{})
		start := time.Now()
		done := make(chan error, 1)
		go func() { _, err := g.Generate(t.Context(), request("a")); done <- err }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		require.Error(t, g.Close(ctx), "the first Close gives up after 1 s")
		assert.NoError(t, g.Close(t.Context()), "the second waits for the request in flight")
		assert.Equal(t, 3*time.Second, time.Since(start), "and returns only once it ended")
		assert.Zero(t, g.InFlight())
		assert.NoError(t, <-done)
	})
}

// A route falls back on a refusal only to a target it has not tried: once
// every target refused, the refusal is the caller's answer — the first
// target is not asked again.
func TestAFallbackRefusedEverywhereEndsWithoutGoingBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("small", status(http.StatusRequestEntityTooLarge, "", 0))
		up.script("large", status(http.StatusRequestEntityTooLarge, "", 0))
		g := newGateway(t, config(), up)
		req := ask(route("small", "large"))
		req.Route.FallbackOn = []string{"413"}
		resp, err := g.Generate(t.Context(), req)
		var ue *chatapi.UpstreamError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, http.StatusRequestEntityTooLarge, ue.Status)
		assert.Equal(t, []string{"small@0s", "large@0s"}, up.history(), "each target asked once")
		assert.Equal(t, 2, resp.Attempts)
	})
}

// downFirst fails its first call before any byte (a 503), then streams as s.
type downFirst struct {
	*scripted
	calls atomic.Int32
}

func (d *downFirst) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	if d.calls.Add(1) == 1 {
		return llm.Completion{}, chatapi.NewUpstreamError(d.name, http.StatusServiceUnavailable, []byte(`{"error":{"message":"down"}}`), 0)
	}
	return d.scripted.Stream(ctx, req, emit)
}

// A broken stream is not continued on a target this request has tried
// already, even one the route declares continues a prefill.
func TestABrokenStreamIsNotContinuedOnATargetThatFailedItBefore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := &downFirst{scripted: &scripted{name: "first", cont: []string{" world"}, finish: true}}
		second := &scripted{name: "second", words: []string{"Hello"}, failAfter: errors.New("connection reset by peer")}
		cfg := config()
		both := []router.Target{{Provider: "first"}, {Provider: "second"}}
		cfg.Routes = []router.Route{{Name: "chat", Targets: both, Continue: both}}
		g := newGateway(t, cfg, first, second)
		c, _, err := stream(t, g)
		require.ErrorIs(t, err, router.ErrAfterFirstByte, "the only target that continues failed this request already")
		assert.Equal(t, "Hello", c.text)
		assert.EqualValues(t, 1, first.calls.Load(), "first was not asked again")
	})
}
