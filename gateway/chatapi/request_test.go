package chatapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sameExceptModel checks out is in byte for byte, except for the value of
// "model", which is now model. It finds the value by its own means (a
// search for the quoted old value), not by the code under test.
func sameExceptModel(t *testing.T, in, out []byte, oldModel, model string) {
	t.Helper()
	quoted, _ := json.Marshal(model)
	if oldModel == "" {
		require.Truef(t, json.Valid(out), "not JSON: %s", out)
		var v map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(out, &v))
		assert.JSONEq(t, string(quoted), string(v["model"]))
		return
	}
	oldQuoted, _ := json.Marshal(oldModel)
	back := bytes.Replace(out, quoted, oldQuoted, 1)
	assert.Equal(t, string(in), string(back), "every byte but the model's value is the caller's")
}

func TestWithModelChangesOnlyTheModelsValue(t *testing.T) {
	for name, body := range map[string]string{
		"model first":                `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
		"model last":                 `{"messages":[{"role":"user","content":"hi"}],"model":"gpt-4o"}`,
		"spaces and newlines":        "{\n  \"messages\" : [ {\"role\":\"user\",\"content\":\"hi\"} ],\n  \"model\"\t:  \"gpt-4o\" ,\n  \"seed\": 12345678901234567890\n}",
		"a field named model inside": `{"model":"gpt-4o","metadata":{"model":"keep me"},"messages":[{"role":"user","content":"model"}]}`,
		"escapes and unicode":        `{"model":"gpt-4o","messages":[{"role":"user","content":"caf\u00e9 \ud83d\ude00 \"quoted\" \\ back"}],"x":1e-7}`,
	} {
		t.Run(name, func(t *testing.T) {
			r, err := Parse([]byte(body))
			require.NoError(t, err)
			assert.Equal(t, "gpt-4o", r.Model)
			sameExceptModel(t, []byte(body), r.WithModel("up-model-1"), "gpt-4o", "up-model-1")
			sameExceptModel(t, []byte(body), r.WithModel(`we"ird\model`), "gpt-4o", `we"ird\model`)
			assert.Equal(t, body, string(r.Body()), "WithModel must not change the request it was called on")
		})
	}
}

func TestWithModelAddsAModelWhenThereIsNone(t *testing.T) {
	body := `{"messages":[{"role":"user","content":"hi"}],"temperature":0.3}`
	r, err := Parse([]byte(body))
	require.NoError(t, err)
	out := r.WithModel("small-1")
	sameExceptModel(t, []byte(body), out, "", "small-1")
	assert.Contains(t, string(out), `"temperature":0.3`)
}

func TestParseReadsTheFieldsTheGatewayActsOn(t *testing.T) {
	r, err := Parse([]byte(`{"model":"chat","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"max_completion_tokens":70,
		"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"x"}}]}]}`))
	require.NoError(t, err)
	assert.Equal(t, "chat", r.Model)
	assert.True(t, r.Stream)
	assert.True(t, r.IncludeUsage)
	assert.Equal(t, 70, r.MaxTokens, "both names sent: the larger, since an upstream may honour either")
	assert.Zero(t, r.Choices, "no n: one answer")
	assert.Equal(t, 2, r.Messages)
	assert.Equal(t, 1, r.MediaParts, "one image part; the text part and the string content are text")
	assert.Equal(t, "be brief\nlook", r.Text(), "the text of string contents and text parts, in order")

	r, err = Parse([]byte(`{"max_completion_tokens":10,"max_tokens":100000,"n":3,"messages":[{"role":"user","content":"x"}]}`))
	require.NoError(t, err)
	assert.Equal(t, 100000, r.MaxTokens, "the larger, whichever name it has and whichever order they come in")
	assert.Equal(t, 3, r.Choices)
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, body, param string
	}{
		{"a content that is an object", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":{}}]}`, "messages[1].content"},
		{"include_usage that is not a boolean", `{"messages":[{"role":"user","content":"a"}],"stream_options":{"include_usage":"yes"}}`, "stream_options.include_usage"},
		{"a negative max_completion_tokens", `{"messages":[{"role":"user","content":"a"}],"max_completion_tokens":-3}`, "max_completion_tokens"},
		{"n of 0", `{"messages":[{"role":"user","content":"a"}],"n":0}`, "n"},
		{"n as a string", `{"messages":[{"role":"user","content":"a"}],"n":"4"}`, "n"},
		{"n given twice, the last larger", `{"messages":[{"role":"user","content":"a"}],"n":1,"n":128}`, "n"},
		{"messages given twice, the last empty", `{"messages":[{"role":"user","content":"a"}],"messages":[]}`, "messages"},
		{"a content part's type given twice", `{"messages":[{"role":"user","content":"a"},{"role":"user","content":[{"type":"text","type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[1].content[0].type"},
		{"a content part's type in another case", `{"messages":[{"role":"user","content":[{"type":"text","text":"b"},{"type":"text","TYPE":"input_audio"}]}]}`, "messages[0].content[1].type"},
		{"a role in another case", `{"messages":[{"role":"user","Role":"system","content":"a"}]}`, "messages[0].role"},
		{"a content in another case", `{"messages":[{"role":"user","content":"hi","Content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, "messages[0].content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, param := tc.body, tc.param
			_, err := Parse([]byte(body))
			var e *Error
			require.True(t, errors.As(err, &e), body)
			assert.Equal(t, 400, e.Status)
			assert.Equal(t, param, e.Param, body)
			assert.Contains(t, e.Message, param, "the message names the field too")
		})
	}
}

func TestNewRequestIsOneUserMessage(t *testing.T) {
	r := NewRequest(`say "hi"`, true)
	assert.JSONEq(t, `{"model":"m","messages":[{"role":"user","content":"say \"hi\""}],"stream":true}`, string(r.WithModel("m")))
}

// FuzzParse: whatever the body, Parse does not panic, and a body it accepts
// leaves WithModel valid JSON equal to the caller's with only the model
// changed.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/requests/*.json")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"model":"a","model":"b","messages":[]}`))
	f.Add([]byte(`{"messages":[{"role":"user","content":"x"}]} trailing`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := Parse(body)
		if err != nil {
			var e *Error
			require.True(t, errors.As(err, &e), "every refusal is an *Error: %v", err)
			require.Equal(t, 400, e.Status)
			return
		}
		out := r.WithModel("fuzz-model")
		require.Truef(t, json.Valid(out), "WithModel made invalid JSON from %q: %q", body, out)
		var in, got map[string]any
		require.NoError(t, decodeNumbers(body, &in))
		require.NoError(t, decodeNumbers(out, &got))
		in["model"] = "fuzz-model"
		require.Equal(t, in, got, "only the model changed")
		for _, stream := range []bool{false, true} {
			out := r.Upstream("fuzz-model", stream)
			require.Truef(t, json.Valid(out), "Upstream(%v) made invalid JSON from %q: %q", stream, body, out)
			var want, got map[string]any
			require.NoError(t, decodeNumbers(body, &want))
			require.NoError(t, decodeNumbers(out, &got))
			want["model"] = "fuzz-model"
			if stream != r.Stream {
				want["stream"] = stream
				if !stream {
					delete(want, "stream_options")
				}
			}
			require.Equal(t, want, got, "only the model, and the stream when it changed")
		}
	})
}

func TestUpstreamAsksForWhatTheProviderWillRead(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		stream   bool
		want     string
	}{
		{"a stream asked for whole loses stream_options",
			`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}],"seed":7}`, false,
			`{"model":"up","stream":false,"messages":[{"role":"user","content":"hi"}],"seed":7}`},
		{"stream_options last, after a comma",
			`{"messages":[{"role":"user","content":"hi"}],"stream":true ,  "stream_options" : {"include_usage":true} }`, false,
			`{"model":"up","messages":[{"role":"user","content":"hi"}],"stream":false  }`},
		{"a whole request asked for as a stream",
			`{"messages":[{"role":"user","content":"hi"}]}`, true,
			`{"model":"up","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"stream false made true keeps its place",
			`{"stream":false,"messages":[{"role":"user","content":"hi"}]}`, true,
			`{"model":"up","stream":true,"messages":[{"role":"user","content":"hi"}]}`},
		{"stream_options untouched when the stream is what the caller sent",
			`{"stream":false,"stream_options":null,"messages":[{"role":"user","content":"hi"}]}`, false,
			`{"model":"up","stream":false,"stream_options":null,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse([]byte(tc.in))
			require.NoError(t, err)
			assert.Equal(t, tc.want, string(r.Upstream("up", tc.stream)), "every other byte as the caller sent it")
			assert.Equal(t, tc.in, string(r.Body()), "and the request itself unchanged")
		})
	}
}

func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

func TestCorpusParses(t *testing.T) {
	files, err := filepath.Glob("testdata/requests/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		_, err = Parse(b)
		assert.NoError(t, err, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
}

// TestAFieldTheGatewayReadsIsRefusedInAnotherCase: the gateway reads keys
// exactly and a Go upstream reads them in any case, the last one winning;
// a second spelling would let a request pass the gateway's policy as one
// thing and reach the upstream as another.
func TestAFieldTheGatewayReadsIsRefusedInAnotherCase(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ name, body, param string }{
		{"MODEL beside model", `{"model":"auto",` + msgs + `,"MODEL":"other"}`, "MODEL"},
		{"Max_Tokens alone", `{` + msgs + `,"Max_Tokens":100000}`, "Max_Tokens"},
		{"max_completion_tokens with a Kelvin sign for the k", `{` + msgs + `,"max_completion_to\u212aens":100000}`, "max_completion_to\u212aens"},
		{"Stream", `{` + msgs + `,"Stream":true}`, "Stream"},
		{"Messages beside messages", `{` + msgs + `,"Messages":[]}`, "Messages"},
		{"N beside n", `{` + msgs + `,"n":1,"N":128}`, "N"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.body))
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, 400, e.Status)
			assert.Equal(t, tc.param, e.Param, "the refusal names the key the caller sent")
		})
	}
	_, err := Parse([]byte(`{` + msgs + `,"stream":true,"stream_options":{"include_usage":false,"Include_Usage":true}}`))
	var e *Error
	require.ErrorAs(t, err, &e, "inside stream_options too")
	assert.Equal(t, "stream_options.include_usage", e.Param)
	_, err = Parse([]byte(`{` + msgs + `,"stream":true,"stream_options":{"include_usage":false,"include_usage":true}}`))
	require.ErrorAs(t, err, &e, "the same key twice inside stream_options")
	assert.Equal(t, "stream_options.include_usage", e.Param)
	r, err := Parse([]byte(`{` + msgs + `,"Temperature":0.2,"METADATA":{"MODEL":"x"}}`))
	require.NoError(t, err, "a field the gateway does not read passes as it came, whatever its case")
	assert.Contains(t, string(r.Body()), `"Temperature":0.2`)
}

