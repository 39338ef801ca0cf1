//go:build sdk

package main

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenAISDKWithTheTokenAsItsAPIKey is how a team's existing client talks
// to secure_app: the token goes where the API key went, and the SDK sends it
// as "Authorization: Bearer".
func TestOpenAISDKWithTheTokenAsItsAPIKey(t *testing.T) {
	in := start(t, prefix(t))
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{Model: "auto", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}}

	client := openai.NewClient(option.WithBaseURL(in.url+"/v1/"), option.WithAPIKey(token(t, "sdk-co", "pro", time.Hour)), option.WithMaxRetries(0))
	resp, err := client.Chat.Completions.New(ctx, params)
	require.NoError(t, err)
	assert.NotEmpty(t, resp.Choices[0].Message.Content)

	stream := client.Chat.Completions.NewStreaming(ctx, params)
	chunks := 0
	for stream.Next() {
		chunks++
	}
	require.NoError(t, stream.Err())
	assert.Positive(t, chunks)

	bad := openai.NewClient(option.WithBaseURL(in.url+"/v1/"), option.WithAPIKey("sk-not-a-token"), option.WithMaxRetries(0))
	_, err = bad.Chat.Completions.New(ctx, params)
	var apiErr *openai.Error
	require.True(t, errors.As(err, &apiErr), "the SDK parses the refusal: %v", err)
	assert.Equal(t, http.StatusUnauthorized, apiErr.StatusCode)
	assert.Equal(t, "invalid_token", apiErr.Code)
}
