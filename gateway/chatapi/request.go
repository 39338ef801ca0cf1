// Package chatapi is the OpenAI chat-completions wire format, as much of it
// as a gateway needs — and no more.
//
// A gateway must not change what its caller asked for. So a request is
// parsed only for the fields the gateway acts on (model, the shape of the
// messages, stream and stream_options, the token limit), strictly and with
// errors that name the field, and the caller's own bytes are what goes
// upstream: every other field — tools, response_format, seed, logprobs,
// fields that do not exist yet — passes through untouched. Only "model" is
// rewritten, to the route target's upstream model, by splicing the bytes
// rather than re-encoding the body. Answers are read the same way: the few
// fields the gateway counts (model, usage, finish_reason, the first
// choice's text) are picked out, and the bytes go back to the caller as
// they came.
//
// It is the one home of the format in this repository: the gateway's HTTP
// layer, the providers and the mock upstream all parse, frame and write
// through it — requests (Parse, WithModel), answers (ReadAnswer, Frame,
// ChunksOf), errors in OpenAI's shape with their headers (Error,
// WriteError, UpstreamError) and server-sent event streams (EventStream,
// ReadEvents).
//
// Parsing uses github.com/tidwall/gjson: it finds a field's value and its
// byte offset in one pass without decoding the rest, which is exactly the
// "decode what you need, keep the rest raw" a proxy wants; encoding/json
// would either drop unknown fields or decode everything into maps.
package chatapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// Request is a chat-completion request as its caller sent it.
type Request struct {
	raw            []byte
	model, stream  span // the "model" and "stream" values in raw
	streamOptions  span // the whole "stream_options" member, key to value
	maxCompletion  span // the "max_completion_tokens" value in raw
	maxTokens      span // the "max_tokens" value in raw
	maxTokensN     int  // its count, 0 if unset or null
	maxCompletionN int  // "max_completion_tokens"'s
	optionsValue   span // the "stream_options" value in raw
	includeUsage   span // the "stream_options.include_usage" value in raw
	messages       span // the "messages" value in raw
	lastRole       string

	// Model is the public model name the caller asked for ("" if none).
	Model string
	// Stream is the caller's "stream".
	Stream bool
	// IncludeUsage is the caller's "stream_options.include_usage".
	IncludeUsage bool
	// MaxTokens is the larger of "max_completion_tokens" and "max_tokens"
	// (an upstream may honour either); 0 if neither.
	MaxTokens int
	// Choices is "n", how many answers the caller asked for; 0 if unset
	// (one). Each may be up to MaxTokens long.
	Choices int
	// Messages is how many messages the request holds (at least one).
	Messages int
	// MediaParts is how many content parts are not text (images, audio,
	// files): what they cost in tokens their bytes here do not show.
	MediaParts int
}

// The roles a message may have. "function" is deprecated but still sent by
// older clients, so it is accepted.
var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true, "function": true}

// The fields the gateway reads. A second occurrence of one is refused: if
// the gateway honoured the first and the upstream the last, the two would
// disagree about what was asked (say, which model).
var readFields = map[string]bool{
	"model": true, "messages": true, "stream": true, "stream_options": true,
	"max_tokens": true, "max_completion_tokens": true, "n": true,
}

// caseVariant refuses a key that is one of the fields the gateway reads
// but for its letters' case ("MODEL", "Max_Tokens", or with a Kelvin sign
// for a k). The gateway reads keys exactly; an upstream written in Go
// decodes them case-insensitively, the last one winning — so
// {"model":"auto","MODEL":"gpt-x"} would pass the gateway's policy as auto
// and reach the upstream as gpt-x.
func caseVariant(key string) error {
	for field := range readFields {
		if strings.EqualFold(key, field) {
			return invalid(key, InvalidField, fmt.Sprintf("%q is %q in another case; send the field once, as %q", key, field, field))
		}
	}
	return nil
}

// Parse checks body and returns the request it holds. The Request keeps
// body (it does not copy it): the caller must not change it afterwards.
// Every error is an *Error with Status 400 that names the field.
func Parse(body []byte) (*Request, error) {
	if err := valid(body); err != nil {
		return nil, err
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, invalid("", InvalidType, "the request body must be a JSON object")
	}
	r := &Request{raw: body, model: absent, stream: absent, streamOptions: absent, maxCompletion: absent, maxTokens: absent, optionsValue: absent, includeUsage: absent}
	seen := make(map[string]bool, len(readFields))
	var err error
	root.ForEach(func(key, value gjson.Result) bool {
		if !readFields[key.Str] {
			err = caseVariant(key.Str)
			return err == nil
		}
		if seen[key.Str] {
			err = invalid(key.Str, DuplicateField, fmt.Sprintf("%q appears more than once", key.Str))
			return false
		}
		seen[key.Str] = true
		err = r.read(key, value)
		return err == nil
	})
	if err != nil {
		return nil, err
	}
	if !seen["messages"] {
		return nil, invalid("messages", MissingParameter, "messages is required")
	}
	return r, nil
}

