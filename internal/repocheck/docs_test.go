package repocheck

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The docs a reader follows: every Go block in them builds, every relative
// link and every named test or file resolves. docs/contributing.md
// describes the fence conventions checked here.

// docFiles are the Markdown files the checks cover, relative to the root.
func docFiles(t *testing.T, r string) []string {
	t.Helper()
	var files []string
	for _, glob := range []string{"README.md", "docs/*.md", "docs/interview/*.md", "docs/scenarios/*.md", "labs/*/README.md", "labs/*/HINTS.md", "checklist/*.md", "deploy/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(r, glob))
		require.NoError(t, err)
		for _, f := range m {
			rel, _ := filepath.Rel(r, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	require.NotEmpty(t, files)
	return files
}

// codeBlock is one fenced block of a Markdown file.
type codeBlock struct {
	file string
	line int    // of the opening fence
	info string // "go", "go api", "go fragment", "sh", …
	body string
}

func (b codeBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

func codeBlocks(t *testing.T, r, file string) []codeBlock {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(r, file))
	require.NoError(t, err)
	var blocks []codeBlock
	var cur *codeBlock
	var body strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &codeBlock{file: file, line: n, info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			body.Reset()
		case cur != nil && strings.TrimSpace(line) == "```":
			cur.body = body.String()
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body.WriteString(line + "\n")
		}
	}
	require.Nil(t, cur, "%s: a code fence opened and never closed", file)
	return blocks
}

// goBlocks are the doc's Go blocks by kind: "go" is a whole file that must
// build, "go api" an API summary checked against its lab's package,
// "go fragment" is excluded (and should stay rare).
func goBlocks(t *testing.T, r string) (files, apis, fragments []codeBlock) {
	for _, f := range docFiles(t, r) {
		if strings.HasSuffix(f, "HINTS.md") {
			continue // hints quote pieces of a solution on purpose
		}
		for _, b := range codeBlocks(t, r, f) {
			switch b.info {
			case "go":
				files = append(files, b)
			case "go api":
				apis = append(apis, b)
			case "go fragment":
				fragments = append(fragments, b)
			default:
				if strings.HasPrefix(b.info, "go") && !strings.HasPrefix(b.info, "go.") {
					t.Errorf("%s: unknown fence %q: use go, go api or go fragment (docs/contributing.md)", b.where(), b.info)
				}
			}
		}
	}
	return files, apis, fragments
}

// TestDocsGoBlocksAreGofmtCleanAndBuild: a ```go block is a whole Go file
// (it starts with its package clause) that gofmt leaves alone and that
// builds inside this module, so it may import the course's packages.
func TestDocsGoBlocksAreGofmtCleanAndBuild(t *testing.T) {
	r := root(t)
	files, _, fragments := goBlocks(t, r)
	assert.LessOrEqual(t, len(fragments), 3, "go fragment blocks are exclusions: keep them few")
	if len(files) == 0 {
		return
	}
	tmp, err := os.MkdirTemp(r, ".docsnippets-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(tmp) })
	var pkgs []string
	for i, b := range files {
		src := []byte(b.body)
		formatted, err := format.Source(src)
		if !assert.NoError(t, err, "%s: the block does not parse as a Go file (start it with its package clause, or mark it go fragment)", b.where()) {
			continue
		}
		assert.Equal(t, string(formatted), string(src), "%s: gofmt would change the block", b.where())
		dir := filepath.Join(tmp, fmt.Sprintf("b%02d", i))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "snippet.go"), src, 0o644))
		rel, _ := filepath.Rel(r, dir)
		pkgs = append(pkgs, "./"+filepath.ToSlash(rel))
	}
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"vet"}, pkgs...)...)
	cmd.Dir = r
	out, err := cmd.CombinedOutput()
	if err != nil {
		msg := string(out)
		for i, b := range files {
			msg = strings.ReplaceAll(msg, filepath.Join(filepath.Base(tmp), fmt.Sprintf("b%02d", i), "snippet.go"), b.where()+" (block line)")
		}
		t.Errorf("the docs' Go blocks do not build:\n%s", msg)
	}
}

