package router_test

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// probed is an upstream that can be probed; its probes fail while down.
type probed struct {
	*upstream
	down   *atomic.Bool
	mu     sync.Mutex
	probes []time.Duration // when each probe came, since start
}

func (p *probed) Probe(ctx context.Context, _ string) error {
	p.mu.Lock()
	p.probes = append(p.probes, time.Since(p.start))
	p.mu.Unlock()
	if p.down.Load() {
		_, err := status(http.StatusServiceUnavailable, "", 0)(ctx)
		return err
	}
	return nil
}

func (p *probed) probeTimes() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Duration(nil), p.probes...)
}

// probeRecorder records Observer.Probed.
type probeRecorder struct {
	router.NopObserver
	ok, failed atomic.Int32
}

func (r *probeRecorder) Probed(_ router.Target, err error) {
	if err == nil {
		r.ok.Add(1)
	} else {
		r.failed.Add(1)
	}
}

// outage builds a router whose "chat" route is primary then secondary on
// one probed upstream; primary is down until down is cleared.
func outage(t *testing.T, cfg router.Config) (*router.Router, *probed, *atomic.Bool) {
	up := &probed{upstream: newUpstream("up"), down: &atomic.Bool{}}
	up.down.Store(true)
	up.script("primary", func(ctx context.Context) (llm.Completion, error) {
		if up.down.Load() {
			return status(http.StatusServiceUnavailable, "", 0)(ctx)
		}
		return answer("primary", "ok"), nil
	})
	return newGateway(t, cfg, up), up, up.down
}

func TestARecoveredPrimaryGetsTrafficBackWithinSecondsWhateverTheRecoveryTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.RecoveryTimeout = time.Hour // the breaker alone would keep it out for the whole run
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = 250*time.Millisecond, 2*time.Second
		obs := &probeRecorder{}
		cfg.Observer = obs
		g, up, down := outage(t, cfg)
		defer time.AfterFunc(15*time.Second, func() { down.Store(false) }).Stop()
		// One request a second for 20 s; the primary fails for the first 15.
		var served []string
		for range 20 {
			resp, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err, "every request is answered, by the secondary during the outage")
			served = append(served, resp.Model)
			time.Sleep(time.Second)
		}
		back := -1
		for i, m := range served {
			if i >= 15 && m == "primary" {
				back = i
				break
			}
		}
		require.NotEqual(t, -1, back, "the primary never got traffic back: %v", served)
		assert.LessOrEqual(t, back, 15+3, "traffic is back within 3 s of the recovery: %v", served)
		for i := back; i < len(served); i++ {
			assert.Equal(t, "primary", served[i], "request %d: once back, the primary keeps its traffic", i)
		}
		assert.Equal(t, 2, up.count("primary")-(len(served)-back),
			"no user request was spent probing the primary: two opened its breaker, the rest went to the secondary")
		// The probes: at 1.25 s (250 ms after the breaker opened at 1 s),
		// then 500 ms, 1 s, 2 s, 2 s... apart, until the first after 15 s.
		want := []time.Duration{1250, 1750, 2750, 4750, 6750, 8750, 10750, 12750, 14750, 16750}
		for i := range want {
			want[i] *= time.Millisecond
		}
		assert.Equal(t, want, up.probeTimes())
		assert.Equal(t, int32(9), obs.failed.Load())
		assert.Equal(t, int32(1), obs.ok.Load())
		state, _ := g.TargetState(router.Target{Provider: "up", Model: "primary"})
		assert.Equal(t, breaker.Closed, state)
	})
}

func TestProbesAreOffByDefaultAndForAProviderThatCannotBeProbed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, up, _ := outage(t, config())
		for range 3 {
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(time.Minute)
		assert.Empty(t, up.probeTimes(), "ProbeInterval 0: no background probes")

		cfg := config()
		cfg.Health.ProbeInterval = time.Second
		plain := newUpstream("plain") // no Probe method
		plain.script("primary", status(http.StatusServiceUnavailable, "", 0))
		g2 := newGateway(t, cfg, plain)
		for range 3 {
			_, err := g2.Generate(t.Context(), ask([]router.Target{{Provider: "plain", Model: "primary"}, {Provider: "plain", Model: "b"}}))
			require.NoError(t, err)
		}
		synctest.Wait()
		state, _ := g2.TargetState(router.Target{Provider: "plain", Model: "primary"})
		assert.Equal(t, breaker.Open, state, "nothing probes it: the breaker waits out its recovery timeout")
	})
}

func TestCloseStopsTheProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := config()
		cfg.Health.ProbeInterval = time.Second
		g, err := router.New(cfg, &probed{upstream: func() *upstream {
			u := newUpstream("up")
			u.script("primary", status(http.StatusServiceUnavailable, "", 0))
			return u
		}(), down: func() *atomic.Bool { var b atomic.Bool; b.Store(true); return &b }()})
		require.NoError(t, err)
		for range 2 {
			_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
			require.NoError(t, err)
		}
		time.Sleep(5 * time.Second) // probing
		require.NoError(t, g.Close(t.Context()))
		// synctest.Test fails if a goroutine of the bubble outlives it: the
		// probe must have returned.
	})
}

func TestProbeSettingsAreChecked(t *testing.T) {
	for _, c := range []struct{ interval, max time.Duration }{{-time.Second, 0}, {0, -time.Second}, {2 * time.Second, time.Second}} {
		cfg := config()
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = c.interval, c.max
		_, err := router.New(cfg, newUpstream("up"))
		assert.ErrorIs(t, err, router.ErrInvalidConfig, "%v", c)
	}
}