// read checks one field the gateway acts on and keeps its value.
func (r *Request) read(key, v gjson.Result) error {
	switch name := key.Str; name {
	case "model":
		if v.Type != gjson.String {
			return invalid(name, InvalidType, "model must be a string")
		}
		r.Model, r.model = v.Str, valueSpan(v)
	case "messages":
		r.messages = valueSpan(v)
		return r.readMessages(v)
	case "stream":
		b, err := optionalBool(name, v)
		r.Stream, r.stream = b, valueSpan(v)
		return err
	case "stream_options":
		r.streamOptions = span{at: key.Index, end: v.Index + len(v.Raw)}
		r.optionsValue = valueSpan(v)
		if v.Type == gjson.Null {
			return nil
		}
		if !v.IsObject() {
			return invalid(name, InvalidType, "stream_options must be an object")
		}
		if keys := scanKeys(v, "include_usage"); keys.dup != "" || keys.variant != "" {
			return invalid("stream_options.include_usage", DuplicateField, "stream_options.include_usage appears more than once")
		}
		u := v.Get("include_usage")
		if u.Exists() {
			r.includeUsage = valueSpan(u) // gjson gives a nested value's index in the whole body
			if u.Index <= 0 || !bytes.Equal(r.raw[r.includeUsage.at:min(r.includeUsage.end, len(r.raw))], []byte(u.Raw)) {
				r.includeUsage = unlocated // not where gjson says (it cannot always tell): never edit blind
			}
		}
		b, err := optionalBool("stream_options.include_usage", u)
		r.IncludeUsage = b
		return err
	case "max_tokens", "max_completion_tokens":
		n, err := optionalCount(name, v)
		if name == "max_completion_tokens" {
			r.maxCompletion, r.maxCompletionN = valueSpan(v), n
		} else {
			r.maxTokens, r.maxTokensN = valueSpan(v), n
		}
		r.MaxTokens = max(r.MaxTokens, n)
		return err
	case "n":
		n, err := optionalCount(name, v)
		r.Choices = n
		return err
	}
	return nil
}

