package router_test

// Tests for behaviours a mutation run (gremlins' operators, applied one at
// a time to the router) showed no test held: each states a promise of the
// package's doc comments and fails with the mutant that broke it.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// letters streams one-letter chunks (more chunks than bytes/4 tokens), then
// breaks with a reset; sent a prefill, it finishes with cont and reports
// usage. It records the max_tokens each call was sent.
type letters struct {
	name  string
	first []string
	cont  []string
	mu    sync.Mutex
	max   []int
}

func (l *letters) Name() string         { return l.name }
func (l *letters) HonoursContext() bool { return true }
func (l *letters) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (l *letters) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	msgs := req.Chat.Get("messages").Array()
	continuing := msgs[len(msgs)-1].Get("role").Str == "assistant"
	l.mu.Lock()
	l.max = append(l.max, int(gjson.GetBytes(req.Chat.Body(), "max_tokens").Int()))
	l.mu.Unlock()
	f := chatapi.NewFrame(l.name)
	words := l.first
	if continuing {
		words = l.cont
	}
	for _, w := range words {
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &w}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	if !continuing {
		return llm.Completion{}, fmt.Errorf("%s: connection reset by peer", l.name)
	}
	if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{}, "stop")}); err != nil {
		return llm.Completion{}, err
	}
	u := chatapi.Usage{PromptTokens: 10, CompletionTokens: len(words), TotalTokens: 10 + len(words)}
	if req.Chat.IncludeUsage {
		if err := emit(llm.Chunk{Raw: f.UsageChunk(u)}); err != nil {
			return llm.Completion{}, err
		}
	}
	return llm.Completion{Model: l.name, Usage: &u}, nil
}

func (l *letters) maxTokens() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.max...)
}

func twelve() []string { return strings.Split(strings.Repeat("a", 12), "") }

// 'The rest of the answer, not a second one': a continuation is asked for
// what is left of max_tokens, and what the caller had is counted high —
// twelve one-letter chunks are twelve tokens, not the three their bytes
// would make.
func TestAContinuationCountsEveryChunkTheCallerReadAgainstItsLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &letters{name: "primary", first: twelve()}
		fallback := &letters{name: "fallback", cont: []string{"b", "c"}}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		text, _, err := relay(t, g, router.Request{Chat: limited(t, `"max_tokens":20`)})
		require.NoError(t, err)
		assert.Equal(t, strings.Repeat("a", 12)+"bc", text)
		assert.Equal(t, []int{8}, fallback.maxTokens(), "20 asked for, 12 read: 8 left")
	})
}

// Response.Raw's usage tells 'the whole request's cost', and a call that
// reported none is told at no fewer completion tokens than the chunks the
// caller read from it; total_tokens is prompt plus completion.
func TestTheUsageToldCountsTheChunksOfACallThatReportedNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &letters{name: "primary", first: twelve()}
		fallback := &letters{name: "fallback", cont: []string{"b", "c"}}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: limited(t, `"stream_options":{"include_usage":true}`)}
		require.True(t, g.Resolve("chat", &req))
		var usage []chatapi.Usage
		_, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			if p, err := chatapi.ReadPiece(c.Raw); err == nil && p.Usage != nil {
				usage = append(usage, *p.Usage)
			}
			return nil
		})
		require.NoError(t, err)
		require.Len(t, usage, 1, "the caller is told the usage once")
		assert.Equal(t, chatapi.Usage{PromptTokens: 10, CompletionTokens: 14, TotalTokens: 24}, usage[0],
			"the primary's 12 chunks (it reported nothing) and the fallback's report of 10 + 2")
	})
}

// 'stream limits must be positive': each of them, zero or negative.
func TestStreamRefusesLimitsThatAreNotPositive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary"}
		g := continuing(t, router.NopObserver{}, nil, primary)
		for _, l := range []router.StreamLimits{{FirstToken: 0, Idle: time.Second}, {FirstToken: time.Second, Idle: 0},
			{FirstToken: -time.Second, Idle: time.Second}, {FirstToken: time.Second, Idle: -1}} {
			req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", true)}
			require.True(t, g.Resolve("chat", &req))
			_, err := g.Stream(t.Context(), req, l, func(llm.Chunk) error { return nil })
			require.ErrorIs(t, err, router.ErrInvalidConfig, "%+v", l)
		}
		assert.Empty(t, primary.calls(), "nothing asked of a provider")
	})
}

// A request with "n": 1 asks for one answer, as one with no n does: it is
// continued like any other.
func TestARequestForOneChoiceIsContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 20}
		fallback := &writer{name: "fallback"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		text, _, err := relay(t, g, router.Request{Chat: limited(t, `"n":1`)})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), text)
		assert.Equal(t, []string{"primary:completed"}, obs.list())
	})
}