// TestDocsAPIBlocksMatchTheCode: a ```go api block in labs/NN-x/README.md
// lists declarations without bodies; each must exist in solutions/NN-x
// with the same signature (functions and methods), the same exported
// fields or methods (structs, interfaces) or the same underlying type.
func TestDocsAPIBlocksMatchTheCode(t *testing.T) {
	r := root(t)
	_, apis, _ := goBlocks(t, r)
	require.NotEmpty(t, apis, "the lab READMEs summarise their API in go api blocks")
	for _, b := range apis {
		dir, ok := strings.CutPrefix(filepath.Dir(b.file), "labs/")
		if !assert.True(t, ok, "%s: go api blocks belong in labs/NN-x/README.md", b.where()) {
			continue
		}
		src := "package api\n\n" + b.body
		formatted, err := format.Source([]byte(src))
		if !assert.NoError(t, err, "%s: the API block does not parse", b.where()) {
			continue
		}
		assert.Equal(t, string(formatted), src, "%s: gofmt would change the API block", b.where())
		code := packageDecls(t, filepath.Join(r, "solutions", dir))
		doc := declsOf(t, "doc.go", src)
		for name, want := range doc {
			got, ok := code[name]
			if !assert.True(t, ok, "%s: %s is not declared in solutions/%s", b.where(), name, dir) {
				continue
			}
			if fields, ok := strings.CutPrefix(want, partial); ok {
				inner := func(s string) []string {
					s = s[strings.Index(s, "{")+1 : len(s)-1]
					return strings.Split(s, "; ")
				}
				for _, f := range inner(fields) {
					assert.Contains(t, inner(got), f, "%s: %s has no field %s in solutions/%s", b.where(), name, f, dir)
				}
				continue
			}
			assert.Equal(t, want, got, "%s: %s differs from solutions/%s", b.where(), name, dir)
		}
	}
}

// partial marks a struct a doc lists in part (its declaration says "…").
const partial = "partial:"

// packageDecls reads a package's non-test files into declsOf's form.
func packageDecls(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		for k, v := range declsOf(t, e.Name(), string(src)) {
			out[k] = v
		}
	}
	return out
}

// declsOf maps each exported top-level name to a normalised form of its
// declaration: a function's signature, a struct's exported fields, an
// interface's methods, another type's definition, or "var" for a variable.
func declsOf(t *testing.T, name, src string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	require.NoError(t, err, name)
	show := func(n ast.Node) string {
		var b bytes.Buffer
		require.NoError(t, format.Node(&b, fset, n))
		return strings.Join(strings.Fields(b.String()), " ")
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() {
				continue
			}
			key := d.Name.Name
			if d.Recv != nil {
				key = recvType(d.Recv.List[0].Type) + "." + key
			}
			d.Body, d.Doc = nil, nil
			out[key] = show(d)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						if n.IsExported() {
							out[n.Name] = d.Tok.String()
						}
					}
				case *ast.TypeSpec:
					if s.Name.IsExported() {
						out[s.Name.Name] = typeShape(s, show)
						// A struct whose declaration says "…" lists some of
						// its fields: the rest exist for the apps, not the lab.
						if _, ok := s.Type.(*ast.StructType); ok && strings.Contains(src[fset.Position(d.Pos()).Offset:fset.Position(d.End()).Offset], "…") {
							out[s.Name.Name] = partial + out[s.Name.Name]
						}
					}
				}
			}
		}
	}
	return out
}

