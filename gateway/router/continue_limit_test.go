package router_test

import (
	"strings"
	"testing"
	"testing/synctest"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// limited is a streamed request for "chat" with the answer limits in
// fields (`"max_tokens":8`, say).
func limited(t *testing.T, fields string) *chatapi.Request {
	t.Helper()
	chat, err := chatapi.Parse([]byte(`{"model":"chat","stream":true,` + fields + `,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	return chat
}

// A continuation writes the rest of the answer, not a second answer: it
// is asked for what is left of the caller's max_tokens (in whichever
// fields the caller set), and the caller reads no more than it asked for.
func TestAContinuationIsAskedForWhatIsLeftOfTheCallersLimit(t *testing.T) {
	for _, fields := range []string{`"max_tokens":8`, `"max_completion_tokens":8`, `"max_tokens":8,"max_completion_tokens":8`} {
		t.Run(fields, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				primary := &writer{name: "primary", fault: cut, after: 3}
				fallback := &writer{name: "fallback"}
				g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
				text, _, err := relay(t, g, router.Request{Chat: limited(t, fields)})
				require.NoError(t, err)
				assert.Equal(t, strings.Join(sixty[:8], ""), text, "8 tokens asked for, 8 read: 3 before the cut, 5 after")
				require.Len(t, fallback.bodies, 1)
				body := fallback.bodies[0]
				for _, k := range []string{"max_tokens", "max_completion_tokens"} {
					if strings.Contains(fields, `"`+k+`"`) {
						assert.EqualValues(t, 5, gjson.Get(body, k).Int(), "%s: what is left", k)
					} else {
						assert.False(t, gjson.Get(body, k).Exists(), "%s: not added where the caller set none", k)
					}
				}
			})
		})
	}
}

// An answer cut once the caller had all it asked for is not continued:
// it ends there, whole, with the finish an upstream sends at the limit.
func TestAnAnswerCutAtItsLimitEndsThereWithLength(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 3, overrun: true} // cut after the third token, before its finish
		fallback := &writer{name: "fallback"}
		obs := &outcomes{}
		g := continuing(t, obs, []string{"fallback"}, primary, fallback)
		req := router.Request{Tenant: "acme", Chat: limited(t, `"max_tokens":3`)}
		require.True(t, g.Resolve("chat", &req))
		var text, finish string
		_, err := g.Stream(t.Context(), req, limits, func(c llm.Chunk) error {
			p, err := chatapi.ReadPiece(c.Raw)
			require.NoError(t, err)
			text += p.Text
			finish = p.Finish
			return nil
		})
		require.NoError(t, err, "the caller has the whole answer it asked for")
		assert.Equal(t, strings.Join(sixty[:3], ""), text)
		assert.Equal(t, "length", finish, "the last chunk says why it ended")
		assert.Empty(t, fallback.calls(), "nothing left to ask anyone for")
		assert.Equal(t, []string{"primary:at_limit"}, obs.list())
	})
}

// One token short of the limit is not at it: the continuation is asked
// for that one.
func TestOneTokenShortOfTheLimitIsContinuedForOne(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 3}
		fallback := &writer{name: "fallback"}
		g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
		text, _, err := relay(t, g, router.Request{Chat: limited(t, `"max_tokens":4`)})
		require.NoError(t, err)
		assert.Equal(t, strings.Join(sixty[:4], ""), text)
		require.Len(t, fallback.bodies, 1)
		assert.EqualValues(t, 1, gjson.Get(fallback.bodies[0], "max_tokens").Int())
	})
}

// Each limit the caller set is lowered by what it has, on its own: the
// smaller is never raised to what is left of the larger.
func TestEachLimitIsLoweredByWhatTheCallerHas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &writer{name: "primary", fault: cut, after: 3, overrun: true}
		fallback := &writer{name: "fallback"}
		g := continuing(t, router.NopObserver{}, []string{"fallback"}, primary, fallback)
		_, _, err := relay(t, g, router.Request{Chat: limited(t, `"max_tokens":100,"max_completion_tokens":20`)})
		require.NoError(t, err)
		require.Len(t, fallback.bodies, 1)
		assert.EqualValues(t, 97, gjson.Get(fallback.bodies[0], "max_tokens").Int())
		assert.EqualValues(t, 17, gjson.Get(fallback.bodies[0], "max_completion_tokens").Int(), "20 less the 3 sent, not 97")
	})
}

// A continuation's own usage never reaches the caller, not even on a chunk
// that carries text or the finish with it: the caller is told the whole
// answer's usage once, if it asked.
func TestAContinuationsUsageOnItsFinishChunkIsNotPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &raws{name: "primary", events: []string{
			`{"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`}, end: resets}
		cont := &raws{name: "cont", events: []string{
			`{"id":"b","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" world"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`}, end: finishes}
		cfg := config()
		cfg.Routes = []router.Route{{Name: "chat", Targets: []router.Target{{Provider: "primary"}, {Provider: "cont"}}, Continue: []router.Target{{Provider: "cont"}}}}
		g := newGateway(t, cfg, primary, cont)
		got, err := rawStream(t, g)
		require.NoError(t, err)
		var text string
		for _, raw := range got {
			assert.False(t, gjson.Get(raw, "usage").IsObject(), "no usage for a caller who did not ask: %s", raw)
			text += gjson.Get(raw, "choices.0.delta.content").Str
		}
		assert.Equal(t, "Hello world", text)
	})
}
