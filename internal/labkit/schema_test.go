package labkit

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
`),
	"script.lua": []byte("return 1\n"),
}

// schemaMutants are edits of schemaRef: name → (file, old, new).
var schemaMutants = []struct {
	name, file, old, new string
	folds                bool
}{
	{"add-subtracts", "calc.go", "return a + b", "return a - b", true},
	{"push-ignores", "calc.go", "c.n += v", "c.n += 0", true},
	{"sum-skips-first", "calc.go", "for _, x := range xs {", "for _, x := range xs[1:] {", true},
	{"max-is-min", "calc.go", "if a > b {", "if a < b {", true},
	{"upper-lowers", "calc.go", "return strings.ToUpper(s)", "return strings.ToLower(s)", true},
	{"upper-trims-too", "calc.go", `import "strings"`, "import (\n\t\"strings\"\n\tu \"unicode\"\n)", false},
	{"upper-with-import", "calc.go", "return strings.ToUpper(s) }", "return strings.Map(unicode.ToUpper, s) }", true},
	{"base-changes", "calc.go", "const Base = 10", "const Base = 16", false},
	{"signature-changes", "calc.go", "func Add(a, b int) int { return a + b }", "func Add(a, b int64) int { return int(a + b) }", false},
	{"blank-param", "calc.go", "func Ignore(_ int) int { return 1 }", "func Ignore(_ int) int { return 2 }", false},
	{"init-changes", "calc.go", "func init() { _ = Base }", "func init() { _ = Base + 1 }", false},
	{"adds-a-function", "calc.go", "func Upper(", "func helper() {}\n\nfunc Upper(", false},
	{"script-changes", "script.lua", "return 1", "return 2", false},
	{"import-renamed", "calc.go", "import \"strings\"\n", "import str \"strings\"\n", false},
}

func schemaInputs(t *testing.T) []schemaMutant {
	t.Helper()
	var out []schemaMutant
	for _, m := range schemaMutants {
		src := string(schemaRef[m.file])
		require.Contains(t, src, m.old, m.name)
		patched := strings.Replace(src, m.old, m.new, 1)
		if m.name == "upper-with-import" {
			patched = strings.Replace(patched, `import "strings"`, "import (\n\t\"strings\"\n\t\"unicode\"\n)", 1)
		}
		out = append(out, schemaMutant{Name: m.name, Patched: map[string][]byte{m.file: []byte(patched)}})
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
	fmt.Printf("add=%d total=%d sum=%d max=%d maxf=%g upper=%s\n", Add(5, 2), c.Total(), Sum(1, 2, 3), Max(4, 7), Max(1.5, 0.5), Upper("aB"))
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
	ref := "add=7 total=5 sum=6 max=7 maxf=1.5 upper=AB"
	assert.Equal(t, ref, run(0), "0 is the reference")
	want := map[string]string{
		"add-subtracts":     "add=3 total=5 sum=6 max=7 maxf=1.5 upper=AB",
		"push-ignores":      "add=7 total=0 sum=6 max=7 maxf=1.5 upper=AB",
		"sum-skips-first":   "add=7 total=5 sum=5 max=7 maxf=1.5 upper=AB",
		"max-is-min":        "add=7 total=5 sum=6 max=4 maxf=0.5 upper=AB",
		"upper-lowers":      "add=7 total=5 sum=6 max=7 maxf=1.5 upper=ab",
		"upper-with-import": "add=7 total=5 sum=6 max=7 maxf=1.5 upper=AB",
	}
	for name, w := range want {
		assert.Equal(t, w, run(s.IDs[name]), "%s runs as itself and nothing else", name)
	}
	assert.Equal(t, ref, run(len(s.IDs)+1), "a number no mutant has is the reference")
}
