package chatapi

import (
	"bytes"
	"encoding/json"
	"runtime"
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

func nest(n int, inner string) []byte {
	return []byte(strings.Repeat("[", n) + inner + strings.Repeat("]", n))
}

// The fast validator has no nesting limit; encoding/json stops at 10,000
// levels, and so must valid, counting only brackets outside strings.
func TestValidRefusesNestingPastEncodingJSONsLimit(t *testing.T) {
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

// Either side of the depth where ValidJSON hands over from gjson's
// validator to encoding/json's, valid and not, the answer is
// encoding/json's.
func TestValidJSONAgreesAtTheHandOver(t *testing.T) {
	for _, n := range []int{fastNesting - 1, fastNesting, fastNesting + 1} {
		for _, inner := range []string{"", "1", "1,", `"]"`, "tru"} {
			b := nest(n, inner)
			assert.Equal(t, json.Valid(b), ValidJSON(b), "%d levels around %q", n, inner)
		}
	}
}

// gjson's validator recurses once a level: 10,000 levels of brackets would
// grow the goroutine's stack by a megabyte. ValidJSON gives such a body to
// encoding/json, which keeps its nesting on the heap.
func TestValidJSONKeepsDeepNestingOffTheStack(t *testing.T) {
	body := nest(maxNesting, "")
	grown := make(chan int64)
	go func() {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		ok := ValidJSON(body)
		runtime.ReadMemStats(&after)
		if !ok {
			grown <- -1
			return
		}
		grown <- int64(after.StackInuse) - int64(before.StackInuse)
	}()
	g := <-grown
	assert.NotEqual(t, int64(-1), g, "10,000 levels are valid JSON")
	assert.Less(t, g, int64(256<<10), "stack grown by validating 10,000 levels (gjson's recursion: about 1 MiB)")
}
