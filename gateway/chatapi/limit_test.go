package chatapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWithAnswerLimitLowersOnlyTheLimitsTheCallerSet(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, `{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{`{"max_completion_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, `{"max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{`{"max_tokens":8,"max_completion_tokens":12,"messages":[{"role":"user","content":"hi"}]}`, `{"max_tokens":5,"max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		{`{"max_tokens":null,"max_completion_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, `{"max_tokens":null,"max_completion_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		r, err := Parse([]byte(tc.body))
		require.NoError(t, err)
		out := r.WithAnswerLimit(5)
		assert.JSONEq(t, tc.want, string(out.Body()), tc.body)
		assert.Equal(t, 5, out.MaxTokens, tc.body)
		assert.JSONEq(t, tc.body, string(r.Body()), "the request it was made from is unchanged")
	}
}

func TestWithAnswerLimitLeavesARequestItCannotLower(t *testing.T) {
	for _, tc := range []struct {
		body string
		n    int
	}{
		{`{"messages":[{"role":"user","content":"hi"}]}`, 5},                 // no limit of the caller's: none added
		{`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 8},  // not below it
		{`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 9},  // above it
		{`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, 0},  // nothing to ask for
		{`{"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`, -1}, // nor less
	} {
		r, err := Parse([]byte(tc.body))
		require.NoError(t, err)
		assert.Same(t, r, r.WithAnswerLimit(tc.n), "%s, %d", tc.body, tc.n)
	}
}
