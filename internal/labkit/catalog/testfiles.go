package catalog

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// TestFiles lists the *_test.go file names in dir, sorted.
func TestFiles(dir string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = filepath.Base(m)
	}
	slices.Sort(names)
	return names, nil
}

// TestFuncs returns the top-level test functions (func TestX(t *testing.T))
// declared in the given Go sources, in declaration order. TestMain is not a
// test.
func TestFuncs(sources map[string][]byte) ([]string, error) { return testFuncs(sources, false) }

// ExerciseTestFuncs is TestFuncs without the tests of files behind a build
// constraint (lab 07's prove_test.go): a plain go test never runs them, so
// they are no exercise tests — not graded, not required red on a stub.
func ExerciseTestFuncs(sources map[string][]byte) ([]string, error) { return testFuncs(sources, true) }

func testFuncs(sources map[string][]byte, skipConstrained bool) ([]string, error) {
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range sources {
			if !yield(n) {
				return
			}
		}
	})
	fset := token.NewFileSet()
	var tests []string
	for _, name := range names {
		f, err := parser.ParseFile(fset, name, sources[name], parser.SkipObjectResolution|parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		if skipConstrained && constrained(f) {
			continue
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !isTestName(fn.Name.Name) || fn.Type.Params.NumFields() != 1 {
				continue
			}
			tests = append(tests, fn.Name.Name)
		}
	}
	return tests, nil
}

// constrained reports whether f has a //go:build line before its package
// clause.
func constrained(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() >= f.Package {
			break
		}
		for _, c := range g.List {
			if constraint.IsGoBuild(c.Text) {
				return true
			}
		}
	}
	return false
}

func isTestName(name string) bool {
	if name == "TestMain" || !strings.HasPrefix(name, "Test") {
		return false
	}
	rest := name[len("Test"):]
	return rest == "" || !(rest[0] >= 'a' && rest[0] <= 'z')
}

// ReadTestSources reads every *_test.go file in dir.
func ReadTestSources(dir string) (map[string][]byte, error) {
	names, err := TestFiles(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(names))
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, err
		}
		out[n] = b
	}
	return out, nil
}

// TestDiff describes how a lab's test files differ from its solution's.
type TestDiff struct {
	OnlyInLab      []string
	OnlyInSolution []string
	Differ         []string
}

// Empty reports whether the two sets of tests are byte-identical.
func (d TestDiff) Empty() bool {
	return len(d.OnlyInLab)+len(d.OnlyInSolution)+len(d.Differ) == 0
}

func (d TestDiff) String() string {
	var parts []string
	if len(d.Differ) > 0 {
		parts = append(parts, "differ: "+strings.Join(d.Differ, ", "))
	}
	if len(d.OnlyInLab) > 0 {
		parts = append(parts, "only in labs/: "+strings.Join(d.OnlyInLab, ", "))
	}
	if len(d.OnlyInSolution) > 0 {
		parts = append(parts, "only in solutions/: "+strings.Join(d.OnlyInSolution, ", "))
	}
	return strings.Join(parts, "; ")
}

// CompareTests compares the *_test.go files of a lab with the pristine ones
// (its solution's, or a template's archive) byte by byte.
func CompareTests(root string, l Lab) (TestDiff, error) {
	lab, err := ReadTestSources(filepath.Join(root, l.LabDir()))
	if err != nil {
		return TestDiff{}, err
	}
	sol, err := PristineTests(root, l)
	if err != nil {
		return TestDiff{}, err
	}
	return DiffSources(lab, sol), nil
}

func DiffSources(lab, sol map[string][]byte) TestDiff {
	var d TestDiff
	for n, b := range lab {
		s, ok := sol[n]
		switch {
		case !ok:
			d.OnlyInLab = append(d.OnlyInLab, n)
		case !bytes.Equal(b, s):
			d.Differ = append(d.Differ, n)
		}
	}
	for n := range sol {
		if _, ok := lab[n]; !ok {
			d.OnlyInSolution = append(d.OnlyInSolution, n)
		}
	}
	slices.Sort(d.OnlyInLab)
	slices.Sort(d.OnlyInSolution)
	slices.Sort(d.Differ)
	return d
}

// todoMarker tags the places a stub asks the learner to fill in.
const todoMarker = "TODO(lab "

// FilesToEdit lists the files of a lab the learner writes: the non-test
// files that still carry a TODO(lab NN) marker, Go or not (lab 07's Lua
// script is one), sorted. When no marker is left, every non-test source
// file is listed.
func FilesToEdit(root string, l Lab) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, l.LabDir()))
	if err != nil {
		return nil, err
	}
	var marked, all []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasSuffix(name, "_test.go") || strings.HasSuffix(name, ".md") {
			continue
		}
		all = append(all, name)
		b, err := os.ReadFile(filepath.Join(root, l.LabDir(), name))
		if err != nil {
			return nil, err
		}
		if bytes.Contains(b, []byte(todoMarker)) {
			marked = append(marked, name)
		}
	}
	if len(marked) == 0 {
		return all, nil
	}
	return marked, nil
}

// FuncName is the name a function declaration is known by: Recv.Name for
// a method, the plain name for a function.
func FuncName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return d.Name.Name
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.Ident:
		return x.Name + "." + d.Name.Name
	case *ast.IndexExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return id.Name + "." + d.Name.Name
		}
	case *ast.IndexListExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return id.Name + "." + d.Name.Name
		}
	}
	return d.Name.Name
}
