package router_test

// A bug from an outsider's fifth bank, written from the contract alone, that
// the suite let through: a continuation's answer limit lowered by the chunks
// the caller read instead of the tokens they held at least.

import (
	"context"
	"errors"
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
)

// svWordy streams each of pieces as one chunk of text and then drops the
// connection (cut), or, sent anything, answers tail with a finish. It
// records the body of every call.
type svWordy struct {
	name   string
	pieces []string
	cut    bool
	tail   string

	mu     sync.Mutex
	bodies []string
}

func (p *svWordy) Name() string         { return p.name }
func (p *svWordy) HonoursContext() bool { return true }
func (p *svWordy) Generate(context.Context, llm.Request) (llm.Completion, error) {
	return llm.Completion{}, errors.New("unused")
}

func (p *svWordy) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	p.mu.Lock()
	p.bodies = append(p.bodies, string(req.Chat.Body()))
	p.mu.Unlock()
	for _, s := range p.pieces {
		if err := emit(llm.Chunk{Raw: chatapi.NewFrame(p.name).Chunk(chatapi.Delta{Content: &s}, "")}); err != nil {
			return llm.Completion{}, err
		}
	}
	if p.cut {
		return llm.Completion{}, errors.New(p.name + ": read: connection reset by peer")
	}
	tail := p.tail
	if err := emit(llm.Chunk{Raw: chatapi.NewFrame(p.name).Chunk(chatapi.Delta{Content: &tail}, "stop")}); err != nil {
		return llm.Completion{}, err
	}
	return llm.Completion{Model: p.name}, nil
}

func (p *svWordy) sent() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.bodies...)
}

// A continuation is asked
// for what is left of the caller's max_tokens, the tokens it already read
// "counted high" (continue.go, tokens: "so that what a continuation is
// allowed never takes the caller past its limit"): two chunks of 20 bytes
// of text each are at least 10 tokens (4 bytes a token), not 2 (a token a
// chunk). With max_tokens 50, the continuation may write at most 40.
func TestAContinuationsLimitCountsTheTextNotTheChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &svWordy{name: "primary", pieces: []string{"abcdefghijklmnopqrst", "uvwxyzABCDEFGHIJKLMN"}, cut: true}
		cont := &svWordy{name: "cont", tail: " and the rest."}
		g, err := router.New(router.Config{
			Slots:  router.Slots{MaxConcurrent: 4, MaxQueueWait: time.Second},
			Retry:  router.Retry{MaxAttempts: 3, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, AttemptTimeout: 2 * time.Second, TotalTimeout: 30 * time.Second},
			Health: router.Health{FailureThreshold: 2, RecoveryTimeout: 10 * time.Second},
			Routes: []router.Route{{Name: "chat",
				Targets:  []router.Target{{Provider: "primary"}, {Provider: "cont"}},
				Continue: []router.Target{{Provider: "cont"}}}},
		}, primary, cont)
		require.NoError(t, err)
		defer func() { assert.NoError(t, g.Close(context.Background())) }()

		chat, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req := router.Request{Tenant: "acme", Chat: chat}
		require.True(t, g.Resolve("chat", &req))
		var text strings.Builder
		_, err = g.Stream(t.Context(), req, router.StreamLimits{FirstToken: time.Second, Idle: time.Second}, func(c llm.Chunk) error {
			p, err := chatapi.ReadPiece(c.Raw)
			require.NoError(t, err)
			text.WriteString(p.Text)
			return nil
		})
		require.NoError(t, err, "the continuation finished the answer")
		assert.Equal(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN and the rest.", text.String())
		bodies := cont.sent()
		require.Len(t, bodies, 1)
		assert.EqualValues(t, 40, gjson.Get(bodies[0], "max_tokens").Int(),
			"50 less the 10 tokens 40 bytes of text hold at least, not less the 2 chunks they came in")
	})
}
