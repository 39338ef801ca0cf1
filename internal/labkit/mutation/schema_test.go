package mutation

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// schemaRef is a reference with one of each kind of declaration a mutant
// may touch.
var schemaRef = map[string][]byte{
	"calc.go": []byte(`package calc

import "strings"

const Base = 10

type Acc struct{ n int }

func init() { _ = Base }

// Add is what most mutants change.
func Add(a, b int) int { return a + b }

func (c *Acc) Push(v int) { c.n += v }

func (c *Acc) Total() int { return c.n }

func Sum(xs ...int) (total int) {
	for _, x := range xs {
		total += x
	}
	return
}

func Max[T int | float64](a, b T) T {
	if a > b {
		return a
	}
	return b
}

func Upper(s string) string { return strings.ToUpper(s) }

func Ignore(_ int) int { return 1 }

//go:noinline
func Pinned() int { return 1 }

func Zero[_ any]() int { return 0 }

type starter interface{ start() int }

type realStarter struct{}

func (r realStarter) start() int { return 1 }

var theStarter starter = realStarter{}

// Started is set before main, through an interface: the compiler sees no
// dependency on the mutant switch.
var Started = theStarter.start()
`),
	"script.lua": []byte("return 1\n"),
}

// schemaMutants are edits of schemaRef: each a list of (old, new)
// replacements in one file.
var schemaMutants = []struct {
	name, file string
	edits      [][2]string
	folds      bool
}{
	{"add-subtracts", "calc.go", [][2]string{{"return a + b", "return a - b"}}, true},
	{"push-ignores", "calc.go", [][2]string{{"c.n += v", "c.n += 0"}}, true},
	{"sum-skips-first", "calc.go", [][2]string{{"for _, x := range xs {", "for _, x := range xs[1:] {"}}, true},
	{"max-is-min", "calc.go", [][2]string{{"if a > b {", "if a < b {"}}, true},
	{"upper-lowers", "calc.go", [][2]string{{"return strings.ToUpper(s)", "return strings.ToLower(s)"}}, true},
	{"upper-with-import", "calc.go", [][2]string{{"return strings.ToUpper(s) }", "return strings.Map(unicode.ToUpper, s) }"},
		{`import "strings"`, "import (\n\t\"strings\"\n\t\"unicode\"\n)"}}, true},
	{"starter-says-two", "calc.go", [][2]string{{"func (r realStarter) start() int { return 1 }", "func (r realStarter) start() int { return 2 }"}}, true},
	{"add-uses-rand", "calc.go", [][2]string{{"return a + b", "return a + b + rand.Intn(1)"}, {`import "strings"`, "import (\n\t\"math/rand\"\n\t\"strings\"\n)"}}, true},
	// The same name as add-uses-rand's import, another path: not in one build.
	{"add-uses-rand-v2", "calc.go", [][2]string{{"return a + b", "return a + b + rand.IntN(1)"}, {`import "strings"`, "import (\n\t\"math/rand/v2\"\n\t\"strings\"\n)"}}, false},
	{"imports-only", "calc.go", [][2]string{{`import "strings"`, "import (\n\t\"strings\"\n\tu \"unicode\"\n)"}}, false},
	{"upper-leaves-strings-unused", "calc.go", [][2]string{{"return strings.ToUpper(s)", "return s"}}, false},
	{"adds-a-blank-import", "calc.go", [][2]string{{"return a + b", "return b + a"}, {`import "strings"`, "import (\n\t_ \"expvar\"\n\t\"strings\"\n)"}}, false},
	{"base-changes", "calc.go", [][2]string{{"const Base = 10", "const Base = 16"}}, false},
	{"signature-changes", "calc.go", [][2]string{{"func Add(a, b int) int { return a + b }", "func Add(a, b int64) int { return int(a + b) }"}}, false},
	{"doc-changes-too", "calc.go", [][2]string{{"// Add is what most mutants change.", "//go:noinline"}, {"return a + b", "return a * b"}}, false},
	{"blank-param", "calc.go", [][2]string{{"func Ignore(_ int) int { return 1 }", "func Ignore(_ int) int { return 2 }"}}, false},
	{"directive-kept-off", "calc.go", [][2]string{{"func Pinned() int { return 1 }", "func Pinned() int { return 2 }"}}, false},
	{"blank-type-param", "calc.go", [][2]string{{"func Zero[_ any]() int { return 0 }", "func Zero[_ any]() int { return 1 }"}}, false},
	{"init-changes", "calc.go", [][2]string{{"func init() { _ = Base }", "func init() { _ = Base + 1 }"}}, false},
	{"adds-a-function", "calc.go", [][2]string{{"func Upper(", "func helper() {}\n\nfunc Upper("}}, false},
	{"script-changes", "script.lua", [][2]string{{"return 1", "return 2"}}, false},
	{"import-renamed", "calc.go", [][2]string{{"import \"strings\"\n", "import str \"strings\"\n"}, {"strings.ToUpper", "str.ToUpper"}}, false},
}