// A caller who has gone (emit failed) is never continued for, even while
// its context is still alive: there is no one left to read the rest.
func TestNoContinuationIsAskedForACallerWhoseEmitFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 40}
		fallback := &writer{name: "fallback"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		gone := errors.New("the caller's connection is closed")
		n := 0
		_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error {
			if n++; n > 5 {
				return gone
			}
			return nil
		})
		require.Error(t, err)
		assert.Empty(t, fallback.calls(), "no continuation for a caller who left")
		assert.Empty(t, obs.list(), "and nothing to report of one")
	})
}

// attemptLog records Observer.Attempt.
type attemptLog struct {
	router.NopObserver
	mu   sync.Mutex
	got  []string
	errs []bool
}

func (a *attemptLog) Attempt(t router.Target, n int, _ time.Duration, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.got = append(a.got, fmt.Sprintf("%s#%d", t.Provider, n))
	a.errs = append(a.errs, err != nil)
}

func (a *attemptLog) failed() []bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]bool(nil), a.errs...)
}

func (a *attemptLog) list() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.got...)
}

// Observer.Attempt: 'attempt counts from 1' — a continuation's calls too,
// numbered in turn.
func TestContinuationsAreAttemptsCountedFromOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 10}
		second := &writer{name: "second", fault: cut, after: 5} // continues, and breaks in turn
		third := &writer{name: "third"}
		obs := &attemptLog{}
		cfg := config()
		cfg.Observer = obs
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "second"}, {Provider: "third"}},
			Continue: []router.Target{{Provider: "second"}, {Provider: "third"}}}}
		g := newGateway(t, cfg, primary, second, third)
		text, _, err := relay(t, g, router.Request{})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty, ""), text)
		assert.Equal(t, []string{"second#1", "third#2", "primary#1"}, obs.list(),
			"the continuations end first, numbered 1 and 2; the attempt they continued ends last")
	})
}

// Response.Model is 'the upstream model that answered': what the upstream
// said, not the name the route asked it for.
func TestResponseModelIsWhatTheUpstreamSaid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("gpt-4o", func(context.Context) (llm.Completion, error) {
			return answer("gpt-4o-2024-08-06", "hi"), nil
		})
		g := newGateway(t, config(), up)
		resp, err := g.Generate(t.Context(), ask(route("gpt-4o")))
		require.NoError(t, err)
		assert.Equal(t, "gpt-4o-2024-08-06", resp.Model)

		resp, err = g.Generate(t.Context(), ask(route("plain"))) // answers with no model of its own
		require.NoError(t, err)
		assert.Equal(t, "plain", resp.Model, "with none said, the model the target asked for")
	})
}

// An attempt that failed is observed, and its span ends, as failed, whether
// or not a later attempt answered.
func TestAFailedAttemptIsReportedAsFailedWhenTheNextAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		up := newUpstream("up")
		up.script("primary", status(http.StatusInternalServerError, "", 0))
		obs := &attemptLog{}
		cfg := config()
		cfg.Tracer, cfg.Observer = tp, obs
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
		require.NoError(t, err)
		assert.Equal(t, []string{"up#1", "up#2"}, obs.list())
		assert.Equal(t, []bool{true, false}, obs.failed(), "the primary's attempt failed; the secondary's answered")
		var statuses []codes.Code
		for _, s := range exp.GetSpans() {
			for _, a := range s.Attributes {
				if a.Key == "gateway.outcome" {
					statuses = append(statuses, s.Status.Code)
				}
			}
		}
		assert.Equal(t, []codes.Code{codes.Error, codes.Unset}, statuses)
	})
}

// RetrySame: the target that failed is 'tried once more ... before the
// route moves on' — to the next target in order, on a route of three.
func TestRetrySameThenTheNextTargetInOrderOnALongerRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("primary", status(http.StatusInternalServerError, "", 0))
		cfg := config()
		cfg.Retry.BaseBackoff = 0
		g := newGateway(t, cfg, up)
		req := ask(route("primary", "secondary", "third"))
		req.Route.RetrySame = true
		_, err := g.Generate(t.Context(), req)
		require.NoError(t, err)
		assert.Equal(t, []string{"primary@0s", "primary@0s", "secondary@0s"}, up.history())
	})
}

// A provider with no probe of its own is never probed in the background:
// llm.ErrNoProbe ends its probing at once, and the Observer hears of none.
func TestAProviderWithoutAProbeIsNeverReportedProbed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up") // no Probe method
		up.script("primary", status(http.StatusServiceUnavailable, "", 0))
		obs := &probeRecorder{}
		cfg := config()
		cfg.Observer = obs
		cfg.Health.ProbeInterval, cfg.Health.ProbeMaxInterval = 250*time.Millisecond, time.Second
		g := newGateway(t, cfg, up)
		for range 2 { // threshold 2: primary's breaker opens
			_, err := g.Generate(t.Context(), ask(route("primary")))
			require.Error(t, err)
		}
		require.Equal(t, "open", targetState(g, "up", "primary"))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Zero(t, obs.ok.Load()+obs.failed.Load(), "no probe ran, so none is reported")
	})
}