func TestWithMaxTokensAddsTheLimitOnlyWhenTheCallerSetNone(t *testing.T) {
	r, err := Parse([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"seed":1}`))
	require.NoError(t, err)
	capped := r.WithMaxTokens(1024)
	assert.Equal(t, 1024, capped.MaxTokens)
	assert.Equal(t, `{"max_completion_tokens":1024,"model":"m","messages":[{"role":"user","content":"hi"}],"seed":1}`, string(capped.Body()),
		"one member added, every other byte as the caller sent it")
	assert.Equal(t, `{"model":"m","messages":[{"role":"user","content":"hi"}],"seed":1}`, string(r.Body()), "the request it was called on is unchanged")
	assert.Equal(t, `{"max_completion_tokens":1024,"model":"up","messages":[{"role":"user","content":"hi"}],"seed":1}`, string(capped.WithModel("up")))

	for _, body := range []string{
		`{"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`,
		`{"max_completion_tokens":50,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		r, err := Parse([]byte(body))
		require.NoError(t, err)
		assert.Same(t, r, r.WithMaxTokens(1024), "a caller's own limit stands: %s", body)
	}
	for body, want := range map[string]string{
		`{"max_completion_tokens":null,"messages":[{"role":"user","content":"hi"}]}`: `{"max_completion_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`,
		`{"max_tokens":null,"messages":[{"role":"user","content":"hi"}]}`:            `{"max_completion_tokens":1024,"max_tokens":null,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		r, err := Parse([]byte(body))
		require.NoError(t, err)
		capped := r.WithMaxTokens(1024)
		assert.Equal(t, want, string(capped.Body()), "a limit sent as null is no limit: it is set, never added twice")
	}
}

func TestUpstreamAskingUsageAsksForItAndKeepsTheRest(t *testing.T) {
	msgs := `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct{ name, body, want string }{
		{"no stream_options", `{"stream":true,` + msgs + `}`,
			`{"stream_options":{"include_usage":true},"model":"up","stream":true,` + msgs + `}`},
		{"stream_options null", `{"model":"m","stream":true,"stream_options":null,` + msgs + `}`,
			`{"model":"up","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`},
		{"stream_options empty", `{"model":"m","stream":true,"stream_options":{ },` + msgs + `}`,
			`{"model":"up","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`},
		{"include_usage false beside another option", `{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":true, "include_usage" : false},` + msgs + `}`,
			`{"model":"up","stream":true,"stream_options":{"continuous_usage_stats":true, "include_usage" : true},` + msgs + `}`},
		{"include_usage null", `{"model":"m","stream":true,"stream_options":{"include_usage":null},` + msgs + `}`,
			`{"model":"up","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`},
		{"another option only", `{"model":"m","stream":true,"stream_options":{"include_obfuscation":false},` + msgs + `}`,
			`{"model":"up","stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false},` + msgs + `}`},
		{"the caller asked already", `{"model":"m","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`,
			`{"model":"up","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`},
		{"a request asked whole, streamed upstream", `{"model":"m",` + msgs + `}`,
			`{"stream_options":{"include_usage":true},"stream":true,"model":"up",` + msgs + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse([]byte(tc.body))
			require.NoError(t, err)
			got := r.UpstreamAskingUsage("up")
			out, err := Parse(got)
			require.NoError(t, err, "%s", got)
			assert.True(t, out.IncludeUsage, "%s", got)
			assert.True(t, out.Stream)
			assert.Equal(t, "up", out.Model)
			if !strings.HasPrefix(tc.name, "no stream_options") && !strings.HasPrefix(tc.name, "a request asked whole") {
				assert.Equal(t, tc.want, string(got), "every other byte as the caller sent it")
			} else {
				assert.JSONEq(t, tc.want, string(got))
			}
		})
	}
}