// readMessages checks the shape the gateway relies on: a non-empty array of
// objects, each with a known role and a content that is a string, an array
// of parts, null or absent (an assistant message with tool_calls). What is
// inside the parts is the upstream's business.
func (r *Request) readMessages(v gjson.Result) error {
	if !v.IsArray() {
		return invalid("messages", InvalidType, "messages must be an array of message objects")
	}
	var err error
	i := 0
	v.ForEach(func(_, m gjson.Result) bool {
		var content gjson.Result
		r.lastRole, content, err = readMessage(i, m)
		i++
		if err == nil && content.IsArray() {
			j := 0
			content.ForEach(func(_, part gjson.Result) bool {
				keys := scanKeys(part, "type")
				if keys.dup != "" || keys.variant != "" {
					field := fmt.Sprintf("messages[%d].content[%d].type", i-1, j)
					err = invalid(field, DuplicateField, field+" appears more than once") // read as text here, as an image upstream
					return false
				}
				if keys.val[0].Str != "text" {
					r.MediaParts++
				}
				j++
				return true
			})
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if i == 0 {
		return invalid("messages", InvalidValue, "messages must contain at least one message")
	}
	r.Messages = i
	return nil
}

func readMessage(i int, m gjson.Result) (role string, content gjson.Result, _ error) {
	field := func(name string) string { return fmt.Sprintf("messages[%d]%s", i, name) }
	if !m.IsObject() {
		return "", content, invalid(field(""), InvalidType, field("")+" must be an object")
	}
	keys := scanKeys(m, "role", "content")
	if keys.dup != "" {
		return "", content, invalid(field("."+keys.dup), DuplicateField, fmt.Sprintf("%s appears more than once", field("."+keys.dup)))
	}
	if keys.variant != "" { // "Role": "system" beside "role": "user", read by a Go upstream as system
		return "", content, invalid(field("."+keys.variant), DuplicateField, fmt.Sprintf("%s appears more than once, in another case", field("."+keys.variant)))
	}
	r, c := keys.val[0], keys.val[1]
	switch {
	case !r.Exists():
		return "", c, invalid(field(".role"), MissingParameter, field(".role")+" is required")
	case r.Type != gjson.String:
		return "", c, invalid(field(".role"), InvalidType, field(".role")+" must be a string")
	case !roles[r.Str]:
		return r.Str, c, invalid(field(".role"), InvalidValue,
			fmt.Sprintf("%s %q is not one of system, developer, user, assistant, tool, function", field(".role"), r.Str))
	}
	switch {
	case !c.Exists(), c.Type == gjson.Null, c.Type == gjson.String, c.IsArray():
	default:
		return r.Str, c, invalid(field(".content"), InvalidType, field(".content")+" must be a string, an array of content parts, or null")
	}
	return r.Str, c, nil
}

// keyScan is what one pass over an object's keys found of up to two names.
type keyScan struct {
	val     [2]gjson.Result // the first value of each name (absent: not there)
	dup     string          // the first name whose key came a second time, in key order; ""
	variant string          // the first name, in the order given, with a key that is it in another case; ""
}

// scanKeys reads obj's keys once for up to two names: a message's role and
// content are read, checked for repeats and checked for case variants in
// the same pass, so a long message is skipped over once, not six times. A
// value that is not an object has no keys.
func scanKeys(obj gjson.Result, names ...string) keyScan {
	var (
		ks      keyScan
		seen    [2]bool
		variant [2]bool
	)
	if !obj.IsObject() {
		return ks
	}
	obj.ForEach(func(k, v gjson.Result) bool {
		for n, name := range names {
			switch {
			case k.Str == name && seen[n]:
				if ks.dup == "" {
					ks.dup = name
				}
			case k.Str == name:
				seen[n], ks.val[n] = true, v
			case strings.EqualFold(k.Str, name):
				variant[n] = true
			}
		}
		return true
	})
	for n, name := range names {
		if variant[n] {
			ks.variant = name
			break
		}
	}
	return ks
}

func optionalBool(name string, v gjson.Result) (bool, error) {
	switch v.Type {
	case gjson.True:
		return true, nil
	case gjson.False, gjson.Null:
		return false, nil
	}
	if !v.Exists() {
		return false, nil
	}
	return false, invalid(name, InvalidType, name+" must be true or false")
}

// optionalCount reads a positive integer or null.
func optionalCount(name string, v gjson.Result) (int, error) {
	if v.Type == gjson.Null {
		return 0, nil
	}
	if v.Type != gjson.Number || strings.ContainsAny(v.Raw, ".eE") || v.Num < 1 || v.Num > 1<<31 {
		return 0, invalid(name, InvalidValue, name+" must be a whole number of at least 1")
	}
	return int(v.Num), nil
}

// valid reports a body that is not JSON, saying where it breaks.
func valid(body []byte) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalid("", InvalidJSON, "the request body is empty; send a JSON object")
	}
	if ValidJSON(body) {
		return nil
	}
	var v any
	err := json.Unmarshal(body, &v)
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return invalid("", InvalidJSON, fmt.Sprintf("the body is not valid JSON: %s (at byte %d)", strings.TrimPrefix(syntax.Error(), "json: "), syntax.Offset))
	}
	return invalid("", InvalidJSON, "the body is not valid JSON")
}

// maxNesting is encoding/json's limit on nested arrays and objects.
const maxNesting = 10000

// fastNesting is the deepest nesting ValidJSON leaves to gjson's
// validator, which recurses once a level (about 100 bytes of stack each);
// encoding/json keeps its nesting on the heap.
const fastNesting = 128

// ValidJSON reports whether b is one JSON value, exactly as encoding/json's
// Valid does (nesting capped at 10,000 levels), but quickly: gjson's
// validator agrees with encoding/json's on every input nested no deeper
// than it allows (FuzzValidAgreesWithEncodingJSON) and is several times
// faster — encoding/json's was most of Parse's time on a long prompt
// (BenchmarkParse) — so it checks a body nested at most fastNesting levels
// deep, and encoding/json the rest. gjson alone would let a body of
// brackets grow a goroutine's stack by 100 bytes a level: a megabyte of
// them, a request's worth, is tens of megabytes of stack, and an
// upstream's answer of 16 MiB could overflow it, which no recover catches.
func ValidJSON(b []byte) bool {
	if nestedWithin(b, fastNesting) {
		return gjson.ValidBytes(b)
	}
	return json.Valid(b)
}

