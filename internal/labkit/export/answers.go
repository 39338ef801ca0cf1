package export

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
	"github.com/production-go/gateway-lab/internal/labkit/write"
)

// The answers of each track, as needles for FindLeaks.
//
// The implementation track's answers are the references: the body of
// every function and the fields of every struct type in
// solutions/NN-topic that the stub does not already give, every
// reference script (Lua) whole, and every mutant — each hunk as the patch
// writes it and as the code it leaves.
//
// The test-writing track's answers are the tests: every function of the
// exercise test files (the ones that declare a TestX; the helpers the
// track hands out are not answers) and every function of the suites
// written cold (write/testdata/cold).

// ImplementationAnswers lists the implementation track's answers.
func ImplementationAnswers(root string, c *catalog.Catalog) ([]Needle, error) {
	// What the template hands out — every lab's stubs and tests — is not
	// an answer, even where a reference repeats a piece of it.
	var given []string
	for _, l := range c.BuiltLabs() {
		toks, err := givenTokens(root, l)
		if err != nil {
			return nil, err
		}
		given = append(given, toks...)
	}
	var needles []Needle
	for _, l := range c.Labs {
		sol := filepath.Join(root, l.SolutionDir())
		if !labfs.IsDir(sol) {
			continue
		}
		entries, err := os.ReadDir(sol)
		if err != nil {
			return nil, err
		}
		keep := func(n Needle) {
			if n.Len() >= minNeedle && !containsTokens(given, n.tokens) {
				needles = append(needles, n)
			}
		}
		for _, e := range entries {
			name := e.Name()
			if !e.Type().IsRegular() || strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(filepath.Join(sol, name))
			if err != nil {
				return nil, err
			}
			rel := filepath.ToSlash(filepath.Join(l.SolutionDir(), name))
			switch filepath.Ext(name) {
			case ".go":
				pieces, err := goPieces(rel, src, false)
				if err != nil {
					return nil, err
				}
				for _, n := range pieces {
					keep(n)
				}
			case ".lua":
				keep(Needle{What: rel + " (the whole script)", tokens: luaTokens(src)})
			}
		}
		patches, _ := filepath.Glob(filepath.Join(sol, "testdata", "mutants", "*.patch"))
		for _, p := range patches {
			src, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			rel := filepath.ToSlash(filepath.Join(l.SolutionDir(), "testdata", "mutants", filepath.Base(p)))
			for _, n := range mutantNeedles(rel, string(src)) {
				keep(n)
			}
		}
	}
	return needles, nil
}

// WriteAnswers lists the test-writing track's answers.
func WriteAnswers(root string, c *catalog.Catalog) ([]Needle, error) {
	var kits []*write.Kit
	for _, l := range c.Labs {
		if !labfs.IsDir(filepath.Join(root, l.SolutionDir())) {
			continue
		}
		k, err := write.SolutionKit(root, l)
		if err != nil {
			return nil, err
		}
		kits = append(kits, k)
	}
	// What the track hands out — every lab's reference and helpers — is
	// not an answer, even where a test repeats a piece of it.
	var given []string
	for _, k := range kits {
		for _, files := range []map[string][]byte{k.Helpers, k.Ref} {
			for _, name := range slices.Sorted(maps.Keys(files)) {
				given = append(given, codeTokens(files[name])...)
				given = append(given, "\x00")
			}
		}
	}
	var needles []Needle
	for _, k := range kits {
		l := k.Lab
		for _, name := range slices.Sorted(maps.Keys(k.RefTests)) {
			pieces, err := goPieces(filepath.ToSlash(filepath.Join(l.SolutionDir(), name)), k.RefTests[name], true)
			if err != nil {
				return nil, err
			}
			for _, n := range pieces {
				if n.Len() >= minNeedle && !containsTokens(given, n.tokens) {
					needles = append(needles, n)
				}
			}
		}
	}
	cold, _ := filepath.Glob(filepath.Join(root, write.Dir, "testdata", "cold", "*.go.txt"))
	for _, p := range cold {
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		rel, _ := filepath.Rel(root, p)
		pieces, err := goPieces(filepath.ToSlash(rel), src, true)
		if err != nil {
			return nil, err
		}
		for _, n := range pieces {
			if n.Len() >= minNeedle {
				needles = append(needles, n)
			}
		}
	}
	return needles, nil
}

