package mutation

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// A mutant schema builds many mutants into one package, so one compile and
// one link serve them all (Untch, Offutt and Harrold's "mutant schemata").
// Each function a mutant changes keeps its name and gains a first line
// that hands the call to the mutant's copy of it when the test binary runs
// with LABCTL_MUTANT set to that mutant's number:
//
//	func (b *Breaker) Allow() error {
//		if labctlMutant == 3 { return b.labctlM3Allow() }
//		…the reference's body…
//	}
//
// Only mutants that change function bodies fold in this way; one that
// changes a declaration, a signature or init builds on its own, as before.

// schemaSwitchFile is the file the schema adds to the package: the number
// of the mutant the binary runs as, 0 for none. Its name sorts before any
// other (go build hands the compiler files in name order), so the switch
// is set before any package variable whose initialiser reaches a mutated
// function through an interface or a func value, where the compiler sees
// no dependency.
const schemaSwitchFile = "0labctl_mutant.go"

// schemaEnv names the mutant a schema binary runs as.
const schemaEnv = "LABCTL_MUTANT"

// mutantSchema is the reference's files with the foldable mutants in them.
type mutantSchema struct {
	Files map[string][]byte // every reference file, plus schemaSwitchFile
	IDs   map[string]int    // mutant name → the number that selects it
}

// SchemaMutant is one mutant's patched files, by name.
type SchemaMutant struct {
	Name    string
	Patched map[string][]byte
}

// schemaFile is one reference file being rewritten.
type schemaFile struct {
	src     []byte
	fset    *token.FileSet
	file    *ast.File
	imports map[string]string // path → name ("" when unnamed)
	added   map[string]string // imports the copies need, path → name
	inserts []schemaInsert
	copies  []string
}

type schemaInsert struct {
	at   int
	text string
}

// buildMutantSchema folds every mutant it can into the reference; the
// others are left out of IDs. An error means the reference itself could
// not be read.
func buildMutantSchema(ref map[string][]byte, mutants []SchemaMutant) (*mutantSchema, error) {
	files := map[string]*schemaFile{}
	pkg := ""
	s := &mutantSchema{Files: map[string][]byte{}, IDs: map[string]int{}}
	for name, src := range ref {
		if !strings.HasSuffix(name, ".go") {
			s.Files[name] = src // a script the package embeds, say: as it is
			continue
		}
		f, err := parseSchemaFile(name, src)
		if err != nil {
			return nil, err
		}
		files[name] = f
		if pkg != "" && f.file.Name.Name != pkg {
			return nil, fmt.Errorf("the reference's files are in packages %s and %s", pkg, f.file.Name.Name)
		}
		pkg = f.file.Name.Name
	}
	if pkg == "" {
		return nil, errors.New("the reference has no Go files")
	}
	next := 1
	for _, m := range mutants {
		plan, ok := planMutant(files, m.Patched, next)
		if !ok {
			continue
		}
		for name, p := range plan {
			f := files[name]
			f.inserts = append(f.inserts, p.inserts...)
			f.copies = append(f.copies, p.copies...)
			maps.Copy(f.added, p.added)
		}
		s.IDs[m.Name] = next
		next++
	}
	for name, f := range files {
		s.Files[name] = f.render()
	}
	s.Files[schemaSwitchFile] = []byte(fmt.Sprintf(`package %s

import (
	labctlOS "os"
	labctlStrconv "strconv"
)

// labctlMutant is the mutant this test binary runs as (labctl write); 0 is
// the reference.
var labctlMutant, _ = labctlStrconv.Atoi(labctlOS.Getenv(%q))
`, pkg, schemaEnv))
	return s, nil
}

func parseSchemaFile(name string, src []byte) (*schemaFile, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	f := &schemaFile{src: src, fset: fset, file: file, imports: map[string]string{}, added: map[string]string{}}
	for _, is := range file.Imports {
		path, _ := strconv.Unquote(is.Path.Value)
		f.imports[path] = importName(is)
	}
	return f, nil
}

func importName(is *ast.ImportSpec) string {
	if is.Name != nil {
		return is.Name.Name
	}
	return ""
}

func (f *schemaFile) text(n ast.Node) string {
	return string(f.src[f.offset(n.Pos()):f.offset(n.End())])
}

func (f *schemaFile) offset(p token.Pos) int { return f.fset.Position(p).Offset }

// filePlan is what one mutant adds to one reference file.
type filePlan struct {
	inserts []schemaInsert
	copies  []string
	added   map[string]string
}

