package chatapi

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"

	"github.com/tidwall/gjson"
)

// PrefillStyle is how an OpenAI-compatible server is asked to continue an
// answer instead of starting a new one. The chat API has no standard way:
// each server family reads the trailing assistant message its own way.
type PrefillStyle string

// The styles WithPrefill knows.
const (
	// PrefillAssistant sends the answer so far as the last message, an
	// assistant's: servers that continue a trailing assistant message
	// (Anthropic's Messages API behind an adapter, llama.cpp, Ollama).
	PrefillAssistant PrefillStyle = "assistant"
	// PrefillVLLM adds vLLM's "continue_final_message": true and
	// "add_generation_prompt": false, without which vLLM opens a new
	// assistant turn after the prefill.
	PrefillVLLM PrefillStyle = "vllm"
	// PrefillPrefix marks the assistant message "prefix": true, as
	// Mistral's and DeepSeek's APIs ask.
	PrefillPrefix PrefillStyle = "prefix"
)

// ParsePrefillStyle reads a style by name.
func ParsePrefillStyle(s string) (PrefillStyle, error) {
	switch st := PrefillStyle(s); st {
	case PrefillAssistant, PrefillVLLM, PrefillPrefix:
		return st, nil
	}
	return "", fmt.Errorf("unknown prefill style %q (want assistant, vllm or prefix)", s)
}

// ErrNotContinuable: the request cannot be continued with a prefill — it
// already ends with an assistant message (the caller's own prefill), or the
// gateway could not find its messages' bytes.
var ErrNotContinuable = errors.New("chatapi: the request cannot be continued with a prefill")

// Continuable reports whether WithPrefill can continue the request: its
// last message is not an assistant's (a caller's own prefill, which a
// second one would contradict).
func (r *Request) Continuable() bool {
	return r.lastRole != "assistant" && r.messages.present() && r.raw[r.messages.at] == '[' && r.raw[r.messages.end-1] == ']'
}

// WithPrefill returns the request with the answer so far, text, appended
// as the last message, an assistant's, in style — asking an upstream for
// the rest of that answer. No other message is added or changed: no system
// prompt is injected. It does not change r.
func (r *Request) WithPrefill(text string, style PrefillStyle) (*Request, error) {
	if !r.Continuable() {
		return nil, ErrNotContinuable
	}
	if _, err := ParsePrefillStyle(string(style)); err != nil {
		return nil, err
	}
	msg := `,{"role":"assistant","content":` + string(marshal(text))
	if style == PrefillPrefix {
		msg += `,"prefix":true`
	}
	end := r.messages.end - 1
	edits := []edit{{span{end, end}, []byte(msg + "}")}}
	if style == PrefillVLLM {
		for _, k := range []string{"continue_final_message", "add_generation_prompt"} {
			if r.Get(k).Exists() {
				return nil, fmt.Errorf("%w: it sets %q itself", ErrNotContinuable, k)
			}
		}
		edits = append(edits, r.insert(`"continue_final_message":true,"add_generation_prompt":false,`))
	}
	out, err := Parse(splice(r.raw, edits))
	if err != nil {
		return nil, fmt.Errorf("chatapi: WithPrefill made an invalid request: %w", err)
	}
	return out, nil
}

// Piece is what a stream chunk adds to an answer, as a relay that may have
// to continue the answer elsewhere reads it.
type Piece struct {
	Text   string // the first choice's delta.content
	Other  bool   // anything besides text: tool calls, a refusal, reasoning, a second choice
	Finish string // the finish_reason, once one is set
	// Ended has a bit set for each choice (by index, the first 64) whose
	// finish_reason this chunk carries: an answer of n choices is whole
	// once n have ended.
	Ended uint64
	Usage *Usage
}

// ErrMalformedChunk: a stream event that is not a chunk object.
var ErrMalformedChunk = errors.New("chatapi: malformed stream chunk")

// ReadPiece reads a chat.completion.chunk. Strings JSON-escaped in
// unusual ways read as their text; anything that is not a JSON object is
// ErrMalformedChunk.
func ReadPiece(b []byte) (Piece, error) {
	p, _, ok, _ := readChunk("", b)
	if !ok {
		return Piece{}, ErrMalformedChunk
	}
	return p, nil
}

// ReadChunk reads one stream event in one pass, for a provider that relays
// it: the piece it adds to the answer and the model that sent it. ok is
// false when b is not a JSON object; err is an *UpstreamError (Status 0)
// when b is the error object some upstreams send in-band.
func ReadChunk(provider string, b []byte) (p Piece, model string, ok bool, err error) {
	return readChunk(provider, b)
}

