package chatapi

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/tidwall/gjson"
)

// Usage is an answer's token accounting.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Answer is what the gateway reads of an upstream's answer: a whole
// completion or one streamed chunk.
type Answer struct {
	Model string
	// Text is the first choice's message.content (or delta.content in a chunk).
	Text string
	// FinishReason is the first choice's finish_reason that is not null.
	FinishReason string
	Usage        *Usage
}

// ReadAnswer picks the gateway's fields out of an answer. ok is false when
// b is not a JSON object; err is an *UpstreamError (Status 0) when b is an
// error object — some upstreams answer 200 or send a stream event with one.
func ReadAnswer(provider string, b []byte) (a Answer, ok bool, err error) {
	return readAnswer(provider, b, true)
}

// ReadAnswerHead is ReadAnswer without the choices: the model and the
// usage, and the same ok and err. A provider that returns a whole answer
// as it came needs no more of it, and skipping the choices skips the
// answer's text.
func ReadAnswerHead(provider string, b []byte) (a Answer, ok bool, err error) {
	return readAnswer(provider, b, false)
}

func readAnswer(provider string, b []byte, choicesToo bool) (a Answer, ok bool, err error) {
	top, ok, err := readTop(provider, b, choicesToo)
	if !ok || err != nil {
		return Answer{}, ok, err
	}
	model, choices, usage := top.model, top.choices, top.usage
	a.Model = model.Str
	choices.ForEach(func(_, c gjson.Result) bool {
		if a.Text == "" {
			if t := c.Get("message.content"); t.Type == gjson.String {
				a.Text = t.Str
			} else {
				a.Text = c.Get("delta.content").Str
			}
		}
		if a.FinishReason == "" {
			a.FinishReason = c.Get("finish_reason").Str
		}
		return true
	})
	if usage.IsObject() {
		a.Usage = readUsage(usage)
	}
	return a, true, nil
}

// top is what the gateway reads of an answer's or a chunk's top level.
type top struct{ model, choices, usage gjson.Result }

// readTop reads b's top level in one pass (a Get per field would scan it
// from the start each time); the first of a repeated key wins, as with
// Get. ok is false when b is not a JSON object; err is an *UpstreamError
// when b is an error object. Without choicesToo the choices are skipped.
func readTop(provider string, b []byte, choicesToo bool) (t top, ok bool, err error) {
	if !ValidJSON(b) {
		return top{}, false, nil
	}
	root := gjson.ParseBytes(b)
	if !root.IsObject() {
		return top{}, false, nil
	}
	var errObj gjson.Result
	root.ForEach(func(k, v gjson.Result) bool {
		var slot *gjson.Result
		switch k.Str {
		case "error":
			slot = &errObj
		case "model":
			slot = &t.model
		case "choices":
			if !choicesToo {
				return true
			}
			slot = &t.choices
		case "usage":
			slot = &t.usage
		default:
			return true
		}
		if !slot.Exists() {
			*slot = v
		}
		return true
	})
	if errObj.IsObject() {
		ue := &UpstreamError{Provider: provider}
		ue.readObject(errObj)
		return top{}, true, ue
	}
	return t, true, nil
}

// readUsage reads a usage object in one pass; the first of a repeated key
// wins.
func readUsage(u gjson.Result) *Usage {
	var prompt, completion, total gjson.Result
	u.ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Str == "prompt_tokens" && !prompt.Exists():
			prompt = v
		case k.Str == "completion_tokens" && !completion.Exists():
			completion = v
		case k.Str == "total_tokens" && !total.Exists():
			total = v
		}
		return true
	})
	return &Usage{PromptTokens: int(prompt.Int()), CompletionTokens: int(completion.Int()), TotalTokens: int(total.Int())}
}

// ToolCall is one function call in an answer. Index is set in stream chunks.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is a tool call's function name and JSON arguments.
type FunctionCall struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// Frame writes the answers of a provider that answers in text (the
// simulated ones) in the same shape an OpenAI-compatible upstream would:
// one id, one creation time and one model for every chunk of an answer.
type Frame struct {
	ID      string
	Created int64
	Model   string
}

// NewFrame starts an answer from model with a fresh id.
func NewFrame(model string) Frame {
	return Frame{ID: "chatcmpl-" + NewID(), Created: time.Now().Unix(), Model: model}
}

type message struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Delta is one streamed piece of an answer.
type Delta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

type choice struct {
	Index        int       `json:"index"`
	Message      *message  `json:"message,omitempty"`
	Delta        *Delta    `json:"delta,omitempty"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
}

type answer struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

// Completion is a whole answer (object "chat.completion"). With tool calls
// the content is null and finish is usually "tool_calls".
func (f Frame) Completion(text string, calls []ToolCall, finish string, u *Usage) []byte {
	m := &message{Role: "assistant", ToolCalls: calls}
	if len(calls) == 0 {
		m.Content = &text
	}
	return f.marshal(answer{Object: "chat.completion", Choices: []choice{{Message: m, FinishReason: &finish}}, Usage: u})
}

// Chunk is one stream chunk (object "chat.completion.chunk"): a delta,
// with finish set on the last one.
func (f Frame) Chunk(d Delta, finish string) []byte {
	c := choice{Delta: &d}
	if finish != "" {
		c.FinishReason = &finish
	}
	return f.marshal(answer{Object: "chat.completion.chunk", Choices: []choice{c}})
}

// UsageChunk is the chunk a stream ends with when the caller asked for
// stream_options.include_usage: no choices, only the usage.
func (f Frame) UsageChunk(u Usage) []byte {
	return f.marshal(answer{Object: "chat.completion.chunk", Choices: []choice{}, Usage: &u})
}

func (f Frame) marshal(a answer) []byte {
	a.ID, a.Created, a.Model = f.ID, f.Created, f.Model
	return marshal(a)
}

// NewID is 24 random hex characters, for answer and request ids.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// marshal encodes v without HTML escaping: an answer is not HTML.
func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // plain structs always encode
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}