// planMutant works out how mutant id folds into each file it patches, or
// reports that it does not fold.
func planMutant(files map[string]*schemaFile, patched map[string][]byte, id int) (map[string]filePlan, bool) {
	plans := map[string]filePlan{}
	for name, src := range patched {
		orig, ok := files[name]
		if !ok {
			return nil, false
		}
		mut, err := parseSchemaFile(name, src)
		if err != nil || mut.file.Name.Name != orig.file.Name.Name {
			return nil, false
		}
		plan, ok := planFile(orig, mut, id)
		if !ok {
			return nil, false
		}
		plans[name] = plan
	}
	// Imports other mutants added to the file: one path under two names,
	// or two paths under one name, would not compile together.
	for name, p := range plans {
		for path, as := range p.added {
			n, _ := importedName(path, as)
			for have, hasAs := range files[name].added {
				hn, _ := importedName(have, hasAs)
				if (have == path && hasAs != as) || (have != path && hn == n) {
					return nil, false
				}
			}
		}
	}
	return plans, true
}

// planFile matches a mutated file to the reference's declaration by
// declaration: everything but function bodies must be the same.
func planFile(orig, mut *schemaFile, id int) (filePlan, bool) {
	plan := filePlan{added: map[string]string{}}
	// A name the reference's file uses before a dot that the mutant's no
	// longer does may be an import it left unused, which would not
	// compile on its own: such a mutant builds alone.
	origUsed, used := usedNames(orig.file), usedNames(mut.file)
	declared := declaredNames(orig.file)
	for name := range origUsed {
		if !used[name] && !declared[name] {
			return plan, false
		}
	}
	for path, as := range mut.imports {
		have, ok := orig.imports[path]
		if ok {
			if have != as {
				return plan, false
			}
			continue
		}
		// An import the mutant adds: its name must be known and used, and
		// free in the file (a blank or dot import would run or reach
		// into every mutant's build).
		name, ok := importedName(path, as)
		if !ok || !used[name] {
			return plan, false
		}
		for p, a := range orig.imports {
			if n, known := importedName(p, a); !known || n == name {
				return plan, false
			}
		}
		plan.added[path] = as
	}
	od, md := nonImportDecls(orig.file), nonImportDecls(mut.file)
	if len(od) != len(md) {
		return plan, false
	}
	changed := false
	for i := range od {
		of, ok1 := od[i].(*ast.FuncDecl)
		mf, ok2 := md[i].(*ast.FuncDecl)
		if ok1 != ok2 {
			return plan, false
		}
		if !ok1 {
			if orig.text(od[i]) != mut.text(md[i]) {
				return plan, false
			}
			continue
		}
		if of.Name.Name != mf.Name.Name || docText(orig, of.Doc) != docText(mut, mf.Doc) ||
			orig.text(of.Type) != mut.text(mf.Type) ||
			(of.Recv == nil) != (mf.Recv == nil) || (of.Recv != nil && orig.text(of.Recv) != mut.text(mf.Recv)) ||
			of.Body == nil || mf.Body == nil {
			return plan, false
		}
		if orig.text(of.Body) == mut.text(mf.Body) {
			continue
		}
		if hasDirective(of.Doc) {
			return plan, false // the copy would not carry it
		}
		changed = true
		ins, cp, ok := foldFunc(orig, of, mut, mf, id)
		if !ok {
			return plan, false
		}
		plan.inserts = append(plan.inserts, ins)
		plan.copies = append(plan.copies, cp)
	}
	// A file whose functions are all as they were changed only its
	// imports: nothing to fold (and an import it adds would be unused).
	return plan, changed
}

func nonImportDecls(f *ast.File) []ast.Decl {
	var out []ast.Decl
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			continue
		}
		out = append(out, d)
	}
	return out
}

