package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestErrorsComeFromTheCatalogue: every OpenAI error the gateway, its
// tenant gate, its simulated upstreams and the tools build takes its
// status, type and code from gateway/chatapi's catalogue (catalogue.go),
// never from a literal written where it is used. Non-test code only: a
// test spells what it expects.
func TestErrorsComeFromTheCatalogue(t *testing.T) {
	r := root(t)
	var found []string
	for _, top := range []string{"gateway", "solutions", "cmd"} {
		require.NoError(t, filepath.WalkDir(filepath.Join(r, top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			rel, _ := filepath.Rel(r, p)
			rel = filepath.ToSlash(rel)
			if rel == "gateway/chatapi/catalogue.go" {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			inChatapi := f.Name.Name == "chatapi"
			ast.Inspect(f, func(n ast.Node) bool {
				lit, ok := n.(*ast.CompositeLit)
				if !ok || !isErrorType(lit.Type, inChatapi) {
					return true
				}
				for _, el := range lit.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key, _ := kv.Key.(*ast.Ident)
					if key == nil || (key.Name != "Status" && key.Name != "Type" && key.Name != "Code") {
						continue
					}
					if _, ok := kv.Value.(*ast.BasicLit); ok {
						found = append(found, fset.Position(kv.Pos()).String()+": "+key.Name+" written by hand")
					} else if sel, ok := kv.Value.(*ast.SelectorExpr); ok && key.Name == "Status" {
						if x, ok := sel.X.(*ast.Ident); ok && x.Name == "http" {
							found = append(found, fset.Position(kv.Pos()).String()+": Status written by hand")
						}
					}
				}
				return true
			})
			return nil
		}))
	}
	for _, f := range found {
		t.Errorf("%s: take the failure from gateway/chatapi's catalogue (chatapi.ModelNotFound.New(msg)), or add it there", f)
	}
}

// isErrorType reports whether a composite literal's type is chatapi.Error
// or chatapi.Failure (Error or Failure inside package chatapi).
func isErrorType(e ast.Expr, inChatapi bool) bool {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	switch t := e.(type) {
	case *ast.SelectorExpr:
		x, ok := t.X.(*ast.Ident)
		return ok && x.Name == "chatapi" && (t.Sel.Name == "Error" || t.Sel.Name == "Failure")
	case *ast.Ident:
		return inChatapi && (t.Name == "Error" || t.Name == "Failure")
	}
	return false
}