// givenTokens is what a lab hands the learner in labs/NN-topic: its stubs,
// scripts and tests, as one token stream (files apart). A reference
// piece found there is not an answer.
func givenTokens(root string, l catalog.Lab) ([]string, error) {
	dir := filepath.Join(root, l.LabDir())
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var toks []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		src, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		switch filepath.Ext(e.Name()) {
		case ".go":
			toks = append(toks, codeTokens(src)...)
		case ".lua":
			toks = append(toks, luaTokens(src)...)
		default:
			continue
		}
		toks = append(toks, "\x00")
	}
	return toks, nil
}

// goPieces lists a Go file's functions (their bodies) and, unless
// funcsOnly, its struct types (their field lists), each as a needle: what
// is inside the braces, so that the statements quoted without them (in a
// hint, inlined into another function) are found too.
func goPieces(rel string, src []byte, funcsOnly bool) ([]Needle, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("read the answers: %w", err)
	}
	span := func(from, to token.Pos) []string {
		return codeTokens(src[fset.Position(from).Offset:fset.Position(to).Offset])
	}
	var out []Needle
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Body == nil {
				continue
			}
			out = append(out, Needle{What: fmt.Sprintf("%s: the body of %s", rel, catalog.FuncName(d)), tokens: span(d.Body.Lbrace+1, d.Body.Rbrace)})
		case *ast.GenDecl:
			if funcsOnly || d.Tok != token.TYPE {
				continue
			}
			for _, s := range d.Specs {
				ts := s.(*ast.TypeSpec)
				if st, ok := ts.Type.(*ast.StructType); ok && st.Fields != nil {
					out = append(out, Needle{What: fmt.Sprintf("%s: the fields of type %s", rel, ts.Name.Name), tokens: span(st.Fields.Opening+1, st.Fields.Closing)})
				}
			}
		}
	}
	return out, nil
}

// mutantNeedles lists a mutant's hunks twice: as the patch writes them
// (with their +, - and space markers) and as the code the mutant leaves
// (context and added lines).
func mutantNeedles(rel, patch string) []Needle {
	var out []Needle
	tok := func(lines []string, lua bool) []string {
		text := strings.Join(lines, "\n")
		if lua {
			return luaTokens([]byte(text))
		}
		return tokenize(stripComments(text, "//", "/*", "*/"))
	}
	var file string
	var raw, after []string
	n, inHunk := 0, false
	flush := func() {
		if len(raw) == 0 {
			return
		}
		n++
		lua := strings.HasSuffix(file, ".lua")
		what := fmt.Sprintf("%s (hunk %d", rel, n)
		out = append(out,
			Needle{What: what + ", as the patch writes it)", tokens: tokenize(strings.Join(raw, "\n"))},
			Needle{What: what + ", the code it leaves)", tokens: tok(after, lua)})
		raw, after = nil, nil
	}
	for _, line := range strings.Split(patch, "\n") {
		switch {
		case strings.HasPrefix(line, "+++ "):
			file = strings.TrimSpace(strings.TrimPrefix(line, "+++ "))
		case strings.HasPrefix(line, "--- "):
			flush()
			inHunk = false
		case strings.HasPrefix(line, "@@"):
			flush()
			inHunk = true
		case !inHunk:
		case strings.HasPrefix(line, "+"):
			raw = append(raw, line)
			after = append(after, line[1:])
		case strings.HasPrefix(line, "-"):
			raw = append(raw, line)
		case strings.HasPrefix(line, " "):
			raw = append(raw, line)
			after = append(after, line[1:])
		}
	}
	flush()
	return out
}

// containsTokens reports whether needle occurs in hay, whole.
func containsTokens(hay, needle []string) bool {
	if len(needle) == 0 {
		return true
	}
	for i := 0; i+len(needle) <= len(hay); i++ {
		if hay[i] == needle[0] && slices.Equal(hay[i:i+len(needle)], needle) {
			return true
		}
	}
	return false
}
