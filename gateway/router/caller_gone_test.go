package router_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A caller whose very first write fails has left, even though its context
// is still live (a broken pipe is seen on the write before the server
// cancels the request). The router must not fall back to another target —
// that would write again to a caller no longer there, and start a second
// answer — nor spend the retry budget: a caller who left withdraws
// nothing. (Found by the stream vectors: it used to fall back.)
func TestACallerWhoseFirstWriteFailsEndsTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary, fallback := &writer{name: "primary"}, &writer{name: "fallback"}
		budget := &ledger{left: 10}
		cfg := config()
		cfg.RetryBudget = budget
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "fallback"}}}}
		g := newGateway(t, cfg, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: chatapi.NewRequest("tell me", true)}
		require.True(t, g.Resolve("chat", &req))
		emits := 0
		_, err := g.Stream(t.Context(), req, limits, func(llm.Chunk) error {
			emits++
			return errors.New("write: broken pipe")
		})
		assert.ErrorIs(t, err, context.Canceled, "a caller who left reads as Canceled: %v", err)
		assert.Equal(t, 1, emits, "nothing is written after the write that failed")
		fallback.mu.Lock()
		defer fallback.mu.Unlock()
		assert.Empty(t, fallback.prefills, "no other target is asked for a caller who left")
		assert.Equal(t, []string{"deposit primary"}, budget.history(), "the request deposits; a caller who left withdraws nothing")
	})
}