// 'the next target at once if this request has not tried it yet': one
// whose breaker is open is passed over, and the one after it is asked at
// once, not after a backoff spent on the target that just failed.
func TestAFailureMovesOnAtOnceToTheNextHealthyTargetPastAnOpenOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("primary", failsThen(1, status(http.StatusInternalServerError, "", 0)))
		up.script("broken", status(http.StatusServiceUnavailable, "", 0))
		g := newGateway(t, config(), up)
		for range 2 { // threshold 2: broken's breaker opens
			_, err := g.Generate(t.Context(), ask(route("broken")))
			require.Error(t, err)
		}
		require.Equal(t, "open", targetState(g, "up", "broken"))
		start := len(up.history())
		_, err := g.Generate(t.Context(), ask(route("primary", "broken", "third")))
		require.NoError(t, err)
		calls := up.history()[start:]
		require.Len(t, calls, 2)
		p, third, _ := strings.Cut(calls[1], "@")
		assert.Equal(t, "third", p, "the open one is passed over")
		assert.Equal(t, strings.SplitN(calls[0], "@", 2)[1], third, "asked at the moment the primary failed: no backoff")
	})
}

// 'The rest of the answer, not a second one', however many continuations
// write it: one that wrote up to the caller's max_tokens and then broke
// leaves nothing to ask of the next, and the answer ends there with
// "length" — never a token past the limit.
func TestAnAnswerAContinuationWroteToItsLimitEndsThere(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 3}
		second := &writer{name: "second", fault: cut, after: 5, overrun: true} // its five, then a cut before the finish
		third := &writer{name: "third"}
		obs := &outcomes{}
		cfg := config()
		cfg.Observer = obs
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "second"}, {Provider: "third"}},
			Continue: []router.Target{{Provider: "second"}, {Provider: "third"}}}}
		g := newGateway(t, cfg, primary, second, third)
		req := router.Request{Tenant: "acme", Chat: limited(t, `"max_tokens":8`)}
		require.True(t, g.Resolve("chat", &req))
		var text strings.Builder
		var finishes []string
		_, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			p, err := chatapi.ReadPiece(c.Raw)
			require.NoError(t, err)
			text.WriteString(p.Text)
			if p.Finish != "" {
				finishes = append(finishes, p.Finish)
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty[:8], ""), text.String(), "8 asked for, 8 read")
		assert.Equal(t, []string{"length"}, finishes)
		assert.Empty(t, third.calls(), "nothing was left to ask for")
		assert.Equal(t, []string{"primary:at_limit"}, obs.list())
	})
}

// New refuses each Retry and Health setting that cannot work, on its own
// (every other field good), and takes the bounds themselves.
func TestNewRefusesEachBadRetryAndHealthSettingAlone(t *testing.T) {
	for name, mutate := range map[string]func(*router.Config){
		"no attempt timeout":            func(c *router.Config) { c.Retry.AttemptTimeout = 0 },
		"negative attempt timeout":      func(c *router.Config) { c.Retry.AttemptTimeout = -time.Second },
		"negative base backoff":         func(c *router.Config) { c.Retry.BaseBackoff = -time.Millisecond },
		"base backoff above the max":    func(c *router.Config) { c.Retry.BaseBackoff = c.Retry.MaxBackoff + time.Millisecond },
		"no failure threshold":          func(c *router.Config) { c.Health.FailureThreshold = 0 },
		"probe max below the interval":  func(c *router.Config) { c.Health.ProbeInterval, c.Health.ProbeMaxInterval = time.Second, time.Second-1 },
		"negative probe interval alone": func(c *router.Config) { c.Health.ProbeInterval = -1 },
	} {
		cfg := config()
		mutate(&cfg)
		_, err := router.New(cfg, newUpstream("up"))
		assert.ErrorIs(t, err, router.ErrInvalidConfig, name)
	}
	for name, mutate := range map[string]func(*router.Config){
		"base backoff at the max":      func(c *router.Config) { c.Retry.BaseBackoff = c.Retry.MaxBackoff },
		"no backoff at all":            func(c *router.Config) { c.Retry.BaseBackoff, c.Retry.MaxBackoff = 0, 0 },
		"one attempt":                  func(c *router.Config) { c.Retry.MaxAttempts = 1 },
		"probe max equal to interval":  func(c *router.Config) { c.Health.ProbeInterval, c.Health.ProbeMaxInterval = time.Second, time.Second },
		"probe interval, no max (0)":   func(c *router.Config) { c.Health.ProbeInterval, c.Health.ProbeMaxInterval = time.Second, 0 },
		"a threshold of one":           func(c *router.Config) { c.Health.FailureThreshold = 1 },
		"a nanosecond attempt timeout": func(c *router.Config) { c.Retry.AttemptTimeout = 1 },
	} {
		cfg := config()
		mutate(&cfg)
		g, err := router.New(cfg, newUpstream("up"))
		require.NoError(t, err, name)
		require.NoError(t, g.Close(t.Context()), name)
	}
}