func recvType(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvType(e.X)
	case *ast.IndexExpr:
		return recvType(e.X)
	case *ast.IndexListExpr:
		return recvType(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// typeShape is a type's exported surface: field "name type" pairs in order
// for a struct, methods for an interface, else the definition.
func typeShape(s *ast.TypeSpec, show func(ast.Node) string) string {
	params := ""
	if s.TypeParams != nil {
		var ps []string
		for _, f := range s.TypeParams.List {
			for _, n := range f.Names {
				ps = append(ps, n.Name+" "+show(f.Type))
			}
		}
		params = "[" + strings.Join(ps, ", ") + "]"
	}
	switch tt := s.Type.(type) {
	case *ast.StructType:
		var fields []string
		for _, f := range tt.Fields.List {
			for _, n := range f.Names {
				if n.IsExported() {
					fields = append(fields, n.Name+" "+show(f.Type))
				}
			}
		}
		return "struct" + params + "{" + strings.Join(fields, "; ") + "}"
	case *ast.InterfaceType:
		var methods []string
		for _, m := range tt.Methods.List {
			for _, n := range m.Names {
				methods = append(methods, n.Name+show(m.Type))
			}
		}
		slices.Sort(methods)
		return "interface" + params + "{" + strings.Join(methods, "; ") + "}"
	default:
		return params + show(s.Type)
	}
}

var (
	mdLink     = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
	testName   = regexp.MustCompile(`^(Test|Fuzz|Benchmark|Example)[A-Z][A-Za-z0-9_]*$`)
	pathLike   = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?$`)
	knownExt   = regexp.MustCompile(`\.(go|md|json|ya?ml|sh|patch|lua|svg|toml|txt|mod|sum)$`)
	repoRoots  = []string{"cmd/", "internal/", "solutions/", "labs/", "docs/", "checklist/", "deploy/", "scripts/", ".github/", "grafana/", "prometheus/"}
)

// TestDocsLinksAndNamesResolve: every relative link points at a file that
// exists (anchors aside); every test named in code spans is declared in
// some test file; every repository path named in code spans exists.
func TestDocsLinksAndNamesResolve(t *testing.T) {
	r := root(t)
	tests := declaredTests(t, r)
	for _, f := range docFiles(t, r) {
		data, err := os.ReadFile(filepath.Join(r, f))
		require.NoError(t, err)
		text := stripFences(string(data))
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(target, "#")
			p := filepath.Join(r, filepath.Dir(f), target)
			if target == "" {
				p = filepath.Join(r, f)
			}
			if _, err := os.Stat(p); !assert.NoError(t, err, "%s links to %s, which does not exist", f, m[1]) {
				continue
			}
			if anchor != "" && strings.HasSuffix(p, ".md") {
				assert.Contains(t, headingAnchors(t, p), anchor, "%s links to %s, whose file has no heading with that anchor", f, m[1])
			}
		}
		for _, m := range inlineCode.FindAllStringSubmatch(text, -1) {
			tok := strings.TrimSpace(m[1])
			switch {
			case testName.MatchString(tok):
				assert.True(t, tests[tok], "%s names %s, which no test file declares", f, tok)
			case pathLike.MatchString(tok) && isRepoPath(tok):
				_, err := os.Stat(filepath.Join(r, tok))
				assert.NoError(t, err, "%s names %s, which does not exist", f, tok)
			}
		}
	}
}

// headingAnchors are the anchors GitHub gives a Markdown file's headings:
// lower case, punctuation dropped, spaces as dashes, -1, -2 … on repeats.
func headingAnchors(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	seen := map[string]int{}
	var out []string
	for _, line := range strings.Split(stripFences(string(data)), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", slug, n))
		} else {
			out = append(out, slug)
		}
		seen[slug]++
	}
	return out
}

// isRepoPath: a path under one of the repository's top directories, naming
// a file by a known extension or a directory with a trailing slash.
func isRepoPath(tok string) bool {
	if !slices.ContainsFunc(repoRoots, func(p string) bool { return strings.HasPrefix(tok, p) }) {
		return false
	}
	if strings.Contains(tok, "NN") || strings.Contains(tok, "...") {
		return false // a pattern, not a path
	}
	return knownExt.MatchString(tok) || strings.HasSuffix(tok, "/")
}

// stripFences blanks fenced blocks: their contents are code, checked above.
func stripFences(s string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimLeft(line, " "), "```") {
			in = !in
			b.WriteString("\n")
			continue
		}
		if !in {
			b.WriteString(line)
		}
		b.WriteString("\n")
	}
	return b.String()
}

var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Fuzz|Benchmark|Example)[A-Za-z0-9_]*)\(`)

// declaredTests is every test, fuzz, benchmark and example function in the
// repository's test files.
func declaredTests(t *testing.T, r string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	err := filepath.WalkDir(r, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != r && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range testFunc.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	return out
}
