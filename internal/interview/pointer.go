package interview

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Pointer is a place in the repository the material sends a reader to: a
// file, optionally with Go identifiers declared in it, or a go test
// command whose -run pattern selects tests in its package.
type Pointer struct {
	Path   string   // a file, or the package directory of a go test command
	Idents []string // "Router.Stream", "Serve"; none for a bare file
	Run    string   // the -run pattern of a go test command
}

func (p Pointer) String() string {
	if p.Run != "" {
		return fmt.Sprintf("go test -run '%s' ./%s/", p.Run, p.Path)
	}
	if len(p.Idents) == 0 {
		return p.Path
	}
	return p.Path + " " + strings.Join(p.Idents, ", ")
}

var (
	// `gateway/router/stream.go` `Router.Stream`, `streamer.attempt`
	filePointer = regexp.MustCompile("`((?:cmd|internal|solutions|gateway|labs|docs|deploy|scripts|checklist)/[A-Za-z0-9_./-]+\\.[a-z]+)`" +
		"((?:,?[ \\t]+`[A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)?`)*)")
	identSpan = regexp.MustCompile("`([^`]+)`")
	fileName  = regexp.MustCompile(`\.(go|md|lua|json|ya?ml|sh|txt|patch)$`)
	// `go test -run 'TestX|TestY' ./solutions/02-admission/`
	testCommand = regexp.MustCompile("`go test [^`]*?-run '([^']+)' [^`]*?\\./([A-Za-z0-9_./-]+?)/?`")
)

// Pointers finds the code pointers in a Markdown text.
func Pointers(text string) []Pointer {
	var out []Pointer
	for _, m := range filePointer.FindAllStringSubmatch(text, -1) {
		p := Pointer{Path: m[1]}
		for _, id := range identSpan.FindAllStringSubmatch(m[2], -1) {
			if fileName.MatchString(id[1]) {
				break // "`a/b.go`, `c.go`": a second file, not a declaration
			}
			p.Idents = append(p.Idents, id[1])
		}
		out = append(out, p)
	}
	for _, m := range testCommand.FindAllStringSubmatch(text, -1) {
		out = append(out, Pointer{Path: m[2], Run: m[1]})
	}
	return out
}

// Resolve checks the pointer against the repository at root: the file
// exists and declares each identifier at top level (a method as
// Type.Method), or the package's tests hold one the -run pattern selects.
func (p Pointer) Resolve(root string) error {
	path := filepath.Join(root, filepath.FromSlash(p.Path))
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s: no such file or directory", p.Path)
	}
	if p.Run != "" {
		return p.resolveRun(path)
	}
	if len(p.Idents) == 0 {
		return nil
	}
	if !strings.HasSuffix(p.Path, ".go") {
		return fmt.Errorf("%s: identifiers name Go declarations, and this is not a Go file", p)
	}
	decls, err := declared(path)
	if err != nil {
		return err
	}
	for _, id := range p.Idents {
		if !decls[id] {
			return fmt.Errorf("%s declares no %s", p.Path, id)
		}
	}
	return nil
}

// resolveRun: each alternative of the pattern's first level (split at |
// when it has no groups; subtests are not looked for) selects some test
// of the directory, so a renamed test cannot hide behind another.
func (p Pointer) resolveRun(dir string) error {
	first, _, _ := strings.Cut(p.Run, "/")
	if first == "^$" {
		return nil // no test on purpose: a benchmark's command
	}
	alts := []string{first}
	if !strings.ContainsAny(first, "()") {
		alts = strings.Split(first, "|")
	}
	tests, err := testsIn(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	for _, alt := range alts {
		re, err := regexp.Compile(alt)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if !slices.ContainsFunc(tests, re.MatchString) {
			return fmt.Errorf("%s: no test in %s matches %s", p, p.Path, alt)
		}
	}
	return nil
}

// testsIn lists the test functions of a directory's test files.
func testsIn(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil || len(files) == 0 {
		return nil, errors.New("no test files")
	}
	var tests []string
	for _, f := range files {
		decls, err := declared(f)
		if err != nil {
			return nil, err
		}
		for name := range decls {
			if strings.HasPrefix(name, "Test") && !strings.Contains(name, ".") {
				tests = append(tests, name)
			}
		}
	}
	return tests, nil
}

// declared is every top-level name a Go file declares: functions, methods
// as Type.Method, types, variables and constants.
func declared(path string) (map[string]bool, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = receiver(d.Recv.List[0].Type) + "." + name
			}
			out[name] = true
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = true
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out[n.Name] = true
					}
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, errors.New(path + ": declares nothing")
	}
	return out, nil
}

func receiver(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return receiver(e.X)
	case *ast.IndexExpr:
		return receiver(e.X)
	case *ast.IndexListExpr:
		return receiver(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}