// HasProvider reports exactly the providers the router was given.
func TestHasProviderIsTrueOnlyForAGivenProvider(t *testing.T) {
	g := newGateway(t, config(), newUpstream("up"), newUpstream("other"))
	assert.True(t, g.HasProvider("up"))
	assert.True(t, g.HasProvider("other"))
	assert.False(t, g.HasProvider("nobody"))
	assert.False(t, g.HasProvider(""))
}

// A span says why an attempt failed, and only a failed one: an answered
// attempt carries no failure reason.
func TestOnlyAFailedAttemptsSpanCarriesAFailureReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		up := newUpstream("up")
		up.script("primary", status(http.StatusInternalServerError, "", 0))
		cfg := config()
		cfg.Tracer = tp
		g := newGateway(t, cfg, up)
		_, err := g.Generate(t.Context(), ask(route("primary", "secondary")))
		require.NoError(t, err)
		reasons := map[string]string{}
		for _, s := range exp.GetSpans() {
			if s.Name != "gateway.attempt" {
				continue
			}
			model, reason := "", "(none)"
			for _, a := range s.Attributes {
				switch a.Key {
				case "gen_ai.request.model":
					model = a.Value.AsString()
				case "gateway.failure_reason":
					reason = a.Value.AsString()
				}
			}
			reasons[model] = reason
		}
		assert.Equal(t, map[string]string{"primary": "server_error", "secondary": "(none)"}, reasons)
	})
}

// Response.Model: 'the upstream model that answered', and with none said,
// the model the target asked for — for a whole answer as for a stream.
func TestAWholeAnswerThatNamesNoModelIsTheTargetsModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newUpstream("up")
		up.script("quiet", func(context.Context) (llm.Completion, error) { return answer("", "hi"), nil })
		g := newGateway(t, config(), up)
		resp, err := g.Generate(t.Context(), ask(route("quiet")))
		require.NoError(t, err)
		assert.Equal(t, "quiet", resp.Model)
	})
}

// echoing writes "Hello " and breaks; sent a prefill, it answers with one
// raw chunk that repeats the prefill and goes on, carrying a field of its
// own, then finishes.
type echoing struct{ name, raw string }

func (e echoing) Name() string         { return e.name }
func (e echoing) HonoursContext() bool { return true }
func (e echoing) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (e echoing) Stream(_ context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	msgs := req.Chat.Get("messages").Array()
	f := chatapi.NewFrame(e.name)
	if msgs[len(msgs)-1].Get("role").Str != "assistant" {
		hello := "Hello "
		if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{Content: &hello}, "")}); err != nil {
			return llm.Completion{}, err
		}
		return llm.Completion{}, fmt.Errorf("%s: connection reset by peer", e.name)
	}
	if err := emit(llm.Chunk{Raw: []byte(e.raw)}); err != nil {
		return llm.Completion{}, err
	}
	if err := emit(llm.Chunk{Raw: f.Chunk(chatapi.Delta{}, "stop")}); err != nil {
		return llm.Completion{}, err
	}
	return llm.Completion{Model: e.name}, nil
}

// 'A gateway forwards what it is given': a continuation's chunk whose
// repeat of the prefill is cut keeps every other field it carried.
func TestAContinuationChunkCutForItsRepeatKeepsItsOtherFields(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		raw := `{"id":"c1","object":"chat.completion.chunk","model":"fallback","system_fingerprint":"fp_kept",` +
			`"choices":[{"index":0,"delta":{"content":"Hello world"},"logprobs":null}]}`
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}},
			Continue: []router.Target{{Provider: "fallback"}}}}
		g := newGateway(t, cfg, echoing{name: "primary"}, echoing{name: "fallback", raw: raw})
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		var got []string
		_, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			got = append(got, string(c.Raw))
			return nil
		})
		require.NoError(t, err)
		var cut string
		for _, c := range got {
			if strings.Contains(c, "world") {
				cut = c
			}
		}
		require.NotEmpty(t, cut, "the continuation's own text reached the caller: %q", got)
		assert.Equal(t, "world", gjson.Get(cut, "choices.0.delta.content").Str, "the repeat is cut")
		assert.Equal(t, "fp_kept", gjson.Get(cut, "system_fingerprint").Str, "and nothing else of the chunk is lost")
	})
}
