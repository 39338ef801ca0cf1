package sim

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/tidwall/gjson"
)

// simAnswer is what a simulated call answers: words of text, or tool calls.
type simAnswer struct {
	model        string
	words        []string
	calls        []chatapi.ToolCall
	promptTokens int
	cut          bool // the stream drops halfway (KindCut)
	continued    bool // the words continue a prefill
}

func (a simAnswer) text() string { return strings.Join(a.words, " ") }

func (a simAnswer) finish() string {
	if len(a.calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// usage counts words as tokens: the simulation has no tokenizer.
func (a simAnswer) usage() llm.Usage {
	completion := len(a.words)
	for _, c := range a.calls {
		completion += len(strings.Fields(c.Function.Arguments)) + 1
	}
	return llm.Usage{PromptTokens: a.promptTokens, CompletionTokens: completion, TotalTokens: a.promptTokens + completion}
}

// compose is the deterministic answer to a request, so tests and demos can
// check it: a tool call if the request offers tools and the conversation
// does not end with a tool's result; JSON if response_format asks for it;
// otherwise a sentence that quotes the prompt.
func compose(name, model string, req llm.Request) simAnswer {
	prompt := req.Chat.Text()
	if prefill, ok := prefillOf(req.Chat); ok {
		prompt = strings.TrimSuffix(strings.TrimSuffix(prompt, prefill), "\n")
		a := simAnswer{model: model, promptTokens: len(strings.Fields(prompt)) + len(strings.Fields(prefill)), continued: true}
		words := strings.Fields(sentence(name, prompt))
		a.words = words[min(len(strings.Fields(prefill)), len(words)):]
		return a
	}
	a := simAnswer{model: model, promptTokens: len(strings.Fields(prompt))}
	if call, ok := toolCall(req.Chat); ok {
		a.calls = []chatapi.ToolCall{call}
		return a
	}
	if text, ok := structured(req.Chat, name, prompt); ok {
		a.words = strings.Fields(text)
		return a
	}
	a.words = strings.Fields(sentence(name, prompt))
	return a
}

// prefillOf is the text of a last message that is an assistant's: a
// prefill the upstream is asked to continue.
func prefillOf(chat *chatapi.Request) (string, bool) {
	msgs := chat.Get("messages").Array()
	last := msgs[len(msgs)-1]
	if last.Get("role").Str != "assistant" || last.Get("content").Type != gjson.String {
		return "", false
	}
	return last.Get("content").Str, true
}

func sentence(name, prompt string) string {
	words := strings.Fields(prompt)
	if len(words) > 12 {
		words = words[:12]
	}
	return fmt.Sprintf("[%s] You asked about: %s. Here is a simulated answer of %d words.", name, strings.Join(words, " "), len(words)+9)
}

// toolCall calls the tool tool_choice names, else the first one, with
// arguments that satisfy its parameters' required fields — unless
// tool_choice is "none" or the last message is a tool's result (then the
// model answers in text, as a real one would after using a tool).
func toolCall(chat *chatapi.Request) (chatapi.ToolCall, bool) {
	tools := chat.Get("tools")
	if !tools.IsArray() || len(tools.Array()) == 0 || chat.Get("tool_choice").Str == "none" {
		return chatapi.ToolCall{}, false
	}
	msgs := chat.Get("messages").Array()
	if last := msgs[len(msgs)-1].Get("role").Str; last == "tool" || last == "function" {
		return chatapi.ToolCall{}, false
	}
	fn := tools.Array()[0].Get("function")
	if want := chat.Get("tool_choice.function.name"); want.Exists() {
		for _, t := range tools.Array() {
			if t.Get("function.name").Str == want.Str {
				fn = t.Get("function")
			}
		}
	}
	args, _ := json.Marshal(instance(fn.Get("parameters"), 0))
	return chatapi.ToolCall{Index: new(int), ID: "call_" + chatapi.NewID(), Type: "function",
		Function: chatapi.FunctionCall{Name: fn.Get("name").Str, Arguments: string(args)}}, true
}

// structured answers JSON when response_format is json_object or
// json_schema: an instance of the schema, or {"answer": …}.
func structured(chat *chatapi.Request, name, prompt string) (string, bool) {
	rf := chat.Get("response_format")
	var v any
	switch rf.Get("type").Str {
	case "json_schema":
		v = instance(rf.Get("json_schema.schema"), 0)
	case "json_object":
		v = map[string]string{"answer": sentence(name, prompt)}
	default:
		return "", false
	}
	b, _ := json.Marshal(v)
	return string(b), true
}

// instance builds the smallest value that satisfies a JSON schema's type,
// enum and required properties — enough for a client that parses it.
func instance(schema gjson.Result, depth int) any {
	if depth > 8 {
		return nil
	}
	if e := schema.Get("enum"); e.IsArray() && len(e.Array()) > 0 {
		return e.Array()[0].Value()
	}
	for _, alt := range []string{"anyOf", "oneOf"} {
		if a := schema.Get(alt); a.IsArray() && len(a.Array()) > 0 && !schema.Get("type").Exists() {
			return instance(a.Array()[0], depth+1)
		}
	}
	typ := schema.Get("type")
	if typ.IsArray() { // ["string", "null"]: the first that names a type
		first := gjson.Result{}
		for _, t := range typ.Array() {
			if t.Type == gjson.String {
				first = t
				break
			}
		}
		typ = first
	}
	switch typ.Str {
	case "string":
		return "simulated"
	case "integer", "number":
		return schema.Get("minimum").Num
	case "boolean":
		return false
	case "array":
		return []any{}
	case "null":
		return nil
	}
	obj := map[string]any{}
	props := schema.Get("properties")
	schema.Get("required").ForEach(func(_, name gjson.Result) bool {
		obj[name.Str] = instance(props.Get(gjson.Escape(name.Str)), depth+1)
		return true
	})
	return obj
}
