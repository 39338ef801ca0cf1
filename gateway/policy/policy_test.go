package policy_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefaultPolicyFilesLoadAndAgree(t *testing.T) {
	fromYAML, err := policy.Load(filepath.Join("testdata", "tiers.yaml"))
	require.NoError(t, err)
	fromJSON, err := policy.Load(filepath.Join("testdata", "tiers.json"))
	require.NoError(t, err)
	assert.Equal(t, fromYAML, fromJSON, "tiers.yaml and tiers.json must describe the same policy")

	want := map[string]policy.Tier{
		"free": {Name: "free", RatePerSecond: 1, Burst: 5, MaxInFlight: 2, MaxPromptBytes: 32 << 10,
			Models: []string{"auto"}, MaxRequestTimeout: 30 * time.Second, TokensPerMinute: 20000},
		"pro": {Name: "pro", RatePerSecond: 10, Burst: 20, MaxInFlight: 8, MaxPromptBytes: 256 << 10,
			Models: []string{"*"}, MaxRequestTimeout: 60 * time.Second, TokensPerMinute: 200000},
		"enterprise": {Name: "enterprise", RatePerSecond: 50, Burst: 100, MaxInFlight: 32, MaxPromptBytes: 1 << 20,
			Models: []string{"*"}, MaxRequestTimeout: 120 * time.Second, TokensPerMinute: 0},
	}
	for _, p := range []*policy.Policy{fromYAML, fromJSON} {
		assert.Equal(t, []string{"enterprise", "free", "pro"}, p.Names(), "Names is sorted")
		for name, w := range want {
			got, ok := p.Tier(name)
			require.True(t, ok, "tier %q", name)
			assert.Equal(t, w, got, "tier %q", name)
		}
	}
}

func TestTierAllows(t *testing.T) {
	p, err := policy.Load(filepath.Join("testdata", "tiers.yaml"))
	require.NoError(t, err)
	free, _ := p.Tier("free")
	pro, _ := p.Tier("pro")
	assert.True(t, free.Allows("auto"), "free lists auto")
	assert.False(t, free.Allows("gpt-4o"), "free does not list gpt-4o")
	assert.False(t, free.Allows("Auto"), "model names match exactly, case included")
	assert.False(t, free.Allows("*"), `asking for the model "*" is not a wildcard`)
	assert.False(t, free.Allows(""), "the empty model is never allowed")
	assert.True(t, pro.Allows("gpt-4o"), `pro lists "*"`)
	assert.True(t, pro.Allows("auto"))
	assert.False(t, pro.Allows(""), `not even under "*"`)
	assert.False(t, policy.Tier{}.Allows("auto"), "a tier without models allows none")
}

