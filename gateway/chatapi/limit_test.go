package chatapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithAnswerSentLowersEachLimitTheCallerSetByWhatItHas(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{`{"max_completion_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, `{"max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		// each by what the caller has: the smaller is never raised to the larger's rest
		{`{"max_tokens":100,"max_completion_tokens":20,"messages":[{"role":"user","content":"hi"}]}`, `{"max_tokens":97,"max_completion_tokens":17,"messages":[{"role":"user","content":"hi"}]}`},
		{`{"max_tokens":null,"max_completion_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, `{"max_tokens":null,"max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{`{"max_tokens":2,"max_completion_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, `{"max_tokens":1,"max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		r, err := Parse([]byte(tc.body))
		require.NoError(t, err)
		out := r.WithAnswerSent(3)
		assert.JSONEq(t, tc.want, string(out.Body()), tc.body)
		assert.JSONEq(t, tc.body, string(r.Body()), "the request it was made from is unchanged")
	}
}

func TestWithAnswerSentLeavesARequestWithNoLimit(t *testing.T) {
	r, err := Parse([]byte(`{"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	assert.Same(t, r, r.WithAnswerSent(5), "no limit of the caller's: none added")
	r, err = Parse([]byte(`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	assert.Same(t, r, r.WithAnswerSent(0), "nothing sent yet")
}

func TestAnswerLimitIsTheSmallestLimitTheCallerSet(t *testing.T) {
	for body, want := range map[string]int{
		`{"messages":[{"role":"user","content":"hi"}]}`:                                              0,
		`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`:                               8,
		`{"max_completion_tokens":8,"messages":[{"role":"user","content":"hi"}]}`:                    8,
		`{"max_tokens":100,"max_completion_tokens":20,"messages":[{"role":"user","content":"hi"}]}`:  20,
		`{"max_tokens":null,"max_completion_tokens":20,"messages":[{"role":"user","content":"hi"}]}`: 20,
	} {
		r, err := Parse([]byte(body))
		require.NoError(t, err)
		assert.Equal(t, want, r.AnswerLimit(), body)
	}
}

func TestWithoutUsageNullsTheUsageAndKeepsEveryOtherByte(t *testing.T) {
	in := []byte(`{"id":"x","choices":[{"index":0,"delta":{"content":"end"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)
	out, err := WithoutUsage(in)
	require.NoError(t, err)
	assert.Equal(t, `{"id":"x","choices":[{"index":0,"delta":{"content":"end"},"finish_reason":"stop"}],"usage":null}`, string(out))
	for _, same := range []string{`{"choices":[],"usage":null}`, `{"choices":[]}`} {
		out, err := WithoutUsage([]byte(same))
		require.NoError(t, err)
		assert.Equal(t, same, string(out), "no usage object: as it was")
	}
}

func TestWithUsageAddedAddsToEachCountAndKeepsTheDetails(t *testing.T) {
	in := []byte(`{"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,"prompt_tokens_details":{"cached_tokens":2}}}`)
	out, err := WithUsageAdded(in, Usage{PromptTokens: 100, CompletionTokens: 50, TotalTokens: 150})
	require.NoError(t, err)
	assert.Equal(t, `{"id":"x","choices":[],"usage":{"prompt_tokens":103,"completion_tokens":54,"total_tokens":157,"prompt_tokens_details":{"cached_tokens":2}}}`, string(out))
	for _, same := range []string{`{"choices":[],"usage":null}`, `{"choices":[]}`} {
		out, err := WithUsageAdded([]byte(same), Usage{PromptTokens: 1})
		require.NoError(t, err)
		assert.Equal(t, same, string(out), "no usage object: as it was")
	}
	out, err = WithUsageAdded(in, Usage{})
	require.NoError(t, err)
	assert.Equal(t, string(in), string(out), "nothing to add")
}
