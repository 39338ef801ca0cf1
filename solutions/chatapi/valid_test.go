package chatapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// validSeeds are bodies at the edges of JSON's grammar and of the nesting
// limit, for valid's two validators to agree on.
var validSeeds = []string{
	`{"a":1}`, `[1,2,{"b":"c\u00e9"}]`, `1e5`, `-0.0E-1`, `"\ud800"`, `{"a":tru}`, `01`, "\"a\x01\"", "\"\xff\"",
	`{"a":1,}`, ` {} `, `{"a" : [ ] }`, `"\/"`, `1.`, `.5`, `-`, `[1 2]`, `{"a":1}x`, `nul`, `[]]`, `"\\"`, `"\\\"[["`,
	`{"a":"]]]]"}`, `[[[["\"]"]]]]`, "", "   ",
}

func validAsEncodingJSON(b []byte) bool { return len(bytes.TrimSpace(b)) > 0 && json.Valid(b) }

func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range validSeeds {
		assert.Equal(t, validAsEncodingJSON([]byte(s)), valid([]byte(s)) == nil, "%q", s)
	}
}

func FuzzValidAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if want, got := validAsEncodingJSON(b), valid(b) == nil; want != got {
			t.Fatalf("%q: encoding/json says valid=%v, valid says %v", b, want, got)
		}
	})
}

// The fast validator has no nesting limit; encoding/json stops at 10,000
// levels, and so must valid, counting only brackets outside strings.
func TestValidRefusesNestingPastEncodingJSONsLimit(t *testing.T) {
	nest := func(n int, inner string) []byte {
		return []byte(strings.Repeat("[", n) + inner + strings.Repeat("]", n))
	}
	assert.NoError(t, valid(nest(maxNesting, "")), "10,000 levels")
	assert.Error(t, valid(nest(maxNesting+1, "")), "10,001 levels")
	assert.Error(t, valid(nest(maxNesting+1, `"\\"`)), "10,001 levels around a string ending in an escaped backslash")
	assert.NoError(t, valid(nest(maxNesting, `"`+strings.Repeat("[", 2*maxNesting)+`"`)), "brackets in a string are text")
	assert.NoError(t, valid(nest(maxNesting, `"\"`+strings.Repeat("{", 2*maxNesting)+`"`)), "an escaped quote does not end the string")
	assert.Error(t, valid(nest(maxNesting, `"\\",[1]`)), "an escaped backslash does end it: 10,001 levels")

	assert.True(t, nestedWithin([]byte(`[[1]]`), 2))
	assert.False(t, nestedWithin([]byte(`[[1]]`), 1))
	assert.False(t, nestedWithin([]byte(`{"a":{"b":1}}`), 1), "objects count as arrays do")
	assert.True(t, nestedWithin([]byte(`["[[[", "\\\"{{{"]`), 1))
}