func readChunk(provider string, b []byte) (p Piece, model string, ok bool, err error) {
	t, ok, err := readTop(provider, b, true)
	if !ok || err != nil {
		return Piece{}, "", ok, err
	}
	choices, usage := t.choices, t.usage
	choices.ForEach(func(i, c gjson.Result) bool {
		index := c.Get("index").Int()
		if i.Int() > 0 || index != 0 {
			p.Other = true // a second answer: continuation would need one prefill each
		}
		c.Get("delta").ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "role":
			case "content":
				if v.Type == gjson.String {
					p.Text += v.Str
				}
			default:
				p.Other = p.Other || said(v)
			}
			return true
		})
		if f := c.Get("finish_reason").Str; f != "" {
			p.Finish = cmp.Or(p.Finish, f)
			if index >= 0 && index < 64 {
				p.Ended |= 1 << index
			}
		}
		return true
	})
	if usage.IsObject() {
		p.Usage = readUsage(usage)
	}
	return p, t.model.Str, true, nil
}

// said reports whether a delta member says something: not null, "", [] or {}.
func said(v gjson.Result) bool {
	switch {
	case v.Type == gjson.Null, v.Type == gjson.String && v.Str == "":
		return false
	case v.IsArray():
		return len(v.Array()) > 0
	case v.IsObject():
		n := 0
		v.ForEach(func(_, _ gjson.Result) bool { n++; return false })
		return n > 0
	}
	return true
}

// WithDeltaText returns the chunk b with its first choice's delta.content
// replaced by text, every other byte as it was — for a relay that must
// drop the part of a continuation that repeats what the caller already
// has. b must be a chunk ReadPiece read, with a string delta.content.
func WithDeltaText(b []byte, text string) ([]byte, error) {
	v := gjson.GetBytes(b, "choices.0.delta.content")
	if v.Type != gjson.String || v.Index <= 0 || v.Index+len(v.Raw) > len(b) || string(b[v.Index:v.Index+len(v.Raw)]) != v.Raw {
		return nil, ErrMalformedChunk
	}
	quoted := marshal(text)
	out := make([]byte, 0, len(b)-len(v.Raw)+len(quoted))
	out = append(out, b[:v.Index]...)
	out = append(out, quoted...)
	return append(out, b[v.Index+len(v.Raw):]...), nil
}

// WithoutUsage returns the chunk b with its "usage" set to null, every
// other byte as it was — for a relay that tells the caller one usage for
// an answer several upstream calls wrote, and must not pass a call's own
// on. b itself when it carries no usage object.
func WithoutUsage(b []byte) ([]byte, error) {
	v := gjson.GetBytes(b, "usage")
	if !v.IsObject() {
		return b, nil
	}
	if v.Index <= 0 || v.Index+len(v.Raw) > len(b) || string(b[v.Index:v.Index+len(v.Raw)]) != v.Raw {
		return nil, ErrMalformedChunk
	}
	out := make([]byte, 0, len(b)-len(v.Raw)+4)
	out = append(out, b[:v.Index]...)
	out = append(out, "null"...)
	return append(out, b[v.Index+len(v.Raw):]...), nil
}

// WithUsageAdded returns b — a whole answer or a stream chunk — with extra
// added to each count of its usage object (prompt_tokens,
// completion_tokens, total_tokens), every other byte as it was, details
// inside the usage included: for a gateway that tells its caller the
// whole cost of an answer some calls before this one also cost. b itself
// when it carries no usage object, or extra is zero.
func WithUsageAdded(b []byte, extra Usage) ([]byte, error) {
	if extra == (Usage{}) || !gjson.GetBytes(b, "usage").IsObject() {
		return b, nil
	}
	var edits []edit
	for _, f := range []struct {
		path string
		add  int
	}{{"usage.prompt_tokens", extra.PromptTokens}, {"usage.completion_tokens", extra.CompletionTokens}, {"usage.total_tokens", extra.TotalTokens}} {
		v := gjson.GetBytes(b, f.path)
		switch {
		case !v.Exists():
			continue
		case v.Type != gjson.Number || v.Index <= 0 || v.Index+len(v.Raw) > len(b) || string(b[v.Index:v.Index+len(v.Raw)]) != v.Raw:
			return nil, fmt.Errorf("%w: %s is not a count the gateway can find", ErrMalformedChunk, f.path)
		}
		edits = append(edits, edit{span{v.Index, v.Index + len(v.Raw)}, []byte(strconv.FormatInt(v.Int()+int64(f.add), 10))})
	}
	return splice(b, edits), nil
}