func TestPolicyIsImmutable(t *testing.T) {
	p, err := policy.Load(filepath.Join("testdata", "tiers.yaml"))
	require.NoError(t, err)
	free, _ := p.Tier("free")
	free.Models[0] = "gpt-4o"
	names := p.Names()
	names[0] = "zzz"
	again, _ := p.Tier("free")
	assert.Equal(t, []string{"auto"}, again.Models, "changing a returned Tier's Models must not change the policy")
	assert.Equal(t, []string{"enterprise", "free", "pro"}, p.Names(), "changing the returned Names must not change the policy")
	_, ok := p.Tier("Free")
	assert.False(t, ok, "tier names match exactly")
	_, ok = p.Tier("")
	assert.False(t, ok)
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	yamlData, err := os.ReadFile(filepath.Join("testdata", "tiers.yaml"))
	require.NoError(t, err)
	for _, name := range []string{"p.YML", "p.Yaml", "p.yml"} {
		t.Run(name, func(t *testing.T) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, name), yamlData, 0o600))
			_, err := policy.Load(filepath.Join(dir, name))
			assert.NoError(t, err, "%s loads as YAML", name)
		})
	}

	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.toml"), yamlData, 0o600))
	_, err = policy.Load(filepath.Join(dir, "p.toml"))
	assert.ErrorIs(t, err, policy.ErrFormat, ".toml is not a policy format")
	assert.ErrorContains(t, err, "p.toml: the extension must be .json, .yaml or .yml")

	_, err = policy.Load(filepath.Join(dir, "missing.yaml"))
	assert.ErrorIs(t, err, fs.ErrNotExist)

	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, append(yamlData, strings.Repeat("#", policy.MaxFileBytes)...), 0o600))
	_, err = policy.Load(big)
	assert.ErrorIs(t, err, policy.ErrInvalid)
	assert.EqualError(t, err, big+":1:1: the file is over 1048576 bytes")

	// A file whose errors name it by the path Load was given.
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"tiers": {}}`), 0o600))
	_, err = policy.Load(bad)
	assert.EqualError(t, err, bad+":1:11: tiers: must define at least one tier")
}

func TestParseRefusesUnknownFormat(t *testing.T) {
	_, err := policy.Parse("x", []byte("{}"), "toml")
	assert.ErrorIs(t, err, policy.ErrFormat)
	for _, f := range []string{"JSON", "YAML", "yml"} {
		t.Run(f, func(t *testing.T) {
			_, err := policy.Parse("x", []byte(`{"tiers": {}}`), f)
			assert.ErrorIs(t, err, policy.ErrInvalid, "format %q is understood (and the policy refused)", f)
		})
	}
}

// baseYAML is one valid tier; the error cases edit one line of it. Lines:
//
//	1 tiers:
//	2   pro:
//	3     rate_per_second: 10       value at column 22
//	4     burst: 20                 value at column 12
//	5     max_in_flight: 8          value at column 20
//	6     max_prompt_bytes: 262144  value at column 23
//	7     models: ["*"]             value at column 13, first item at 14
//	8     max_request_timeout: 60s  value at column 26
//	9     tokens_per_minute: 200000 value at column 24
const baseYAML = `tiers:
  pro:
    rate_per_second: 10
    burst: 20
    max_in_flight: 8
    max_prompt_bytes: 262144
    models: ["*"]
    max_request_timeout: 60s
    tokens_per_minute: 200000
