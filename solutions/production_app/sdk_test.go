//go:build sdk

package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
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

// TestOpenAISDKToolLoopAndStructuredOutput runs what agents and extraction
// jobs send through the gateway with the SDK: a tool call answered with a
// tool result, streamed tool calls, and a json_schema response format —
// against `make run`'s simulated providers, which speak the same format.
func TestOpenAISDKToolLoopAndStructuredOutput(t *testing.T) {
	a := start(t, "-readiness-delay=0", "-rate=1000", "-burst=1000", "-provider", "name=alpha,latency=2ms,chunk-delay=1ms")
	client := openai.NewClient(option.WithBaseURL(a.url+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	ctx := context.Background()
	weather := openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "get_weather",
		Parameters: shared.FunctionParameters{
			"type":       "object",
			"properties": map[string]any{"city": map[string]any{"type": "string"}, "unit": map[string]any{"type": "string", "enum": []string{"celsius", "fahrenheit"}}},
			"required":   []string{"city", "unit"},
		},
	})
	params := openai.ChatCompletionNewParams{
		Model:    "auto",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("weather in Oslo?")},
		Tools:    []openai.ChatCompletionToolUnionParam{weather},
	}

	t.Run("tool round trip", func(t *testing.T) {
		first, err := client.Chat.Completions.New(ctx, params)
		require.NoError(t, err)
		require.Len(t, first.Choices, 1)
		assert.Equal(t, "tool_calls", first.Choices[0].FinishReason)
		calls := first.Choices[0].Message.ToolCalls
		require.Len(t, calls, 1, "offered a tool, the model calls it")
		assert.Equal(t, "get_weather", calls[0].Function.Name)
		var args map[string]any
		require.NoError(t, json.Unmarshal([]byte(calls[0].Function.Arguments), &args))
		assert.Contains(t, args, "city", "the arguments satisfy the tool's required parameters")
		assert.Equal(t, "celsius", args["unit"])

		next := params
		next.Messages = append(next.Messages, first.Choices[0].Message.ToParam(), openai.ToolMessage(`{"temp": 3}`, calls[0].ID))
		second, err := client.Chat.Completions.New(ctx, next)
		require.NoError(t, err)
		assert.Equal(t, "stop", second.Choices[0].FinishReason, "after the tool's result the model answers in text")
		assert.NotEmpty(t, second.Choices[0].Message.Content)
	})

	t.Run("streamed tool call", func(t *testing.T) {
		stream := client.Chat.Completions.NewStreaming(ctx, params)
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			acc.AddChunk(stream.Current())
		}
		require.NoError(t, stream.Err())
		require.Len(t, acc.Choices, 1)
		require.Len(t, acc.Choices[0].Message.ToolCalls, 1)
		assert.Equal(t, "get_weather", acc.Choices[0].Message.ToolCalls[0].Function.Name)
	})

	t.Run("json schema", func(t *testing.T) {
		structured := openai.ChatCompletionNewParams{
			Model:    "auto",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("lunch with Bo on Friday")},
			ResponseFormat: openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
				JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "event", Strict: openai.Bool(true), Schema: map[string]any{
					"type":       "object",
					"properties": map[string]any{"title": map[string]any{"type": "string"}, "hour": map[string]any{"type": "integer"}},
					"required":   []string{"title", "hour"},
				}},
			}},
		}
		resp, err := client.Chat.Completions.New(ctx, structured)
		require.NoError(t, err)
		var event struct {
			Title string `json:"title"`
			Hour  *int   `json:"hour"`
		}
		require.NoError(t, json.Unmarshal([]byte(resp.Choices[0].Message.Content), &event), "the answer is JSON: %s", resp.Choices[0].Message.Content)
		assert.NotEmpty(t, event.Title)
		assert.NotNil(t, event.Hour)
	})
}
