package guard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// teller streams words, a chunk each; cut, it drops before its finish and
// reports no usage, as an upstream whose connection reset does. Whole, it
// sends the finish, the usage chunk when the caller asked for it, and then
// waits a moment for its [DONE] — as a real stream does, so a reader who
// hangs up after the usage ends the call before it returns.
type teller struct {
	name   string
	words  []string
	cut    bool
	atOnce bool // it fails before its first chunk, after the request went out
	usage  llm.Usage
}

func (p *teller) Name() string         { return p.name }
func (p *teller) HonoursContext() bool { return true }
func (p *teller) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (p *teller) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	if p.atOnce {
		return llm.Completion{}, errors.New(p.name + ": read: connection reset by peer")
	}
	f := chatapi.NewFrame(p.name)
	chunks := [][]byte{f.Chunk(chatapi.Delta{Role: "assistant"}, "")}
	for _, w := range p.words {
		chunks = append(chunks, f.Chunk(chatapi.Delta{Content: &w}, ""))
	}
	if !p.cut {
		chunks = append(chunks, f.Chunk(chatapi.Delta{}, "stop"))
		if req.Chat.IncludeUsage {
			chunks = append(chunks, f.UsageChunk(p.usage))
		}
	}
	for _, c := range chunks {
		if err := emit(llm.Chunk{Raw: c}); err != nil {
			return llm.Completion{}, err
		}
	}
	if p.cut {
		return llm.Completion{}, errors.New(p.name + ": read: connection reset by peer")
	}
	select {
	case <-time.After(time.Millisecond): // [DONE]
	case <-ctx.Done():
		return llm.Completion{}, ctx.Err()
	}
	return llm.Completion{Model: p.name, Usage: &p.usage}, nil
}

// A continued stream is charged the cut call's reservation (its upstream
// reported nothing) and the continuation's usage — whether or not the
// caller asked to be told the usage, which decides only whether the usage
// chunk is the caller's to read.
func TestAContinuedStreamIsChargedTheCutCallsReservationAndTheContinuationsUsage(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		name := map[bool]string{false: "without include_usage", true: "with include_usage"}[includeUsage]
		t.Run(name, func(t *testing.T) {
			func() { // real time: miniredis serves on a real socket, which a synctest bubble cannot wait on
				r := newRig(t, false)
				ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
				require.Nil(t, e)
				primary := &teller{name: "primary", words: []string{"Once", " upon"}, cut: true}
				cont := &teller{name: "cont", words: []string{" a", " time."}, usage: llm.Usage{PromptTokens: 30, CompletionTokens: 2, TotalTokens: 32}}
				g, err := router.New(router.Config{
					Slots:  router.Slots{MaxConcurrent: 4, MaxQueueWait: time.Second},
					Retry:  router.Retry{MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond, AttemptTimeout: time.Second, TotalTimeout: 10 * time.Second},
					Health: router.Health{FailureThreshold: 5, RecoveryTimeout: time.Second},

					Routes: []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "cont"}},
						Continue: []router.Target{{Provider: "cont"}}}},
				}, metered(primary), metered(cont))
				require.NoError(t, err)
				defer g.Close(context.Background())
				body := `{"model":"chat","stream":true,"messages":[{"role":"user","content":"a story"}]}`
				if includeUsage {
					body = `{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a story"}]}`
				}
				chat, err := chatapi.Parse([]byte(body))
				require.NoError(t, err)
				req := router.Request{Tenant: "acme", Chat: chat}
				require.True(t, g.Resolve("chat", &req))
				var text string
				var told []chatapi.Usage
				_, err = g.Stream(ctx, req, router.StreamLimits{FirstToken: time.Second, Idle: time.Second}, func(c llm.Chunk) error {
					p, err := chatapi.ReadPiece(c.Raw)
					require.NoError(t, err)
					text += p.Text
					if p.Usage != nil {
						told = append(told, *p.Usage)
					}
					return nil
				})
				require.NoError(t, err)
				assert.Equal(t, "Once upon a time.", text)
				done(nil, nil)
				assert.Equal(t, 2000-150-32, r.left(t, "acme", 2000), "150 reserved for the cut call, 32 used by the continuation")
				if includeUsage {
					assert.Equal(t, []chatapi.Usage{{PromptTokens: 100 + 30, CompletionTokens: 50 + 2, TotalTokens: 182}}, told,
						"the caller is told what the tenant is charged: the cut call's reservation (its prompt's 100, its answer's 50) and the continuation's usage")
				} else {
					assert.Empty(t, told, "no usage for a caller who did not ask")
				}
			}()
		})
	}
}

