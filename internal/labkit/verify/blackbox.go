package verify

import (
	"context"
	"fmt"
	"go/ast"
	"go/types"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/packages"
)

// apiViolation is a test file's use of an identifier that is unexported and
// declared in a non-test file. Such a test would break on a learner's
// implementation that is correct but structured differently.
type apiViolation struct {
	Pos  string // file:line of the use
	Name string
}

func (v apiViolation) String() string { return v.Pos + ": uses unexported " + v.Name }

// blackBoxResult is what blackBoxUses found in one directory.
type blackBoxResult struct {
	Violations []apiViolation
	Err        error // the package could not be loaded or type-checked
}

// blackBoxUses type-checks the packages in dirs (relative to root) with
// their tests, in one load, and reports for each every use, in a *_test.go
// file, of an unexported object declared in a non-test file of the same
// package. race says whether the test runs use -race: the dependencies'
// export data then comes from the same build cache entries instead of a
// second, uninstrumented compile.
func blackBoxUses(ctx context.Context, root string, dirs []string, race bool) (map[string]blackBoxResult, error) {
	cfg := &packages.Config{
		Context: ctx,
		Dir:     root,
		Mode:    packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Tests:   true,
	}
	if race {
		cfg.BuildFlags = []string{"-race"}
	}
	patterns := make([]string, len(dirs))
	for i, d := range dirs {
		patterns[i] = "./" + filepath.ToSlash(d)
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", strings.Join(dirs, " "), err)
	}
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real // go list reports files by their real paths
	}
	out := map[string]blackBoxResult{}
	for _, p := range pkgs {
		// The test variant is the one whose files include the _test.go files.
		if !strings.Contains(p.ID, "[") || strings.HasSuffix(p.PkgPath, ".test") || len(p.GoFiles) == 0 {
			continue
		}
		dir, err := filepath.Rel(root, filepath.Dir(p.GoFiles[0]))
		if err != nil {
			continue
		}
		if len(p.Errors) > 0 {
			out[dir] = blackBoxResult{Err: fmt.Errorf("type-check %s: %v", dir, p.Errors[0])}
			continue
		}
		out[dir] = blackBoxResult{Violations: unexportedUses(p)}
	}
	for _, d := range dirs {
		if _, ok := out[filepath.Clean(d)]; !ok {
			out[filepath.Clean(d)] = blackBoxResult{Err: fmt.Errorf("%s: no tests found to type-check", d)}
		}
	}
	return out, nil
}

// unexportedUses lists the uses, in p's test files, of unexported objects
// declared in p's non-test files, sorted.
func unexportedUses(p *packages.Package) []apiViolation {
	var out []apiViolation
	seen := map[string]bool{}
	for _, f := range p.Syntax {
		file := p.Fset.Position(f.Pos()).Filename
		if !strings.HasSuffix(file, "_test.go") {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok {
				return true
			}
			obj := p.TypesInfo.Uses[id]
			if obj == nil || obj.Pkg() != p.Types || obj.Exported() || !obj.Pos().IsValid() {
				return true
			}
			if _, isLabel := obj.(*types.Label); isLabel {
				return true
			}
			if strings.HasSuffix(p.Fset.Position(obj.Pos()).Filename, "_test.go") {
				return true
			}
			use := p.Fset.Position(id.Pos())
			v := apiViolation{Pos: fmt.Sprintf("%s:%d", filepath.Base(use.Filename), use.Line), Name: obj.Name()}
			if !seen[v.String()] {
				seen[v.String()] = true
				out = append(out, v)
			}
			return true
		})
	}
	slices.SortFunc(out, func(a, b apiViolation) int { return strings.Compare(a.String(), b.String()) })
	return out
}