`

// baseJSON is the same tier in JSON. Lines:
//
//	 1 {"tiers": {
//	 2   "pro": {
//	 3     "rate_per_second": 10,          value at column 24
//	 4     "burst": 20,                    value at column 14
//	 5     "max_in_flight": 8,             value at column 22
//	 6     "max_prompt_bytes": 262144,     value at column 25
//	 7     "models": ["*"],                value at column 15, first item at 16
//	 8     "max_request_timeout": "60s",   value at column 28
//	 9     "tokens_per_minute": 200000     value at column 26
//	10   }
//	11 }}
const baseJSON = `{"tiers": {
  "pro": {
    "rate_per_second": 10,
    "burst": 20,
    "max_in_flight": 8,
    "max_prompt_bytes": 262144,
    "models": ["*"],
    "max_request_timeout": "60s",
    "tokens_per_minute": 200000
  }
}}
`

func edit(base, old, new string) string {
	if !strings.Contains(base, old) {
		panic("edit: " + old + " not in the base")
	}
	return strings.Replace(base, old, new, 1)
}

func TestBaseFilesAreValid(t *testing.T) {
	y, err := policy.Parse("t.yaml", []byte(baseYAML), "yaml")
	require.NoError(t, err)
	j, err := policy.Parse("t.json", []byte(baseJSON), "json")
	require.NoError(t, err)
	assert.Equal(t, y, j)
}

func TestParseReportsEachErrorWithFileLineColumnAndPath(t *testing.T) {
	tests := []struct {
		name, format, data string
		want               string // the whole error text
	}{
		// ranges
		{"yaml: burst 0", "yaml", edit(baseYAML, "burst: 20", "burst: 0"),
			"t.yaml:4:12: tiers.pro.burst: must be at least 1, got 0"},
		{"json: burst 0", "json", edit(baseJSON, `"burst": 20`, `"burst": 0`),
			"t.json:4:14: tiers.pro.burst: must be at least 1, got 0"},
		{"yaml: burst 1 passes, a tier that is a number does not", "yaml", edit(baseYAML, "burst: 20", "burst: 1") + "  x: 1\n",
			"t.yaml:10:6: tiers.x: must be a mapping of limits, got a whole number \"1\""},
		{"yaml: rate 0", "yaml", edit(baseYAML, "rate_per_second: 10", "rate_per_second: 0"),
			"t.yaml:3:22: tiers.pro.rate_per_second: must be greater than 0, got 0"},
		{"json: rate 0.0", "json", edit(baseJSON, `"rate_per_second": 10`, `"rate_per_second": 0.0`),
			"t.json:3:24: tiers.pro.rate_per_second: must be greater than 0, got 0.0"},
		{"yaml: negative rate", "yaml", edit(baseYAML, "rate_per_second: 10", "rate_per_second: -1.5"),
			"t.yaml:3:22: tiers.pro.rate_per_second: must be greater than 0, got -1.5"},
		{"yaml: infinite rate", "yaml", edit(baseYAML, "rate_per_second: 10", "rate_per_second: .inf"),
			`t.yaml:3:22: tiers.pro.rate_per_second: must be a finite number, got ".inf"`},
		{"json: rate beyond float64", "json", edit(baseJSON, `"rate_per_second": 10`, `"rate_per_second": 1e999`),
			`t.json:3:24: tiers.pro.rate_per_second: must be a finite number, got "1e999"`},
		{"yaml: max_in_flight 0", "yaml", edit(baseYAML, "max_in_flight: 8", "max_in_flight: 0"),
			"t.yaml:5:20: tiers.pro.max_in_flight: must be at least 1, got 0"},
		{"json: max_in_flight -3", "json", edit(baseJSON, `"max_in_flight": 8`, `"max_in_flight": -3`),
			"t.json:5:22: tiers.pro.max_in_flight: must be at least 1, got -3"},
		{"yaml: max_prompt_bytes 0", "yaml", edit(baseYAML, "max_prompt_bytes: 262144", "max_prompt_bytes: 0"),
			"t.yaml:6:23: tiers.pro.max_prompt_bytes: must be at least 1, got 0"},
		{"json: max_prompt_bytes 0", "json", edit(baseJSON, `"max_prompt_bytes": 262144`, `"max_prompt_bytes": 0`),
			"t.json:6:25: tiers.pro.max_prompt_bytes: must be at least 1, got 0"},
		{"yaml: negative tokens_per_minute", "yaml", edit(baseYAML, "tokens_per_minute: 200000", "tokens_per_minute: -1"),
			"t.yaml:9:24: tiers.pro.tokens_per_minute: must be at least 0, got -1"},
		{"json: negative tokens_per_minute", "json", edit(baseJSON, `"tokens_per_minute": 200000`, `"tokens_per_minute": -1`),
			"t.json:9:26: tiers.pro.tokens_per_minute: must be at least 0, got -1"},
		{"json: an integer beyond 64 bits", "json", edit(baseJSON, `"burst": 20`, `"burst": 99999999999999999999`),
			"t.json:4:14: tiers.pro.burst: is out of range, got 99999999999999999999"},
		// types
		{"yaml: quoted number", "yaml", edit(baseYAML, "rate_per_second: 10", `rate_per_second: "10"`),
			`t.yaml:3:22: tiers.pro.rate_per_second: must be a number, got a string "10"`},
		{"json: quoted number", "json", edit(baseJSON, `"rate_per_second": 10`, `"rate_per_second": "10"`),
			`t.json:3:24: tiers.pro.rate_per_second: must be a number, got a string "10"`},
		{"yaml: fractional burst", "yaml", edit(baseYAML, "burst: 20", "burst: 1.5"),
			`t.yaml:4:12: tiers.pro.burst: must be a whole number, got a number "1.5"`},
		{"json: burst in exponent form", "json", edit(baseJSON, `"burst": 20`, `"burst": 2e1`),
			`t.json:4:14: tiers.pro.burst: must be a whole number, got a number "2e1"`},
		{"yaml: boolean burst", "yaml", edit(baseYAML, "burst: 20", "burst: true"),
			`t.yaml:4:12: tiers.pro.burst: must be a whole number, got a boolean "true"`},
		{"yaml: empty burst", "yaml", edit(baseYAML, "burst: 20", "burst:"),
			"t.yaml:4:11: tiers.pro.burst: must be a whole number, got null"},
		{"json: null burst", "json", edit(baseJSON, `"burst": 20`, `"burst": null`),
			"t.json:4:14: tiers.pro.burst: must be a whole number, got null"},
		{"yaml: tagged burst", "yaml", edit(baseYAML, "burst: 20", "burst: !!binary aGk="),
			`t.yaml:4:12: tiers.pro.burst: must be a whole number, got a tagged value "aGk="`},
		{"yaml: tier as a list", "yaml", edit(baseYAML, "  pro:\n", "  pro: []\n  x:\n"),
			"t.yaml:2:8: tiers.pro: must be a mapping of limits, got a list"},
		// durations
		{"yaml: duration as a number", "yaml", edit(baseYAML, "max_request_timeout: 60s", "max_request_timeout: 60"),
			`t.yaml:8:26: tiers.pro.max_request_timeout: must be a duration string like "30s", got a whole number "60"`},
		{"json: duration as a number", "json", edit(baseJSON, `"max_request_timeout": "60s"`, `"max_request_timeout": 60`),
			`t.json:8:28: tiers.pro.max_request_timeout: must be a duration string like "30s", got a whole number "60"`},
		{"yaml: bad duration unit", "yaml", edit(baseYAML, "max_request_timeout: 60s", "max_request_timeout: 60x"),
			`t.yaml:8:26: tiers.pro.max_request_timeout: must be a duration like "30s" or "1m30s", got "60x"`},
		{"json: bad duration", "json", edit(baseJSON, `"max_request_timeout": "60s"`, `"max_request_timeout": "a minute"`),
			`t.json:8:28: tiers.pro.max_request_timeout: must be a duration like "30s" or "1m30s", got "a minute"`},
		{"yaml: zero duration", "yaml", edit(baseYAML, "max_request_timeout: 60s", "max_request_timeout: 0s"),
			`t.yaml:8:26: tiers.pro.max_request_timeout: must be greater than 0, got "0s"`},
		{"json: negative duration", "json", edit(baseJSON, `"max_request_timeout": "60s"`, `"max_request_timeout": "-5s"`),
			`t.json:8:28: tiers.pro.max_request_timeout: must be greater than 0, got "-5s"`},
		// models
		{"yaml: empty models", "yaml", edit(baseYAML, `models: ["*"]`, `models: []`),
			`t.yaml:7:13: tiers.pro.models: must not be empty; list model names, or ["*"] for all`},
		{"json: empty models", "json", edit(baseJSON, `"models": ["*"]`, `"models": []`),
			`t.json:7:15: tiers.pro.models: must not be empty; list model names, or ["*"] for all`},
		{"yaml: models as a string", "yaml", edit(baseYAML, `models: ["*"]`, `models: "*"`),
			`t.yaml:7:13: tiers.pro.models: must be a list of model names (or ["*"]), got a string "*"`},
		{"yaml: a number in models", "yaml", edit(baseYAML, `models: ["*"]`, `models: [auto, 4]`),
			`t.yaml:7:20: tiers.pro.models[1]: must be a model name, got a whole number "4"`},
		{"yaml: duplicate model", "yaml", edit(baseYAML, `models: ["*"]`, `models: [auto, auto]`),
			`t.yaml:7:20: tiers.pro.models[1]: duplicate model "auto"`},
		{"json: empty model name", "json", edit(baseJSON, `"models": ["*"]`, `"models": ["auto", ""]`),
			`t.json:7:24: tiers.pro.models[1]: must be a model name without spaces or control characters, got ""`},
		{"yaml: model name with a space", "yaml", edit(baseYAML, `models: ["*"]`, `models: ["gpt 4o"]`),
			`t.yaml:7:14: tiers.pro.models[0]: must be a model name without spaces or control characters, got "gpt 4o"`},
		{"yaml: star with other models", "yaml", edit(baseYAML, `models: ["*"]`, `models: [auto, "*"]`),
			`t.yaml:7:20: tiers.pro.models[1]: "*" allows every model and must be the only entry`},
		{"json: star first, then a model", "json", edit(baseJSON, `"models": ["*"]`, `"models": ["*", "auto"]`),
			`t.json:7:16: tiers.pro.models[0]: "*" allows every model and must be the only entry`},
		// keys
		{"yaml: unknown field (a misspelt burst)", "yaml", edit(baseYAML, "burst: 20", "brust: 20"),
			"t.yaml:2:3: tiers.pro.burst: required\n" +
				"t.yaml:4:5: tiers.pro.brust: unknown field; a tier has rate_per_second, burst, max_in_flight, max_prompt_bytes, models, max_request_timeout, tokens_per_minute"},
		{"json: unknown field", "json", edit(baseJSON, `"burst": 20,`, `"burst": 20, "priority": 1,`),
			"t.json:4:18: tiers.pro.priority: unknown field; a tier has rate_per_second, burst, max_in_flight, max_prompt_bytes, models, max_request_timeout, tokens_per_minute"},
		{"yaml: unknown top-level field", "yaml", "version: 2\n" + baseYAML,
			`t.yaml:1:1: version: unknown field; the top level has tiers`},
		{"yaml: a field in another case", "yaml", edit(baseYAML, "burst: 20", "burst: 20\n    Burst: 20"),
			"t.yaml:5:5: tiers.pro.Burst: unknown field; a tier has rate_per_second, burst, max_in_flight, max_prompt_bytes, models, max_request_timeout, tokens_per_minute"},
		{"yaml: missing field", "yaml", edit(baseYAML, "    tokens_per_minute: 200000\n", ""),
			"t.yaml:2:3: tiers.pro.tokens_per_minute: required"},
		{"json: missing field", "json", edit(baseJSON, `"burst": 20,`, ``),
			"t.json:2:3: tiers.pro.burst: required"},
		{"yaml: duplicate field", "yaml", edit(baseYAML, "burst: 20", "burst: 20\n    burst: 1"),
			"t.yaml:5:5: tiers.pro.burst: duplicate key (first at line 4)"},
		{"json: duplicate field", "json", edit(baseJSON, `"burst": 20,`, `"burst": 20, "burst": 1,`),
			"t.json:4:18: tiers.pro.burst: duplicate key (first at line 4)"},
		{"yaml: duplicate tier", "yaml", baseYAML + strings.TrimPrefix(baseYAML, "tiers:\n"),
			"t.yaml:10:3: tiers.pro: duplicate key (first at line 2)"},
		{"yaml: merge key", "yaml", "x: &d {burst: 1}\n" + edit(baseYAML, "    burst: 20\n", "    <<: *d\n"),
			"t.yaml:1:1: x: unknown field; the top level has tiers\n" +
				"t.yaml:3:3: tiers.pro.burst: required\n" +
				"t.yaml:5:5: tiers.pro: YAML merge keys (<<) are not supported; write the fields out"},
		{"yaml: tier name with a space", "yaml", edit(baseYAML, "  pro:", `  "pro plus":`),
			`t.yaml:2:3: tiers["pro plus"]: a tier name is visible ASCII: no spaces, control or non-ASCII characters`},
		{"yaml: tier name of 65 bytes", "yaml", edit(baseYAML, "  pro:", "  "+strings.Repeat("p", 65)+":"),
			`t.yaml:2:3: tiers.` + strings.Repeat("p", 65) + `: a tier name is at most 64 bytes`},
		{"yaml: tier name that is a number", "yaml", edit(baseYAML, "  pro:", "  1:"),
			`t.yaml:2:3: tiers: keys must be strings, got a whole number "1"`},
		// the file as a whole
		{"yaml: no tiers", "yaml", "tiers: {}\n", "t.yaml:1:8: tiers: must define at least one tier"},
		{"json: no tiers", "json", `{"tiers": {}}`, "t.json:1:11: tiers: must define at least one tier"},
		{"yaml: tiers empty", "yaml", "tiers:\n", "t.yaml:1:7: tiers: must be a mapping of tier names to tiers, got null"},
		{"yaml: tiers key missing", "yaml", "tier:\n  pro: {}\n",
			"t.yaml:1:1: tier: unknown field; the top level has tiers\nt.yaml:1:1: tiers: required"},
		{"json: tiers key missing", "json", "{}", "t.json:1:1: tiers: required"},
		{"yaml: empty file", "yaml", "", "t.yaml:1:1: tiers: required; the file is empty"},
		{"yaml: only a comment", "yaml", "# nothing yet\n", "t.yaml:1:1: tiers: required; the file is empty"},
		{"json: empty file", "json", " \n", "t.json:1:1: tiers: required; the file is empty"},
		{"yaml: top level a list", "yaml", "- tiers\n",
			`t.yaml:1:1: the top level must be a mapping with a "tiers" key, got a list`},
		{"json: top level a string", "json", `"tiers"`,
			`t.json:1:1: the top level must be a mapping with a "tiers" key, got a string "tiers"`},
		{"yaml: two documents", "yaml", baseYAML + "---\n" + baseYAML,
			"t.yaml:10:1: a policy file holds one YAML document; found a second"},
		// syntax
		{"yaml: parser error: the line where the list opens (YAML gives no column)", "yaml", edit(baseYAML, "burst: 20", "burst: [20"),
			"t.yaml:4: YAML: did not find expected ',' or ']'"},
		{"yaml: parser error: a mapping opened on line 1 runs into the end on line 2", "yaml", "tiers: {pro: 1\n",
			"t.yaml:2: YAML: did not find expected ',' or '}'"},
		{"yaml: scanner error: a tab on line 4 ends the scalar that started on line 3", "yaml", edit(baseYAML, "    burst: 20", "\tburst: 20"),
			"t.yaml:3: YAML: found a tab character that violates indentation"},
		{"yaml: scanner error: a missing colon", "yaml", edit(baseYAML, "burst: 20", "burst 20"),
			"t.yaml:4: YAML: could not find expected ':'"},
		{"yaml: an unknown alias has no line", "yaml", edit(baseYAML, "burst: 20", "burst: *nope"),
			"t.yaml: YAML: unknown anchor 'nope' referenced"},
		{"json: trailing comma", "json", edit(baseJSON, "200000", "200000,"),
			"t.json:10:3: JSON: invalid character '}' looking for beginning of object key string"},
		{"json: unquoted key", "json", edit(baseJSON, `"burst"`, `burst`),
			"t.json:4:5: JSON: invalid character 'b' looking for beginning of object key string"},
		{"json: truncated", "json", baseJSON[:40], "t.json:3:18: JSON: unexpected end of file"},
		{"json: data after the object", "json", baseJSON + "{}", "t.json:12:1: unexpected data after the top-level value"},
		{"json: nested too deep", "json", strings.Repeat("[", 40),
			"t.json:1:34: nested deeper than 32 levels"},
		{"yaml: an alias that contains itself", "yaml", "tiers: &a [*a]\n", "t.yaml:1:8: nested deeper than 32 levels"},
		{"json: CRLF line ends", "json", strings.ReplaceAll(edit(baseJSON, `"burst": 20`, `"burst": 0`), "\n", "\r\n"),
			"t.json:4:14: tiers.pro.burst: must be at least 1, got 0"},
		{"yaml: CRLF line ends", "yaml", strings.ReplaceAll(edit(baseYAML, "burst: 20", "burst: 0"), "\n", "\r\n"),
			"t.yaml:4:12: tiers.pro.burst: must be at least 1, got 0"},
		// columns count characters, not bytes
		{"json: column after a multi-byte character", "json", edit(baseJSON, `"models": ["*"]`, `"models": ["é", 5]`),
			`t.json:7:21: tiers.pro.models[1]: must be a model name, got a whole number "5"`},
		{"yaml: column after a multi-byte character", "yaml", edit(baseYAML, `models: ["*"]`, `models: ["é", 5]`),
			`t.yaml:7:19: tiers.pro.models[1]: must be a model name, got a whole number "5"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Parse("t."+tc.format, []byte(tc.data), tc.format)
			require.Error(t, err, "want the policy refused with:\n%s", tc.want)
			assert.Nil(t, p)
			assert.Equal(t, tc.want, err.Error())
			assert.ErrorIs(t, err, policy.ErrInvalid)
			var pe *policy.Error
			require.ErrorAs(t, err, &pe, "errors.As finds a *policy.Error")
			assert.Equal(t, "t."+tc.format, pe.File)
		})
	}
}