// A continuation that fails before its first chunk had the prompt and is
// charged its reservation; the caller is told that too, with the rest:
// what it reads is what the tenant pays.
func TestAContinuationThatFailedIsChargedAndToldToo(t *testing.T) {
	r := newRig(t, false)
	ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	primary := &teller{name: "primary", words: []string{"Once", " upon"}, cut: true}
	mid := &teller{name: "mid", atOnce: true}
	cont := &teller{name: "cont", words: []string{" a", " time."}, usage: llm.Usage{PromptTokens: 30, CompletionTokens: 2, TotalTokens: 32}}
	g, err := router.New(router.Config{
		Slots:  router.Slots{MaxConcurrent: 4, MaxQueueWait: time.Second},
		Retry:  router.Retry{MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond, AttemptTimeout: time.Second, TotalTimeout: 10 * time.Second},
		Health: router.Health{FailureThreshold: 5, RecoveryTimeout: time.Second},

		Routes: []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "mid"}, {Provider: "cont"}},
			Continue: []router.Target{{Provider: "mid"}, {Provider: "cont"}}}},
	}, metered(primary), metered(mid), metered(cont))
	require.NoError(t, err)
	defer g.Close(context.Background())
	chat, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"a story"}]}`))
	require.NoError(t, err)
	req := router.Request{Tenant: "acme", Chat: chat}
	require.True(t, g.Resolve("chat", &req))
	var told []chatapi.Usage
	_, err = g.Stream(ctx, req, router.StreamLimits{FirstToken: time.Second, Idle: time.Second}, func(c llm.Chunk) error {
		p, err := chatapi.ReadPiece(c.Raw)
		require.NoError(t, err)
		if p.Usage != nil {
			told = append(told, *p.Usage)
		}
		return nil
	})
	require.NoError(t, err)
	done(nil, nil)
	assert.Equal(t, 2000-150-150-32, r.left(t, "acme", 2000), "the cut call's reservation, the failed continuation's, the last one's usage")
	assert.Equal(t, []chatapi.Usage{{PromptTokens: 100 + 100 + 30, CompletionTokens: 50 + 50 + 2, TotalTokens: 332}}, told, "told what was charged")
}

// whole answers whole: its usage, or its error after the request went out.
type whole struct {
	name  string
	err   error
	usage llm.Usage
}

func (p *whole) Name() string         { return p.name }
func (p *whole) HonoursContext() bool { return true }
func (p *whole) Generate(context.Context, llm.Request) (llm.Completion, error) {
	if p.err != nil {
		return llm.Completion{}, p.err
	}
	return llm.Completion{Raw: chatapi.NewFrame(p.name).Completion("ok", nil, "stop", &p.usage), Usage: &p.usage}, nil
}

// fallback is a router over primary then fallback, each metered by r's
// guard, neither continuing the other.
func fallback(t *testing.T, r *rig, primary, second llm.Provider) *router.Router {
	t.Helper()
	g, err := router.New(router.Config{
		Slots:  router.Slots{MaxConcurrent: 4, MaxQueueWait: time.Second},
		Retry:  router.Retry{MaxAttempts: 2, BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond, AttemptTimeout: time.Second, TotalTimeout: 10 * time.Second},
		Health: router.Health{FailureThreshold: 5, RecoveryTimeout: time.Second},

		Routes: []router.Route{{Name: "chat", Targets: []router.Target{{Provider: primary.Name()}, {Provider: second.Name()}}}},
	}, metered(primary), metered(second))
	require.NoError(t, err)
	t.Cleanup(func() { _ = g.Close(context.Background()) })
	return g
}

// A request that fell back after an attempt the upstream had is charged
// for both; the caller is told both, in the answer's usage, streamed or
// whole.
func TestAFallbackTellsTheCallerWhatTheFailedAttemptCostToo(t *testing.T) {
	t.Run("streamed", func(t *testing.T) {
		r := newRig(t, false)
		ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
		require.Nil(t, e)
		g := fallback(t, r, &teller{name: "primary", atOnce: true},
			&teller{name: "second", words: []string{"Hi"}, usage: llm.Usage{PromptTokens: 30, CompletionTokens: 2, TotalTokens: 32}})
		chat, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat}
		require.True(t, g.Resolve("chat", &req))
		var told []chatapi.Usage
		_, err = g.Stream(ctx, req, router.StreamLimits{FirstToken: time.Second, Idle: time.Second}, func(c llm.Chunk) error {
			if p, _ := chatapi.ReadPiece(c.Raw); p.Usage != nil {
				told = append(told, *p.Usage)
			}
			return nil
		})
		require.NoError(t, err)
		done(nil, nil)
		assert.Equal(t, 2000-150-32, r.left(t, "acme", 2000))
		assert.Equal(t, []chatapi.Usage{{PromptTokens: 130, CompletionTokens: 52, TotalTokens: 182}}, told)
	})
	t.Run("whole", func(t *testing.T) {
		r := newRig(t, false)
		ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
		require.Nil(t, e)
		g := fallback(t, r, &whole{name: "primary", err: errors.New("read: connection reset by peer")},
			&whole{name: "second", usage: llm.Usage{PromptTokens: 30, CompletionTokens: 2, TotalTokens: 32}})
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("hi", false)}
		require.True(t, g.Resolve("chat", &req))
		resp, err := g.Generate(ctx, req)
		require.NoError(t, err)
		done(nil, nil)
		assert.Equal(t, 2000-150-32, r.left(t, "acme", 2000))
		a, _, err := chatapi.ReadAnswer("second", resp.Raw)
		require.NoError(t, err)
		assert.Equal(t, &chatapi.Usage{PromptTokens: 130, CompletionTokens: 52, TotalTokens: 182}, a.Usage, "the body the caller reads")
		assert.Equal(t, &chatapi.Usage{PromptTokens: 30, CompletionTokens: 2, TotalTokens: 32}, resp.Usage, "what the answering upstream reported: the metrics count reports")
	})
}
