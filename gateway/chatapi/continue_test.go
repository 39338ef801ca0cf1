package chatapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithPrefillAppendsTheAnswerSoFarAndNothingElse(t *testing.T) {
	body := `{"model":"chat","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"Sois bref."},{"role":"user","content":[{"type":"text","text":"hi"}]}] ,"stream":true}`
	r, err := Parse([]byte(body))
	require.NoError(t, err)
	for style, want := range map[PrefillStyle]string{
		PrefillAssistant: `{"model":"chat","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"Sois bref."},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":"Le \"début\" <b>\n"}],"stream":true}`,
		PrefillPrefix:    `{"model":"chat","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"Sois bref."},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":"Le \"début\" <b>\n","prefix":true}],"stream":true}`,
		PrefillVLLM:      `{"continue_final_message":true,"add_generation_prompt":false,"model":"chat","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"system","content":"Sois bref."},{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":"Le \"début\" <b>\n"}],"stream":true}`,
	} {
		out, err := r.WithPrefill("Le \"début\" <b>\n", style)
		require.NoError(t, err, style)
		assert.JSONEq(t, want, string(out.Body()), style)
		assert.Equal(t, 3, out.Messages, style)
		assert.False(t, out.Continuable(), "%s: it ends with an assistant message now", style)
	}
	assert.Equal(t, body, string(r.Body()), "the caller's request is unchanged")
}

func TestWithPrefillRefusesWhatItCannotContinue(t *testing.T) {
	own, err := Parse([]byte(`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Once"}]}`))
	require.NoError(t, err)
	assert.False(t, own.Continuable())
	_, err = own.WithPrefill("x", PrefillAssistant)
	assert.ErrorIs(t, err, ErrNotContinuable, "the caller's own prefill")

	r, err := Parse([]byte(`{"add_generation_prompt":true,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	_, err = r.WithPrefill("x", PrefillVLLM)
	assert.ErrorIs(t, err, ErrNotContinuable, "the caller set vLLM's flag itself")
	_, err = r.WithPrefill("x", "anthropic")
	assert.ErrorContains(t, err, "unknown prefill style")
}

func TestReadPieceTellsTextFromEverythingElse(t *testing.T) {
	for _, c := range []struct {
		chunk string
		want  Piece
	}{
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, Piece{}},
		{`{"choices":[{"index":0,"delta":{"content":"Hel\u006co","refusal":null,"tool_calls":[]}}]}`, Piece{Text: "Hello"}},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}`, Piece{Other: true}},
		{`{"choices":[{"index":0,"delta":{"refusal":"no"}}]}`, Piece{Other: true}},
		{`{"choices":[{"index":0,"delta":{"reasoning_content":"hmm"}}]}`, Piece{Other: true}},
		{`{"choices":[{"index":1,"delta":{"content":"b"}}]}`, Piece{Text: "b", Other: true}},
		{`{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`, Piece{Finish: "length", Ended: 1}},
		{`{"choices":[{"index":1,"delta":{},"finish_reason":"stop"}]}`, Piece{Finish: "stop", Ended: 2, Other: true}},
		{`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"},{"index":2,"delta":{},"finish_reason":"length"}]}`, Piece{Finish: "stop", Ended: 5, Other: true}},
		{`{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`, Piece{Usage: &Usage{3, 4, 7}}},
	} {
		got, err := ReadPiece([]byte(c.chunk))
		require.NoError(t, err, c.chunk)
		assert.Equal(t, c.want, got, c.chunk)
	}
	for _, bad := range []string{`{"choices":[`, `[1]`, `"x"`, ``} {
		_, err := ReadPiece([]byte(bad))
		assert.ErrorIs(t, err, ErrMalformedChunk, bad)
	}
}

func TestWithDeltaTextChangesOnlyTheText(t *testing.T) {
	in := `{"id":"c1","model":"m-2","choices":[{"index":0,"delta":{"content":"w00 w01"},"logprobs":null}]}`
	out, err := WithDeltaText([]byte(in), "w01 \"ok\"")
	require.NoError(t, err)
	assert.Equal(t, `{"id":"c1","model":"m-2","choices":[{"index":0,"delta":{"content":"w01 \"ok\""},"logprobs":null}]}`, string(out))
	_, err = WithDeltaText([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[]}}]}`), "x")
	assert.ErrorIs(t, err, ErrMalformedChunk)
}