// nestedWithin reports whether b nests arrays and objects at most max
// levels deep. Brackets inside strings are text; a string's end is the
// first quote not escaped by an odd run of backslashes. It does not check
// the rest of the syntax: what is not JSON fails the validator after it.
func nestedWithin(b []byte, max int) bool {
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for {
				j := bytes.IndexByte(b[i+1:], '"')
				if j < 0 {
					return true // unterminated: not JSON, which the validator says
				}
				i += 1 + j
				k := i - 1
				for b[k] == '\\' { // stops at the opening quote at the latest
					k--
				}
				if (i-1-k)%2 == 0 {
					break
				}
			}
		case '[', '{':
			if depth++; depth > max {
				return false
			}
		case ']', '}':
			depth--
		}
	}
	return true
}

// Body is the caller's request, byte for byte.
func (r *Request) Body() []byte { return r.raw }

// WithModel returns the request with its "model" set to model and every
// other byte as the caller sent it. It does not change r; each call
// returns a new slice.
func (r *Request) WithModel(model string) []byte { return r.Upstream(model, r.Stream) }

// Upstream returns the request as an upstream is sent it: "model" set to
// model, "stream" set to stream, and every other byte as the caller sent
// it. When a streamed request is asked for whole (a provider that answers
// whole, say), "stream_options" goes too: an upstream refuses them on a
// request that does not stream. It does not change r; each call returns a
// new slice.
func (r *Request) Upstream(model string, stream bool) []byte {
	return splice(r.raw, r.upstream(model, stream))
}

// UpstreamAskingUsage is Upstream for a streamed answer that also asks
// for the usage ("stream_options": {"include_usage": true}) when the
// caller did not: a gateway that charges by the token needs the count
// whether or not its caller wants to read it (and then drops the usage
// chunk on the way back; see IncludeUsage). Every other member of the
// caller's stream_options stays as it was.
func (r *Request) UpstreamAskingUsage(model string) []byte {
	edits := r.upstream(model, true)
	switch {
	case r.IncludeUsage, r.includeUsage == unlocated:
	case r.includeUsage.present(): // false, or null
		edits = append(edits, edit{r.includeUsage, []byte("true")})
	case r.optionsValue.present() && r.raw[r.optionsValue.at] == '{' && len(bytes.TrimSpace(r.raw[r.optionsValue.at+1:r.optionsValue.end-1])) > 0:
		at := r.optionsValue.at + 1
		edits = append(edits, edit{span{at, at}, []byte(`"include_usage":true,`)})
	case r.optionsValue.present(): // null, or {}
		edits = append(edits, edit{r.optionsValue, []byte(`{"include_usage":true}`)})
	default:
		edits = append(edits, r.insert(`"stream_options":{"include_usage":true},`))
	}
	return splice(r.raw, edits)
}

// upstream is the edits Upstream makes.
func (r *Request) upstream(model string, stream bool) []edit {
	quoted, _ := json.Marshal(model) // a string always marshals
	var edits []edit
	if r.model.present() {
		edits = append(edits, edit{r.model, quoted})
	} else {
		edits = append(edits, r.insert(`"model":`+string(quoted)+`,`))
	}
	if stream != r.Stream {
		switch {
		case r.stream.present():
			edits = append(edits, edit{r.stream, []byte(strconv.FormatBool(stream))})
		case stream:
			edits = append(edits, r.insert(`"stream":true,`))
		}
		if !stream && r.streamOptions.present() {
			edits = append(edits, edit{r.member(r.streamOptions), nil})
		}
	}
	return edits
}

// WithMaxTokens returns the request with "max_completion_tokens" set to n
// when the caller set no limit on the answer (and r itself when it did):
// a gateway that reserved n tokens for the answer asks the upstream for no
// more. max_completion_tokens, not the older max_tokens, because OpenAI's
// reasoning models refuse max_tokens and every current OpenAI-compatible
// server reads the newer name.
func (r *Request) WithMaxTokens(n int) *Request {
	if r.MaxTokens > 0 || n <= 0 {
		return r
	}
	e := r.insert(`"max_completion_tokens":` + strconv.Itoa(n) + `,`)
	if r.maxCompletion.present() { // "max_completion_tokens": null
		e = edit{r.maxCompletion, []byte(strconv.Itoa(n))}
	}
	out, err := Parse(splice(r.raw, []edit{e}))
	if err != nil {
		panic("chatapi: WithMaxTokens made an invalid request: " + err.Error()) // cannot happen: one valid value set in a valid object
	}
	return out
}

