package verify

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
)

// A lab's reference exports exactly its stub's API: the product may need
// more of a lab's package, but it builds that in its own packages (a
// wrapper, a type of its own), so that the reference a learner reads next to
// their own answer is the answer to the lab and nothing else. The stub may
// export ErrNotImplemented, which the reference has no use for.

// stubOnly are names a stub may export that its reference does not.
var stubOnly = []string{"ErrNotImplemented"}

// exportedAPI lists a package directory's exported API, one line a name: its
// functions and methods with their signatures (parameter names left out),
// its types, its exported struct fields with their types, its variables
// and constants. Test files are not read.
func exportedAPI(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			out = append(out, declExports(fset, d)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func declExports(fset *token.FileSet, d ast.Decl) []string {
	show := func(n ast.Node) string {
		var b bytes.Buffer
		_ = printer.Fprint(&b, fset, n)
		return b.String()
	}
	types := func(fl *ast.FieldList) string {
		if fl == nil {
			return ""
		}
		var ts []string
		for _, f := range fl.List {
			for range max(1, len(f.Names)) {
				ts = append(ts, show(f.Type))
			}
		}
		return strings.Join(ts, ", ")
	}
	var out []string
	switch d := d.(type) {
	case *ast.FuncDecl:
		if !d.Name.IsExported() {
			return nil
		}
		name := d.Name.Name
		if d.Recv != nil {
			recv := catalog.FuncName(d)
			if !ast.IsExported(strings.TrimSuffix(recv, "."+name)) {
				return nil // a method of an unexported type is no one's API
			}
			name = recv
		}
		out = append(out, fmt.Sprintf("func %s(%s) (%s)", name, types(d.Type.Params), types(d.Type.Results)))
	case *ast.GenDecl:
		for _, s := range d.Specs {
			switch s := s.(type) {
			case *ast.TypeSpec:
				if !s.Name.IsExported() {
					continue
				}
				out = append(out, "type "+s.Name.Name)
				if st, ok := s.Type.(*ast.StructType); ok {
					for _, f := range st.Fields.List {
						for _, n := range f.Names {
							if n.IsExported() {
								out = append(out, fmt.Sprintf("field %s.%s %s", s.Name.Name, n.Name, show(f.Type)))
							}
						}
					}
				}
			case *ast.ValueSpec:
				for _, n := range s.Names {
					if n.IsExported() {
						out = append(out, d.Tok.String()+" "+n.Name)
					}
				}
			}
		}
	}
	return out
}

// exportDiff is what the reference exports that the stub does not, and
// the other way round.
func exportDiff(stub, ref []string) (extra, missing []string) {
	for _, e := range ref {
		if !slices.Contains(stub, e) {
			extra = append(extra, e)
		}
	}
	for _, e := range stub {
		if !slices.Contains(ref, e) && !slices.ContainsFunc(stubOnly, func(n string) bool { return strings.HasSuffix(e, " "+n) }) {
			missing = append(missing, e)
		}
	}
	return extra, missing
}
