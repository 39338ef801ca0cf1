package chatapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/tidwall/gjson"
)

// ErrNotACompletion is returned by ChunksOf for bytes that are not a chat
// completion object.
var ErrNotACompletion = errors.New("chatapi: not a chat.completion object")

// ChunksOf turns a whole answer (a chat.completion object) into the stream
// an upstream would have sent for it: one chunk whose choices carry each
// message as their delta, and — when the caller asked for usage and the
// answer has it — a last chunk with the usage and no choices. Every other
// field, top-level or in a choice, is copied as it came and in its order
// (the message's tool calls and refusal, logprobs, system_fingerprint,
// service_tier, fields this code has never heard of); only the wrapping
// changes: "object" names a chunk, "message" becomes "delta", and each
// tool call gains the "index" every streamed tool call carries (the SDKs'
// stream accumulators key tool calls by it: without it, two calls would
// be read as one).
func ChunksOf(completion []byte, includeUsage bool) ([][]byte, error) {
	if !ValidJSON(completion) {
		return nil, ErrNotACompletion
	}
	root := gjson.ParseBytes(completion)
	if !root.IsObject() || !root.Get("choices").IsArray() {
		return nil, ErrNotACompletion
	}
	usage := root.Get("usage")
	body := rewrap(root, func(o *object, key string, v gjson.Result) {
		switch key {
		case "choices":
			o.add(key, deltas(v))
		case "usage": // it goes in a chunk of its own, as a stream sends it
		default:
			o.add(key, []byte(v.Raw))
		}
	})
	out := [][]byte{body}
	if includeUsage && usage.IsObject() {
		out = append(out, rewrap(root, func(o *object, key string, v gjson.Result) {
			switch key {
			case "choices":
				o.add(key, []byte("[]"))
			default:
				o.add(key, []byte(v.Raw))
			}
		}))
	}
	return out, nil
}

// rewrap writes root's fields again, in order, through field, with
// "object" naming a chunk.
func rewrap(root gjson.Result, field func(o *object, key string, v gjson.Result)) []byte {
	var o object
	root.ForEach(func(k, v gjson.Result) bool {
		if k.Str == "object" {
			o.add(k.Str, []byte(`"chat.completion.chunk"`))
		} else {
			field(&o, k.Str, v)
		}
		return true
	})
	return o.bytes()
}

// deltas is a completion's choices as a chunk's: each "message" becomes
// "delta", and a finish_reason is there, null if the choice had none.
func deltas(choices gjson.Result) []byte {
	var arr bytes.Buffer
	arr.WriteByte('[')
	choices.ForEach(func(i, c gjson.Result) bool {
		if arr.Len() > 1 {
			arr.WriteByte(',')
		}
		var o object
		c.ForEach(func(k, v gjson.Result) bool {
			if k.Str == "message" {
				o.add("delta", delta(v))
			} else {
				o.add(k.Str, []byte(v.Raw))
			}
			return true
		})
		if !c.Get("message").Exists() {
			o.add("delta", []byte("{}"))
		}
		if !c.Get("finish_reason").Exists() {
			o.add("finish_reason", []byte("null"))
		}
		arr.Write(o.bytes())
		return true
	})
	arr.WriteByte(']')
	return arr.Bytes()
}

// delta is a message as a chunk's delta: as it came, but for an "index"
// on each tool call that has none.
func delta(message gjson.Result) []byte {
	calls := message.Get("tool_calls")
	if !message.IsObject() || !calls.IsArray() {
		return []byte(message.Raw)
	}
	var o object
	message.ForEach(func(k, v gjson.Result) bool {
		if k.Str != "tool_calls" {
			o.add(k.Str, []byte(v.Raw))
			return true
		}
		var arr bytes.Buffer
		arr.WriteByte('[')
		i := 0
		v.ForEach(func(_, call gjson.Result) bool {
			if i > 0 {
				arr.WriteByte(',')
			}
			arr.Write(indexed(call, i))
			i++
			return true
		})
		arr.WriteByte(']')
		o.add(k.Str, arr.Bytes())
		return true
	})
	return o.bytes()
}

// indexed is a tool call with "index" first, unless it has one.
func indexed(call gjson.Result, i int) []byte {
	if !call.IsObject() || call.Get("index").Exists() {
		return []byte(call.Raw)
	}
	var o object
	o.add("index", []byte(strconv.Itoa(i)))
	call.ForEach(func(k, v gjson.Result) bool {
		o.add(k.Str, []byte(v.Raw))
		return true
	})
	return o.bytes()
}

// object writes a JSON object of raw values, in the order they are added.
type object struct{ buf bytes.Buffer }

func (o *object) add(key string, raw []byte) {
	if o.buf.Len() == 0 {
		o.buf.WriteByte('{')
	} else {
		o.buf.WriteByte(',')
	}
	k, _ := json.Marshal(key) // a string always marshals
	o.buf.Write(k)
	o.buf.WriteByte(':')
	o.buf.Write(raw)
}

func (o *object) bytes() []byte {
	if o.buf.Len() == 0 {
		return []byte("{}")
	}
	o.buf.WriteByte('}')
	return o.buf.Bytes()
}
