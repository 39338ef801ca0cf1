//go:build sdk

package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOpenAISDKTalksToTheGateway uses the official OpenAI Go SDK as the
// client, the way a user would point an existing application at the gateway.
func TestOpenAISDKTalksToTheGateway(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-rate=1000", "-burst=1000",
		"-provider", "name=alpha,latency=5ms,chunk-delay=1ms", "-provider", "name=beta,latency=5ms,chunk-delay=1ms")
	client := openai.NewClient(
		option.WithBaseURL(a.url+"/v1/"),
		option.WithAPIKey("not-needed-by-production_app"),
		option.WithHeader("X-Tenant-ID", "sdk-test"),
		option.WithMaxRetries(0),
	)
	ctx := context.Background()
	params := openai.ChatCompletionNewParams{
		Model:    "auto",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("what is a circuit breaker")},
	}

	t.Run("non-streaming", func(t *testing.T) {
		resp, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err)
		require.Len(t, resp.Choices, 1)
		assert.Contains(t, resp.Choices[0].Message.Content, "[alpha]")
		assert.Equal(t, "alpha-1", resp.Model)
		assert.Positive(t, resp.Usage.TotalTokens)
	})

	t.Run("streaming", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var text strings.Builder
		chunks := 0
		for stream.Next() {
			chunks++
			for _, c := range stream.Current().Choices {
				text.WriteString(c.Delta.Content)
			}
		}
		require.NoError(t, stream.Err())
		assert.Greater(t, chunks, 3)
		assert.Contains(t, text.String(), "[alpha] You asked about:")
	})

	t.Run("pinned model and errors", func(t *testing.T) {
		pinned := params
		pinned.Model = "beta"
		resp, err := client.Chat.Completions.New(ctx, pinned)
		require.NoError(t, err)
		assert.Equal(t, "beta-1", resp.Model)

		bad := params
		bad.Model = "no-such-model"
		_, err = client.Chat.Completions.New(ctx, bad)
		var apiErr *openai.Error
		require.True(t, errors.As(err, &apiErr), "the SDK parses the gateway's errors: %v", err)
		assert.Equal(t, http.StatusNotFound, apiErr.StatusCode, "an unknown model is a 404, as OpenAI answers it")
		assert.Equal(t, "model_not_found", apiErr.Code)
	})

	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		require.NoError(t, err)
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		assert.Equal(t, []string{"auto", "alpha", "beta"}, ids)
	})
}