// foldFunc is the dispatch line for the reference's function and the
// mutant's copy of it under a name of its own.
func foldFunc(orig *schemaFile, of *ast.FuncDecl, mut *schemaFile, mf *ast.FuncDecl, id int) (schemaInsert, string, bool) {
	if of.Name.Name == "init" || of.Name.Name == "main" && of.Recv == nil {
		return schemaInsert{}, "", false
	}
	copyName := fmt.Sprintf("labctlM%d%s", id, of.Name.Name)
	var args []string
	for _, field := range of.Type.Params.List {
		if len(field.Names) == 0 {
			return schemaInsert{}, "", false
		}
		for _, n := range field.Names {
			if n.Name == "_" {
				return schemaInsert{}, "", false
			}
			arg := n.Name
			if _, ok := field.Type.(*ast.Ellipsis); ok {
				arg += "..."
			}
			args = append(args, arg)
		}
	}
	call := copyName
	if of.Recv != nil {
		r := of.Recv.List[0]
		if len(r.Names) == 0 || r.Names[0].Name == "_" {
			return schemaInsert{}, "", false
		}
		call = r.Names[0].Name + "." + copyName
	}
	if tp := of.Type.TypeParams; tp != nil && len(tp.List) > 0 {
		var names []string
		for _, field := range tp.List {
			for _, n := range field.Names {
				if n.Name == "_" {
					return schemaInsert{}, "", false
				}
				names = append(names, n.Name)
			}
		}
		call += "[" + strings.Join(names, ", ") + "]"
	}
	call += "(" + strings.Join(args, ", ") + ")"
	line := fmt.Sprintf("if labctlMutant == %d { %s; return }", id, call)
	if of.Type.Results != nil && of.Type.Results.NumFields() > 0 {
		line = fmt.Sprintf("if labctlMutant == %d { return %s }", id, call)
	}
	// On the brace's own line, so the reference's lines keep their numbers.
	ins := schemaInsert{at: orig.offset(of.Body.Lbrace) + 1, text: " " + line + ";"}
	// The copy: the mutant's declaration from func to the closing brace,
	// its name swapped for the copy's.
	start, name := mut.offset(mf.Pos()), mut.offset(mf.Name.Pos())
	text := string(mut.src[start:name]) + copyName + string(mut.src[name+len(mf.Name.Name):mut.offset(mf.End())])
	return ins, text, true
}

// render is the reference file with its dispatch lines, its added imports
// and the copies at the end.
func (f *schemaFile) render() []byte {
	inserts := slices.Clone(f.inserts)
	if len(f.added) > 0 {
		at := f.offset(f.file.Name.End())
		for _, d := range f.file.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
				at = f.offset(g.End())
			}
		}
		// On the line the imports end on, like the dispatch lines.
		var b strings.Builder
		for _, path := range slices.Sorted(maps.Keys(f.added)) {
			fmt.Fprintf(&b, "; import %s %q", f.added[path], path)
		}
		inserts = append(inserts, schemaInsert{at: at, text: b.String()})
	}
	// Back to front, so each offset still points into the original.
	slices.SortStableFunc(inserts, func(a, b schemaInsert) int { return b.at - a.at })
	out := slices.Clone(f.src)
	for _, in := range inserts {
		out = slices.Insert(out, in.at, []byte(in.text)...)
	}
	var b bytes.Buffer
	b.Write(out)
	for _, c := range f.copies {
		b.WriteString("\n\n")
		b.WriteString(c)
		b.WriteString("\n")
	}
	return b.Bytes()
}

// importedName is the name an import is used by in the file: its alias,
// or the last element of its path (a /vN major version skipped). ok is
// false for blank and dot imports and for paths whose package name the
// path does not tell (go-x, x.v3, x-y).
func importedName(path, alias string) (string, bool) {
	switch alias {
	case "_", ".":
		return "", false
	case "":
	default:
		return alias, true
	}
	parts := strings.Split(path, "/")
	name := parts[len(parts)-1]
	if len(parts) > 1 && len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		name = parts[len(parts)-2]
	}
	if !token.IsIdentifier(name) {
		return "", false
	}
	return name, true
}

// usedNames is every identifier a file uses as the left of a selector:
// the imports it refers to, among others.
func usedNames(f *ast.File) map[string]bool {
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	return used
}

// declaredNames is every name a file declares, at any level: what is
// before a dot and declared here is not an import.
func declaredNames(f *ast.File) map[string]bool {
	names := map[string]bool{}
	add := func(ids ...*ast.Ident) {
		for _, id := range ids {
			if id != nil {
				names[id.Name] = true
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field:
			add(n.Names...)
		case *ast.ValueSpec:
			add(n.Names...)
		case *ast.TypeSpec:
			add(n.Name)
		case *ast.FuncDecl:
			add(n.Name)
		case *ast.AssignStmt:
			if n.Tok == token.DEFINE {
				for _, e := range n.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		case *ast.RangeStmt:
			if n.Tok == token.DEFINE {
				for _, e := range []ast.Expr{n.Key, n.Value} {
					if id, ok := e.(*ast.Ident); ok {
						add(id)
					}
				}
			}
		}
		return true
	})
	return names
}

// docText is a declaration's doc comment as written, "" for none.
func docText(f *schemaFile, doc *ast.CommentGroup) string {
	if doc == nil {
		return ""
	}
	return f.text(doc)
}

// hasDirective reports a //go: line (noinline, norace, nosplit, linkname…)
// in a function's doc: the copy could not carry it faithfully.
func hasDirective(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, c := range doc.List {
		if strings.HasPrefix(c.Text, "//go:") {
			return true
		}
	}
	return false
}