func TestParseReportsEveryErrorInFileOrder(t *testing.T) {
	data := edit(edit(edit(baseYAML, "burst: 20", "burst: 0"), "max_in_flight: 8", "max_in_flight: x"), "models: [\"*\"]", "models: []") +
		"  free:\n    burst: -1\n"
	_, err := policy.Parse("t.yaml", []byte(data), "yaml")
	require.Error(t, err)
	want := []string{
		"t.yaml:4:12: tiers.pro.burst: must be at least 1, got 0",
		`t.yaml:5:20: tiers.pro.max_in_flight: must be a whole number, got a string "x"`,
		`t.yaml:7:13: tiers.pro.models: must not be empty; list model names, or ["*"] for all`,
		"t.yaml:10:3: tiers.free.rate_per_second: required",
		"t.yaml:10:3: tiers.free.max_in_flight: required",
		"t.yaml:10:3: tiers.free.max_prompt_bytes: required",
		"t.yaml:10:3: tiers.free.models: required",
		"t.yaml:10:3: tiers.free.max_request_timeout: required",
		"t.yaml:10:3: tiers.free.tokens_per_minute: required",
		"t.yaml:11:12: tiers.free.burst: must be at least 1, got -1",
	}
	assert.Equal(t, strings.Join(want, "\n"), err.Error())
	var joined interface{ Unwrap() []error }
	require.True(t, errors.As(err, &joined), "several errors are joined")
	assert.Len(t, joined.Unwrap(), len(want))
}

