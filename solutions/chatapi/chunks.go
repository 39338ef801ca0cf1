package chatapi

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/tidwall/gjson"
)

// ErrNotACompletion is returned by ChunksOf for bytes that are not a chat
// completion object.
var ErrNotACompletion = errors.New("chatapi: not a chat.completion object")

// ChunksOf turns a whole answer (a chat.completion object) into the stream
// an upstream would have sent for it: one chunk whose delta for each choice
// is that choice's message, with its finish_reason and logprobs, and — when
// the caller asked for usage and the answer has it — a last chunk with the
// usage and no choices. Every value is copied as it came (the message's
// tool calls, refusal and unknown fields included); only the wrapping
// changes.
func ChunksOf(completion []byte, includeUsage bool) ([][]byte, error) {
	if !gjson.ValidBytes(completion) {
		return nil, ErrNotACompletion
	}
	root := gjson.ParseBytes(completion)
	if !root.IsObject() || !root.Get("choices").IsArray() {
		return nil, ErrNotACompletion
	}
	type choice struct {
		Index        json.RawMessage `json:"index"`
		Delta        json.RawMessage `json:"delta"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason json.RawMessage `json:"finish_reason"`
	}
	type chunk struct {
		ID                string          `json:"id"`
		Object            string          `json:"object"`
		Created           int64           `json:"created"`
		Model             string          `json:"model"`
		SystemFingerprint json.RawMessage `json:"system_fingerprint,omitempty"`
		Choices           []choice        `json:"choices"`
		Usage             json.RawMessage `json:"usage,omitempty"`
	}
	head := chunk{ID: root.Get("id").Str, Object: "chat.completion.chunk", Created: root.Get("created").Int(),
		Model: root.Get("model").Str, SystemFingerprint: raw(root.Get("system_fingerprint")), Choices: []choice{}}
	body := head
	root.Get("choices").ForEach(func(i, c gjson.Result) bool {
		index := raw(c.Get("index"))
		if index == nil {
			index = json.RawMessage(i.Raw)
		}
		body.Choices = append(body.Choices, choice{Index: index, Delta: orEmpty(raw(c.Get("message"))),
			Logprobs: orNull(raw(c.Get("logprobs"))), FinishReason: orNull(raw(c.Get("finish_reason")))})
		return true
	})
	out := [][]byte{marshal(body)}
	if u := raw(root.Get("usage")); includeUsage && u != nil && string(u) != "null" {
		tail := head
		tail.Usage = u
		out = append(out, marshal(tail))
	}
	return out, nil
}

// raw is a gjson value's JSON text, or nil if it is absent.
func raw(r gjson.Result) json.RawMessage {
	if !r.Exists() {
		return nil
	}
	return json.RawMessage(r.Raw)
}

func orNull(m json.RawMessage) json.RawMessage {
	if m == nil {
		return json.RawMessage("null")
	}
	return m
}

func orEmpty(m json.RawMessage) json.RawMessage {
	if m == nil {
		return json.RawMessage("{}")
	}
	return m
}

// marshal encodes a chunk without HTML escaping: an answer is not HTML.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // plain structs and valid raw JSON always encode
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