func schemaInputs(t *testing.T) []SchemaMutant {
	t.Helper()
	var out []SchemaMutant
	for _, m := range schemaMutants {
		src := string(schemaRef[m.file])
		for _, e := range m.edits {
			require.Contains(t, src, e[0], m.name)
			src = strings.Replace(src, e[0], e[1], 1)
		}
		out = append(out, SchemaMutant{Name: m.name, Patched: map[string][]byte{m.file: []byte(src)}})
	}
	return out
}

func TestSchemaFoldsBodyChangesOnlyAndNumbersThemFromOne(t *testing.T) {
	t.Parallel()
	s, err := buildMutantSchema(schemaRef, schemaInputs(t))
	require.NoError(t, err)
	for _, m := range schemaMutants {
		_, ok := s.IDs[m.name]
		assert.Equal(t, m.folds, ok, "%s: folds", m.name)
	}
	seen := map[int]bool{}
	for name, id := range s.IDs {
		assert.False(t, seen[id], "%s: number %d given twice", name, id)
		assert.Positive(t, id, "%s: 0 is the reference", name)
		seen[id] = true
	}
	assert.Equal(t, schemaRef["script.lua"], s.Files["script.lua"], "a file that is not Go is laid as it is")
	assert.Contains(t, string(s.Files[schemaSwitchFile]), schemaEnv)
	for name := range schemaRef {
		assert.Less(t, schemaSwitchFile, name, "the switch's file sorts first, so it is set before any other file's variables")
	}
	// The reference's lines keep their numbers: a panic's line or a
	// coverage block still points where the reader looks.
	refLines := strings.Split(string(schemaRef["calc.go"]), "\n")
	gotLines := strings.Split(string(s.Files["calc.go"]), "\n")
	require.Greater(t, len(gotLines), len(refLines))
	for i, l := range refLines {
		if !strings.Contains(gotLines[i], "labctlMutant") && !strings.HasPrefix(gotLines[i], "import") {
			assert.Equal(t, l, gotLines[i], "line %d", i+1)
		}
	}
}

func TestSchemaRunsEachMutantByItsNumberAndTheReferenceByZero(t *testing.T) {
	t.Parallel()
	s, err := buildMutantSchema(schemaRef, schemaInputs(t))
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module calc\n\ngo 1.25\n"), 0o644))
	for name, b := range s.Files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "show_test.go"), []byte(`package calc

import (
	"fmt"
	"testing"
)

func TestShow(t *testing.T) {
	var c Acc
	c.Push(2)
	c.Push(3)
	fmt.Printf("add=%d total=%d sum=%d max=%d maxf=%g upper=%s started=%d\n", Add(5, 2), c.Total(), Sum(1, 2, 3), Max(4, 7), Max(1.5, 0.5), Upper("aB"), Started)
}
`), 0o644))
	bin := filepath.Join(dir, "calc.test")
	build := exec.CommandContext(t.Context(), "go", "test", "-c", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	run := func(id int) string {
		cmd := exec.CommandContext(t.Context(), bin, "-test.run=TestShow")
		cmd.Env = append(os.Environ(), schemaEnv+"="+strconv.Itoa(id))
		out, err := cmd.Output()
		require.NoError(t, err)
		line, _, _ := strings.Cut(string(out), "\n")
		return line
	}
	ref := "add=7 total=5 sum=6 max=7 maxf=1.5 upper=AB started=1"
	assert.Equal(t, ref, run(0), "0 is the reference")
	want := map[string]string{
		"add-subtracts":     "add=3 total=5 sum=6 max=7 maxf=1.5 upper=AB started=1",
		"push-ignores":      "add=7 total=0 sum=6 max=7 maxf=1.5 upper=AB started=1",
		"sum-skips-first":   "add=7 total=5 sum=5 max=7 maxf=1.5 upper=AB started=1",
		"max-is-min":        "add=7 total=5 sum=6 max=4 maxf=0.5 upper=AB started=1",
		"upper-lowers":      "add=7 total=5 sum=6 max=7 maxf=1.5 upper=ab started=1",
		"upper-with-import": "add=7 total=5 sum=6 max=7 maxf=1.5 upper=AB started=1",
		"add-uses-rand":     "add=7 total=5 sum=6 max=7 maxf=1.5 upper=AB started=1",
		"starter-says-two":  "add=7 total=5 sum=6 max=7 maxf=1.5 upper=AB started=2",
	}
	for name, w := range want {
		assert.Equal(t, w, run(s.IDs[name]), "%s runs as itself and nothing else", name)
	}
	assert.Equal(t, ref, run(len(s.IDs)+1), "a number no mutant has is the reference")
}