func TestParseCapsTheErrorsReported(t *testing.T) {
	var b strings.Builder
	b.WriteString("tiers:\n")
	for i := range 30 {
		b.WriteString("  t" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ": 1\n")
	}
	_, err := policy.Parse("t.yaml", []byte(b.String()), "yaml")
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 21, "20 errors and a summary")
	assert.Equal(t, `t.yaml:2:8: tiers.taa: must be a mapping of limits, got a whole number "1"`, lines[0])
	assert.Equal(t, "t.yaml: and 10 more errors", lines[20])
	assert.ErrorIs(t, err, policy.ErrInvalid)
}

func TestTierNamesMayBeAnyVisibleASCII(t *testing.T) {
	p, err := policy.Parse("t.yaml", []byte(edit(baseYAML, "  pro:", `  "pro.v2/eu~!":`)), "yaml")
	require.NoError(t, err)
	assert.Equal(t, []string{"pro.v2/eu~!"}, p.Names())
	_, err = policy.Parse("t.yaml", []byte(edit(edit(baseYAML, "  pro:", `  "pro.v2":`), "burst: 20", "burst: 0")), "yaml")
	assert.EqualError(t, err, `t.yaml:4:12: tiers["pro.v2"].burst: must be at least 1, got 0`, "a name that is not a plain word is quoted in the path")
}

