package chatapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/tidwall/gjson"
)

// readMessagesByGet is readMessages as it was before one pass per message:
// a Get per field, a walk for repeats and a walk per case variant. It is
// the oracle the one-pass version must agree with, error for error.
func readMessagesByGet(v gjson.Result) (lastRole string, messages, media int, err error) {
	v.ForEach(func(_, m gjson.Result) bool {
		err = checkMessageByGet(messages, m)
		lastRole = m.Get("role").Str
		messages++
		if c := m.Get("content"); err == nil && c.IsArray() {
			j := 0
			c.ForEach(func(_, part gjson.Result) bool {
				if duplicate(part, "type") != "" || hasCaseVariant(part, "type") {
					field := fmt.Sprintf("messages[%d].content[%d].type", messages-1, j)
					err = invalid(field, DuplicateField, field+" appears more than once")
					return false
				}
				if part.Get("type").Str != "text" {
					media++
				}
				j++
				return true
			})
		}
		return err == nil
	})
	if err == nil && messages == 0 {
		err = invalid("messages", InvalidValue, "messages must contain at least one message")
	}
	return lastRole, messages, media, err
}

func checkMessageByGet(i int, m gjson.Result) error {
	field := func(name string) string { return fmt.Sprintf("messages[%d]%s", i, name) }
	if !m.IsObject() {
		return invalid(field(""), InvalidType, field("")+" must be an object")
	}
	if dup := duplicate(m, "role", "content"); dup != "" {
		return invalid(field("."+dup), DuplicateField, fmt.Sprintf("%s appears more than once", field("."+dup)))
	}
	for _, name := range []string{"role", "content"} {
		if hasCaseVariant(m, name) {
			return invalid(field("."+name), DuplicateField, fmt.Sprintf("%s appears more than once, in another case", field("."+name)))
		}
	}
	role := m.Get("role")
	switch {
	case !role.Exists():
		return invalid(field(".role"), MissingParameter, field(".role")+" is required")
	case role.Type != gjson.String:
		return invalid(field(".role"), InvalidType, field(".role")+" must be a string")
	case !roles[role.Str]:
		return invalid(field(".role"), InvalidValue,
			fmt.Sprintf("%s %q is not one of system, developer, user, assistant, tool, function", field(".role"), role.Str))
	}
	switch c := m.Get("content"); {
	case !c.Exists(), c.Type == gjson.Null, c.Type == gjson.String, c.IsArray():
	default:
		return invalid(field(".content"), InvalidType, field(".content")+" must be a string, an array of content parts, or null")
	}
	return nil
}

// hasCaseVariant, part of the oracle (scanKeys does its work now),
// reports whether obj has a key that is name in another case.
func hasCaseVariant(obj gjson.Result, name string) bool {
	found := false
	obj.ForEach(func(k, _ gjson.Result) bool {
		found = k.Str != name && strings.EqualFold(k.Str, name)
		return !found
	})
	return found
}

// duplicate, part of the oracle, returns the first of names that obj holds
// more than once, or "".
// gjson (like the gateway) reads the first of two keys and many upstreams
// the last, so a key the gateway reads must appear once.
func duplicate(obj gjson.Result, names ...string) string {
	seen := map[string]bool{}
	found := ""
	obj.ForEach(func(k, _ gjson.Result) bool {
		for _, n := range names {
			if k.Str == n {
				if seen[n] {
					found = n
					return false
				}
				seen[n] = true
			}
		}
		return true
	})
	return found
}

var messagesSeeds = []string{
	`[{"role":"user","content":"hi"}]`,
	`[{"role":"user","Role":"x","content":[{"type":"text"},{"type":"image_url"},"s",[1],{"Type":"a","type":"text"}]}]`,
	`[{"content":"a","content":"b","role":"user","role":"user"}]`, `[{"rOle":"a","CONTENT":1}]`, `[1,{"role":"tool","content":null}]`,
	`[{"role":"user","content":[{"type":"text","type":"image"}]}]`, `[{"r\u006fle":"user","content":{}}]`, `[{"role":5}]`,
	`[{"role":"bot"}]`, `[]`, `[{"role":"user","content":"a"},{"role":"assistant","tool_calls":[]}]`, `[{"content":"x"}]`,
	`[{"role":"user","content":"a","CONTENT":"b"}]`, `[{"role":"assistant","content":[{"type":"text","text":"a"},{"TYPE":"text"}]}]`,
}

func agreeOnMessages(t *testing.T, s string) {
	v := gjson.Parse(s)
	r := &Request{}
	err := r.readMessages(v)
	last, n, media, want := readMessagesByGet(v)
	if fmt.Sprint(err) != fmt.Sprint(want) {
		t.Fatalf("%s: in one pass %v, by Get %v", s, err, want)
	}
	if err == nil && (r.lastRole != last || r.Messages != n || r.MediaParts != media) {
		t.Fatalf("%s: in one pass %q %d %d, by Get %q %d %d", s, r.lastRole, r.Messages, r.MediaParts, last, n, media)
	}
}

func TestReadMessagesAgreesWithAGetPerField(t *testing.T) {
	for _, s := range messagesSeeds {
		agreeOnMessages(t, s)
	}
	assert.NotEmpty(t, messagesSeeds)
}

func FuzzReadMessagesAgreesWithAGetPerField(f *testing.F) {
	for _, s := range messagesSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !gjson.Valid(s) || !gjson.Parse(s).IsArray() {
			return
		}
		agreeOnMessages(t, s)
	})
}
