package chatapi

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/tidwall/gjson"
)

// readAnswerByGet is ReadAnswer as it was, a gjson Get per field: the
// oracle the one-pass version must agree with.
func readAnswerByGet(provider string, b []byte) (a Answer, ok bool, err error) {
	if !gjson.ValidBytes(b) {
		return Answer{}, false, nil
	}
	root := gjson.ParseBytes(b)
	if !root.IsObject() {
		return Answer{}, false, nil
	}
	if e := root.Get("error"); e.IsObject() {
		ue := &UpstreamError{Provider: provider}
		ue.readObject(e)
		return Answer{}, true, ue
	}
	a.Model = root.Get("model").Str
	root.Get("choices").ForEach(func(_, c gjson.Result) bool {
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
	if u := root.Get("usage"); u.IsObject() {
		a.Usage = &Usage{
			PromptTokens:     int(u.Get("prompt_tokens").Int()),
			CompletionTokens: int(u.Get("completion_tokens").Int()),
			TotalTokens:      int(u.Get("total_tokens").Int()),
		}
	}
	return a, true, nil
}

var answerSeeds = []string{
	`{"model":"m","choices":[{"message":{"content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`,
	`{"model":"a","model":"b","usage":{"total_tokens":1,"total_tokens":2},"usage":{"total_tokens":9}}`,
	`{"error":"not an object","model":"m"}`,
	`{"model":"m","error":{"message":"boom","type":"server_error","code":500}}`,
	`{"mod\u0065l":"escaped","usage":5,"choices":{"x":1}}`,
	`{"choices":[{"delta":{"content":"d"}},{"message":{"content":"second"},"finish_reason":null}],"usage":{"prompt_tokens":"7"}}`,
	`[1,2]`, `not json`, `{}`,
}

func TestReadAnswerAgreesWithAGetPerField(t *testing.T) {
	for _, s := range answerSeeds {
		want, wok, werr := readAnswerByGet("p", []byte(s))
		got, gok, gerr := ReadAnswer("p", []byte(s))
		assert.Equal(t, want, got, s)
		assert.Equal(t, wok, gok, s)
		assert.Equal(t, werr, gerr, s)
		head, hok, herr := ReadAnswerHead("p", []byte(s))
		want.Text, want.FinishReason = "", ""
		assert.Equal(t, want, head, "head of %s", s)
		assert.Equal(t, wok, hok, "head of %s", s)
		assert.Equal(t, werr, herr, "head of %s", s)
	}
}

func FuzzReadAnswerAgreesWithAGetPerField(f *testing.F) {
	for _, s := range answerSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want, wok, werr := readAnswerByGet("p", b)
		got, gok, gerr := ReadAnswer("p", b)
		if wok != gok || want.Model != got.Model || want.Text != got.Text || want.FinishReason != got.FinishReason ||
			(want.Usage == nil) != (got.Usage == nil) || (want.Usage != nil && *want.Usage != *got.Usage) || (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: by Get %+v %v %v, in one pass %+v %v %v", b, want, wok, werr, got, gok, gerr)
		}
		head, hok, herr := ReadAnswerHead("p", b)
		if hok != gok || head.Model != got.Model || head.Text != "" || head.FinishReason != "" ||
			(head.Usage == nil) != (got.Usage == nil) || (head.Usage != nil && *head.Usage != *got.Usage) || (herr == nil) != (gerr == nil) {
			t.Fatalf("%q: head %+v %v %v, whole %+v %v %v", b, head, hok, herr, got, gok, gerr)
		}
	})
}

// BenchmarkReadAnswer compares the one-pass read with a Get per field on
// a typical whole answer:
//
//	go test -run '^$' -bench ReadAnswer -benchmem ./gateway/chatapi/
func BenchmarkReadAnswer(b *testing.B) {
	answer := NewFrame("gpt-4o-mini").Completion("Paris is the capital of France.", nil, "stop", &Usage{PromptTokens: 12, CompletionTokens: 8, TotalTokens: 20})
	for _, c := range []struct {
		name string
		read func(string, []byte) (Answer, bool, error)
	}{{"one-pass", ReadAnswer}, {"get-per-field", readAnswerByGet}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, _ := c.read("p", answer); !ok {
					b.Fatal("not an answer")
				}
			}
		})
	}
}