// AnswerLimit is the smallest answer limit the caller set
// ("max_tokens", "max_completion_tokens"), or 0 if it set none: the most
// answer it can be sure to get, whichever of the two its upstream honours.
func (r *Request) AnswerLimit() int {
	switch {
	case r.maxTokensN == 0:
		return r.maxCompletionN
	case r.maxCompletionN == 0:
		return r.maxTokensN
	}
	return min(r.maxTokensN, r.maxCompletionN)
}

// WithAnswerSent returns the request with each answer limit the caller
// set lowered by the n tokens of answer it has already received (to no
// less than 1), for a call that writes only the rest of that answer; r
// itself when the caller set none or n is not positive. It does not
// change r.
func (r *Request) WithAnswerSent(n int) *Request {
	if n <= 0 || r.AnswerLimit() == 0 {
		return r
	}
	var edits []edit
	for _, f := range []struct {
		at    span
		count int
	}{{r.maxTokens, r.maxTokensN}, {r.maxCompletion, r.maxCompletionN}} {
		if f.count > 0 && f.at.present() {
			edits = append(edits, edit{f.at, []byte(strconv.Itoa(max(f.count-n, 1)))})
		}
	}
	out, err := Parse(splice(r.raw, edits))
	if err != nil {
		panic("chatapi: WithAnswerSent made an invalid request: " + err.Error()) // cannot happen: counts set to counts
	}
	return out
}

// span is a range of a request's bytes, [at, end).
type span struct{ at, end int }

// absent is the span of a field the request does not have; unlocated,
// of one it has whose bytes could not be found.
var (
	absent    = span{at: -1, end: -1}
	unlocated = span{at: -2, end: -2}
)

func (s span) present() bool { return s.at >= 0 }

func valueSpan(v gjson.Result) span { return span{at: v.Index, end: v.Index + len(v.Raw)} }

// edit replaces the bytes of a span (empty: an insertion) with text (nil:
// a deletion).
type edit struct {
	span
	text []byte
}

// insert is an edit that adds text right after the body's opening brace.
func (r *Request) insert(text string) edit {
	open := bytes.IndexByte(r.raw, '{') + 1
	return edit{span{open, open}, []byte(text)}
}

// member widens a member's span (key to value) by the comma that separates
// it from its neighbour, so that deleting it leaves valid JSON.
func (r *Request) member(s span) span {
	i := s.end
	for i < len(r.raw) && isSpace(r.raw[i]) {
		i++
	}
	if i < len(r.raw) && r.raw[i] == ',' {
		return span{s.at, i + 1}
	}
	j := s.at - 1
	for j >= 0 && isSpace(r.raw[j]) {
		j--
	}
	if j >= 0 && r.raw[j] == ',' {
		return span{j, s.end}
	}
	return s
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// splice applies edits that do not overlap to a copy of raw.
func splice(raw []byte, edits []edit) []byte {
	slices.SortFunc(edits, func(a, b edit) int { return a.at - b.at })
	out := make([]byte, 0, len(raw)+64)
	last := 0
	for _, e := range edits {
		out = append(out, raw[last:e.at]...)
		out = append(out, e.text...)
		last = e.end
	}
	return append(out, raw[last:]...)
}

// Get returns a field of the request by gjson path ("tools.0.function.name"),
// for a provider that acts on more than the gateway does.
func (r *Request) Get(path string) gjson.Result { return gjson.GetBytes(r.raw, path) }

// Text is the text of every message, in order, one per line: string
// contents and the text of "text" parts. A simulated provider answers from it.
func (r *Request) Text() string {
	var b strings.Builder
	r.Get("messages").ForEach(func(_, m gjson.Result) bool {
		c := m.Get("content")
		if c.Type == gjson.String {
			line(&b, c.Str)
		}
		if c.IsArray() {
			c.ForEach(func(_, part gjson.Result) bool {
				if part.Get("type").Str == "text" {
					line(&b, part.Get("text").Str)
				}
				return true
			})
		}
		return true
	})
	return b.String()
}

func line(b *strings.Builder, s string) {
	if b.Len() > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(s)
}

// NewRequest builds a request from a prompt: one user message. It is what
// the lesson's /v1/generate sends to an OpenAI-compatible upstream.
func NewRequest(prompt string, stream bool) *Request {
	body, _ := json.Marshal(struct {
		Messages []map[string]string `json:"messages"`
		Stream   bool                `json:"stream,omitempty"`
	}{Messages: []map[string]string{{"role": "user", "content": prompt}}, Stream: stream})
	r, err := Parse(body)
	if err != nil {
		panic("chatapi: NewRequest built an invalid request: " + err.Error()) // cannot happen: the body is ours
	}
	return r
}
