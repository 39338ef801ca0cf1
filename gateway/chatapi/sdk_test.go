//go:build sdk

package chatapi

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTheOfficialSDKReadsAWholeAnswerStreamedAsItsOwn: a whole answer
// streamed by ChunksOf, fed chunk by chunk to the official Go SDK's stream
// accumulator, comes out as the answer it was — parallel tool calls kept
// apart, usage included (make test-sdk).
func TestTheOfficialSDKReadsAWholeAnswerStreamedAsItsOwn(t *testing.T) {
	whole, err := os.ReadFile("testdata/answers/parallel-tool-calls.json")
	require.NoError(t, err)
	chunks, err := ChunksOf(whole, true)
	require.NoError(t, err)
	var acc openai.ChatCompletionAccumulator
	for _, c := range chunks {
		var chunk openai.ChatCompletionChunk
		require.NoError(t, json.Unmarshal(c, &chunk))
		require.True(t, acc.AddChunk(chunk), "the SDK accepts the chunk: %s", c)
	}
	var want openai.ChatCompletion
	require.NoError(t, json.Unmarshal(whole, &want))
	require.Len(t, acc.Choices, 1)
	got := acc.Choices[0].Message.ToolCalls
	require.Len(t, got, 2, "two tool calls stay two")
	for i, call := range want.Choices[0].Message.ToolCalls {
		assert.Equal(t, call.ID, got[i].ID)
		assert.Equal(t, call.Function.Name, got[i].Function.Name)
		assert.Equal(t, call.Function.Arguments, got[i].Function.Arguments)
	}
	assert.Equal(t, "tool_calls", acc.Choices[0].FinishReason)
	assert.Equal(t, want.Usage.TotalTokens, acc.Usage.TotalTokens)
}