func TestYAMLAliases(t *testing.T) {
	// An anchored list used by two tiers: accepted.
	data := "x: &m [auto, small]\n" + edit(baseYAML, `models: ["*"]`, "models: *m")
	_, err := policy.Parse("t.yaml", []byte(data), "yaml")
	require.EqualError(t, err, "t.yaml:1:1: x: unknown field; the top level has tiers",
		"a top-level anchor holder is still an unknown field")
	data = edit(baseYAML, `models: ["*"]`, "models: &m [auto, small]") + "  free:\n" +
		strings.TrimPrefix(edit(baseYAML, `models: ["*"]`, "models: *m"), "tiers:\n  pro:\n")
	p, err := policy.Parse("t.yaml", []byte(data), "yaml")
	require.NoError(t, err)
	free, _ := p.Tier("free")
	assert.Equal(t, []string{"auto", "small"}, free.Models, "the alias brings the anchored list")

	// A bad value reached through an alias is reported where it is used.
	data = edit(edit(baseYAML, "burst: 20", "burst: &zero 0"), "max_in_flight: 8", "max_in_flight: *zero")
	_, err = policy.Parse("t.yaml", []byte(data), "yaml")
	assert.EqualError(t, err, "t.yaml:4:12: tiers.pro.burst: must be at least 1, got 0\n"+
		"t.yaml:5:20: tiers.pro.max_in_flight: must be at least 1, got 0")
}

func TestYAMLAliasBombIsRefused(t *testing.T) {
	// Nine levels of ten aliases each would expand to 10^9 values.
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		p := "*a" + string(rune('0'+i-1))
		b.WriteString("a" + string(rune('0'+i)) + ": &a" + string(rune('0'+i)) + " [" + strings.Repeat(p+", ", 9) + p + "]\n")
	}
	b.WriteString(baseYAML)
	_, err := policy.Parse("t.yaml", []byte(b.String()), "yaml")
	require.Error(t, err)
	assert.ErrorIs(t, err, policy.ErrInvalid)
	assert.Contains(t, err.Error(), "more than 10000 values (after expanding aliases)")
}
