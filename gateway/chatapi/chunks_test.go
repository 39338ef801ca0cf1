package chatapi

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// TestChunksOfKeepsEveryFieldAndOnlyChangesTheWrapping: a whole answer
// streamed to a caller who asked for a stream is the same answer, field for
// field, in a stream's shape.
func TestChunksOfKeepsEveryFieldAndOnlyChangesTheWrapping(t *testing.T) {
	for _, name := range []string{"tool-calls", "parallel-tool-calls", "logprobs-two-choices"} {
		t.Run(name, func(t *testing.T) {
			whole, err := os.ReadFile("testdata/answers/" + name + ".json")
			require.NoError(t, err)
			chunks, err := ChunksOf(whole, true)
			require.NoError(t, err)
			require.Len(t, chunks, 2, "the answer, then its usage")
			for _, c := range chunks {
				require.True(t, json.Valid(c), "%s", c)
				assert.Equal(t, "chat.completion.chunk", gjson.GetBytes(c, "object").Str)
			}
			w, body, tail := gjson.ParseBytes(whole), gjson.ParseBytes(chunks[0]), gjson.ParseBytes(chunks[1])
			w.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "object", "choices":
				case "usage":
					assert.False(t, body.Get("usage").Exists(), "the usage is not in the answer's chunk")
					assert.JSONEq(t, v.Raw, tail.Get("usage").Raw, "but in the last one, as it came")
				default:
					assert.Equal(t, v.Raw, body.Get(gjson.Escape(k.Str)).Raw, "%s is copied as it came", k.Str)
					assert.Equal(t, v.Raw, tail.Get(gjson.Escape(k.Str)).Raw, "into both chunks")
				}
				return true
			})
			assert.Equal(t, "[]", tail.Get("choices").Raw, "the usage chunk has no choices")
			require.Len(t, body.Get("choices").Array(), len(w.Get("choices").Array()))
			for i, c := range w.Get("choices").Array() {
				d := body.Get("choices").Array()[i]
				sameExceptToolCallIndexes(t, c.Get("message"), d.Get("delta"))
				assert.False(t, d.Get("message").Exists())
				assert.Equal(t, c.Get("finish_reason").Raw, d.Get("finish_reason").Raw)
				assert.Equal(t, c.Get("logprobs").Raw, d.Get("logprobs").Raw)
				assert.Equal(t, c.Get("index").Raw, d.Get("index").Raw)
			}
		})
	}
}

func TestChunksOfWithoutUsageOrWithoutAsking(t *testing.T) {
	noUsage := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"}}]}`)
	chunks, err := ChunksOf(noUsage, true)
	require.NoError(t, err)
	assert.Equal(t, []string{`{"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`},
		texts(chunks), "no usage to send, so no usage chunk; a choice without finish_reason says null, as a chunk does")
	withUsage := []byte(`{"id":"x","object":"chat.completion","choices":[],"usage":{"total_tokens":3}}`)
	chunks, err = ChunksOf(withUsage, false)
	require.NoError(t, err)
	assert.Len(t, chunks, 1, "a caller who did not ask for usage does not get it")
}

func TestChunksOfRefusesWhatIsNotACompletion(t *testing.T) {
	for _, b := range []string{``, `[]`, `{"choices":{}}`, `{"id":"x"}`, `{"choices":[`, `"text"`} {
		t.Run(b, func(t *testing.T) {
			_, err := ChunksOf([]byte(b), true)
			assert.ErrorIs(t, err, ErrNotACompletion)
		})
	}
}

func texts(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// sameExceptToolCallIndexes checks that a delta is its message as it came,
// but for the index each tool call gains, in order.
func sameExceptToolCallIndexes(t *testing.T, message, delta gjson.Result) {
	t.Helper()
	calls := message.Get("tool_calls")
	if !calls.IsArray() {
		assert.Equal(t, message.Raw, delta.Raw, "the message is the delta, byte for byte")
		return
	}
	message.ForEach(func(k, v gjson.Result) bool {
		if k.Str != "tool_calls" {
			assert.Equal(t, v.Raw, delta.Get(gjson.Escape(k.Str)).Raw, "%s is copied as it came", k.Str)
		}
		return true
	})
	got := delta.Get("tool_calls").Array()
	require.Len(t, got, len(calls.Array()))
	for i, call := range calls.Array() {
		assert.Equal(t, int64(i), got[i].Get("index").Int(), "tool call %d carries its index, as a streamed one does", i)
		assert.True(t, got[i].Get("index").Exists())
		call.ForEach(func(k, v gjson.Result) bool {
			assert.Equal(t, v.Raw, got[i].Get(gjson.Escape(k.Str)).Raw, "tool call %d's %s as it came", i, k.Str)
			return true
		})
	}
}

func TestAToolCallThatHasAnIndexKeepsIt(t *testing.T) {
	chunks, err := ChunksOf([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"index":5,"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`), false)
	require.NoError(t, err)
	assert.Equal(t, `[{"index":5,"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]`, gjson.GetBytes(chunks[0], "choices.0.delta.tool_calls").Raw)
}
