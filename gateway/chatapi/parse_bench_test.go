package chatapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// BenchmarkParse reads a real-shaped conversation: a system prompt, twenty
// turns of about 2 KB each, one message with an image part, tools and a
// response_format, about 45 KB in all. Parse reads each message's keys in
// one pass, so the time grows with the body's size once:
//
//	go test -run '^$' -bench Parse -benchmem ./gateway/chatapi/
func BenchmarkParse(b *testing.B) {
	turn := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 45)
	msgs := []any{map[string]any{"role": "system", "content": "You are terse."}}
	for i := range 20 {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]any{"role": role, "content": turn})
	}
	msgs = append(msgs, map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "What is in this picture?"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "https://example.com/cat.png"}},
	}})
	body, err := json.Marshal(map[string]any{
		"model": "auto", "messages": msgs, "max_tokens": 256, "temperature": 0.2,
		"tools":           []any{map[string]any{"type": "function", "function": map[string]any{"name": "lookup", "parameters": map[string]any{"type": "object"}}}},
		"response_format": map[string]any{"type": "json_object"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(body); err != nil {
			b.Fatal(err)
		}
	}
}
