package router_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestResolveMapsAPublicModelName(t *testing.T) {
	cfg := config()
	cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "alpha", Model: "big"}, {Provider: "beta"}},
		FallbackOn: []string{"context_length_exceeded"}}}
	g := newGateway(t, cfg, healthy("alpha"), healthy("beta"))
	for _, tc := range []struct {
		name, model string
		want        router.Request
	}{
		{"no model is any healthy provider", "", router.Request{}},
		{"auto is any healthy provider", router.AutoModel, router.Request{}},
		{"a route's name is its targets and fallback", "chat",
			router.Request{Route: &cfg.Routes[0]}},
		{"a provider's name pins it", "beta", router.Request{Provider: "beta"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req router.Request
			require.True(t, g.Resolve(tc.model, &req))
			assert.Equal(t, tc.want, req)
		})
	}
	var req router.Request
	assert.False(t, g.Resolve("gpt-5", &req), "a name that is none of these is no model here")
	assert.Equal(t, cfg.Routes, g.Routes())
	assert.Equal(t, []string{"alpha", "beta"}, g.Providers())
}

func TestNewRefusesABadRouteTable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		routes []router.Route
	}{
		{"no name", []router.Route{{Targets: []router.Target{{Provider: "alpha"}}}}},
		{"named auto", []router.Route{{Name: router.AutoModel, Targets: []router.Target{{Provider: "alpha"}}}}},
		{"named like a provider", []router.Route{{Name: "beta", Targets: []router.Target{{Provider: "alpha"}}}}},
		{"twice", []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "alpha"}}}, {Name: "chat", Targets: []router.Target{{Provider: "beta"}}}}},
		{"no targets", []router.Route{{Name: "chat"}}},
		{"an unknown provider", []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "gamma"}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config()
			cfg.Routes = tc.routes
			r, err := router.New(cfg, healthy("alpha"), healthy("beta"))
			assert.ErrorIs(t, err, router.ErrInvalidConfig)
			assert.Nil(t, r)
		})
	}
}

func TestEveryRouteTargetHasHealthFromTheStart(t *testing.T) {
	cfg := config()
	cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "up", Model: "big"}, {Provider: "up", Model: "small"}}}}
	g := newGateway(t, cfg, newUpstream("up"))
	assert.Equal(t, []router.Target{{Provider: "up", Model: "big"}, {Provider: "up", Model: "default"}, {Provider: "up", Model: "small"}}, g.Targets(),
		"each route target and the provider's default are watched before the first request, so their breakers show in metrics")
	_, known := g.TargetState(router.Target{Provider: "nope"})
	assert.False(t, known)
}

// deafStreamer streams, but does not promise to honour its context: the
// router must never let it write to the client from a goroutine the
// attempt may leave behind. It waits for gate, then streams its words.
type deafStreamer struct {
	gate    chan struct{}
	words   []string
	running atomic.Bool // true while Stream runs
}

func (*deafStreamer) Name() string { return "deaf" }
func (*deafStreamer) Generate(context.Context, llm.Request) (llm.Completion, error) {
	panic("the router asked a streaming provider for a whole answer")
}
func (d *deafStreamer) Stream(_ context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	d.running.Store(true)
	defer d.running.Store(false)
	<-d.gate
	for _, w := range d.words {
		if err := emit(chunk(w)); err != nil {
			return llm.Completion{}, err
		}
	}
	return llm.Completion{Model: "deaf-1"}, nil
}

func TestAProviderThatIgnoresItsContextStreamsThroughTheBridge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &deafStreamer{gate: make(chan struct{}), words: []string{"one", " two"}}
		g := newGateway(t, config(), d)
		time.AfterFunc(100*time.Millisecond, func() { close(d.gate) })
		var got []string
		resp, err := g.Stream(t.Context(), ask(nil), router.StreamLimits{FirstToken: time.Second, Idle: time.Second},
			func(c llm.Chunk) error {
				assert.False(t, d.running.Load(), "a chunk reaches the client only once the provider's call has returned")
				got = append(got, content(t, c))
				return nil
			})
		require.NoError(t, err)
		assert.Equal(t, []string{"one", " two"}, got, "every chunk, in order")
		assert.Equal(t, "deaf", resp.Provider)
	})
}

func TestASilentProviderThatIgnoresItsContextIsCutAtTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &deafStreamer{gate: make(chan struct{}), words: []string{"too", " late"}}
		cfg := config()
		cfg.Retry.MaxAttempts = 1
		g := newGateway(t, cfg, d)
		time.AfterFunc(time.Minute, func() { close(d.gate) }) // it answers in a minute; Close waits for it
		start := time.Now()
		emitted := 0
		_, err := g.Stream(t.Context(), ask(nil), router.StreamLimits{FirstToken: 2 * time.Second, Idle: time.Second},
			func(llm.Chunk) error { emitted++; return nil })
		require.ErrorIs(t, err, router.ErrFirstTokenTimeout)
		assert.Equal(t, 2*time.Second, time.Since(start), "the bridge lets the attempt go at its first-token limit")
		time.Sleep(time.Minute) // the abandoned call streams its words now
		synctest.Wait()
		assert.False(t, d.running.Load(), "the abandoned call has returned")
		assert.Zero(t, emitted, "and what it streamed never reached the client")
	})
}
