package write

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
)

// The test-writing track ("write"): for each lab the learner gets the
// correct reference implementation and writes the tests; the score is how
// many of the lab's mutants those tests kill.
//
// The learner's file is write/NN-topic/write_test.go, the only file of the
// track that git tracks there. The reference, and the helper test files the
// learner may use, are laid over that directory at every run from a
// pristine copy (solutions/ upstream, KitArchive in a template), so
// editing the copies labctl leaves on disk for reading changes nothing.
const (
	Dir  = "write"
	File = "write_test.go"
)

// ErrNoKit means neither solutions/NN-topic nor the kit archive holds
// a lab's reference.
var ErrNoKit = errors.New("no reference for the test-writing track")

// Kit is what the test-writing track of one lab is made of.
type Kit struct {
	Lab catalog.Lab
	// Ref is the reference's package: file name → content, as in
	// solutions/ (imports of other solutions not yet rewritten).
	Ref map[string][]byte
	// Helpers are test files that declare no tests (TestMain, fakes,
	// constructors): given to the learner, restored at every run.
	Helpers map[string][]byte
	// RefTests are the reference's own tests (upstream only; a template
	// has none): what --self-check runs.
	RefTests map[string][]byte
	Mutants  []Mutant
	// Deps are the other labs whose references this one imports, with
	// their own files: lab directory → file name → content.
	Deps map[string]map[string][]byte
}

// Mutant is one classic bug: a patch to the reference.
type Mutant struct {
	Name     string
	Patch    string
	Nudge    string // the behaviour it breaks: the first sentence of its lesson
	HeldBack bool   // from an instructor's bank, not shipped
}

// DirOf is the lab's directory in the track, relative to the root.
func DirOf(l catalog.Lab) string { return filepath.Join(Dir, l.Dir) }

// LoadKit reads a lab's track: from solutions/ where it exists, else
// from the template's kit archive.
func LoadKit(root string, c *catalog.Catalog, l catalog.Lab) (*Kit, error) {
	src, err := openKitSource(root)
	if err != nil {
		return nil, err
	}
	return loadWriteKit(src, c, l)
}

// LoadKitAt reads a lab's track from the kit archive as a git
// revision has it: what grading with a pristine ref uses, so that a
// learner who rewrites the kit in their copy (drops a mutant, weakens
// one) changes nothing.
func LoadKitAt(ctx context.Context, root, ref string, c *catalog.Catalog, l catalog.Lab) (*Kit, error) {
	data, err := labfs.GitOutput(ctx, root, "show", ref+":"+catalog.KitArchive)
	if err != nil {
		return nil, fmt.Errorf("%w for lab %s at %s: no %s there", ErrNoKit, l.Number, ref, catalog.KitArchive)
	}
	all, err := catalog.ReadKitArchive(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read %s:%s: %w", ref, catalog.KitArchive, err)
	}
	return loadWriteKit(kitSource{root: root, archive: all}, c, l)
}

func loadWriteKit(src kitSource, c *catalog.Catalog, l catalog.Lab) (*Kit, error) {
	k, err := src.kit(l)
	if err != nil {
		return nil, err
	}
	// The references this one imports, and theirs.
	k.Deps = map[string]map[string][]byte{}
	queue := []map[string][]byte{k.Ref}
	for len(queue) > 0 {
		files := queue[0]
		queue = queue[1:]
		for _, dir := range solutionImports(files) {
			if _, seen := k.Deps[dir]; seen || dir == l.Dir {
				continue
			}
			dl, err := c.Find(dir)
			if err != nil {
				return nil, fmt.Errorf("lab %s's reference imports solutions/%s, which is not a lab", l.Number, dir)
			}
			dk, err := src.kit(dl)
			if err != nil {
				return nil, err
			}
			k.Deps[dir] = dk.Ref
			queue = append(queue, dk.Ref)
		}
	}
	return k, nil
}

// kitSource is where kits come from: a solutions tree or an archive.
type kitSource struct {
	root    string
	archive map[string]map[string][]byte // template: lab dir → kit path → content
}

func openKitSource(root string) (kitSource, error) {
	if labfs.IsDir(filepath.Join(root, "solutions")) {
		return kitSource{root: root}, nil
	}
	data, err := os.ReadFile(filepath.Join(root, catalog.KitArchive))
	if errors.Is(err, os.ErrNotExist) {
		return kitSource{}, fmt.Errorf("%w: neither solutions/ nor %s exists", ErrNoKit, catalog.KitArchive)
	}
	if err != nil {
		return kitSource{}, err
	}
	all, err := catalog.ReadKitArchive(bytes.NewReader(data))
	if err != nil {
		return kitSource{}, fmt.Errorf("read %s: %w", catalog.KitArchive, err)
	}
	return kitSource{root: root, archive: all}, nil
}

func (s kitSource) kit(l catalog.Lab) (*Kit, error) {
	if s.archive != nil {
		files, ok := s.archive[l.Dir]
		if !ok {
			return nil, fmt.Errorf("%w for lab %s in %s", ErrNoKit, l.Number, catalog.KitArchive)
		}
		return kitFromEntries(l, files)
	}
	return SolutionKit(s.root, l)
}

// SolutionKit reads solutions/NN-topic: its top-level files (tests
// sorted into the reference's tests and the helpers, benchmarks left out)
// and testdata/mutants/*.patch.
func SolutionKit(root string, l catalog.Lab) (*Kit, error) {
	dir := filepath.Join(root, l.SolutionDir())
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%w for lab %s: %v", ErrNoKit, l.Number, err)
	}
	k := &Kit{Lab: l, Ref: map[string][]byte{}, Helpers: map[string][]byte{}, RefTests: map[string][]byte{}}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		if err := k.add(e.Name(), data); err != nil {
			return nil, err
		}
	}
	patches, _ := filepath.Glob(filepath.Join(dir, "testdata", "mutants", "*.patch"))
	for _, p := range patches {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		k.Mutants = append(k.Mutants, newMutant(strings.TrimSuffix(filepath.Base(p), ".patch"), string(data), false))
	}
	return k, nil
}

// add sorts one top-level file of a solution into the kit.
func (k *Kit) add(name string, data []byte) error {
	if !strings.HasSuffix(name, "_test.go") {
		k.Ref[name] = data
		return nil
	}
	kind, err := testFileKind(name, data)
	if err != nil {
		return err
	}
	switch kind {
	case "tests":
		k.RefTests[name] = data
	case "helpers":
		k.Helpers[name] = data
	}
	return nil
}

// testFileKind says what a test file is to the track: "tests" (it declares
// a TestX), "bench" (benchmarks, which lean on the tests' helpers) or
// "helpers" (everything else: TestMain, fakes, constructors).
func testFileKind(name string, data []byte) (string, error) {
	tests, err := catalog.TestFuncs(map[string][]byte{name: data})
	if err != nil {
		return "", err
	}
	f, err := parser.ParseFile(token.NewFileSet(), name, data, parser.SkipObjectResolution|parser.ParseComments)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", name, err)
	}
	switch {
	case len(tests) > 0:
		return "tests", nil
	case slices.ContainsFunc(f.Decls, isBenchmark), hasBuildConstraint(f):
		// A file behind a build tag is an addition to the benchmarks (lab
		// 09's failsafe comparison), not a helper every build sees.
		return "bench", nil
	}
	return "helpers", nil
}

func hasBuildConstraint(f *ast.File) bool {
	for _, g := range f.Comments {
		if g.Pos() > f.Package {
			break
		}
		for _, c := range g.List {
			if strings.HasPrefix(c.Text, "//go:build ") {
				return true
			}
		}
	}
	return false
}

func isBenchmark(d ast.Decl) bool {
	fn, ok := d.(*ast.FuncDecl)
	return ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Benchmark")
}

// newMutant reads a mutant patch's name, text and nudge.
func newMutant(name, patch string, heldBack bool) Mutant {
	return Mutant{Name: name, Patch: patch, Nudge: mutantNudge(patch), HeldBack: heldBack}
}

// mutantNudge is the first sentence of a patch's "# Lesson:" comment: the
// behaviour the bug breaks, in words that do not give the patch away.
func mutantNudge(patch string) string {
	var text []string
	in := false
	for line := range strings.Lines(patch) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "# Lesson:"); ok {
			in = true
			line = "#" + rest
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(line, "#") || strings.HasPrefix(line, "# Must be killed by:") {
			break
		}
		text = append(text, strings.TrimSpace(strings.TrimPrefix(line, "#")))
	}
	s := strings.Join(text, " ")
	if i := sentenceEnd(s); i > 0 {
		s = s[:i]
	}
	return s
}

// sentenceEnd is the index just past the first ". " (or final "."), 0 if none.
func sentenceEnd(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' && (i+1 == len(s) || s[i+1] == ' ') {
			return i + 1
		}
	}
	return 0
}

// solutionImportRe matches an import of a lab's reference, whatever the
// module is called: a fork may have renamed it.
var solutionImportRe = regexp.MustCompile(`"(?P<mod>[^"]*)/solutions/([0-9][0-9]-[^"/]+)"`)

// solutionImports lists the lab directories the Go files import from solutions/.
func solutionImports(files map[string][]byte) []string {
	var dirs []string
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		for _, m := range solutionImportRe.FindAllSubmatch(files[name], -1) {
			if d := string(m[2]); !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// rewriteImports points a reference's imports of solutions/NN-topic at
// write/NN-topic, where the track lays those references.
func rewriteImports(name string, data []byte) []byte {
	if !strings.HasSuffix(name, ".go") {
		return data
	}
	return solutionImportRe.ReplaceAll(data, []byte(`"${mod}/`+Dir+`/$2"`))
}

// PackKits packs kits (reference, helpers, shipped mutants; never the
// reference's tests) as the template's KitArchive.
func PackKits(w io.Writer, kits []*Kit) error {
	labs := map[string]map[string][]byte{}
	for _, k := range kits {
		files := labs[k.Lab.Dir]
		if files == nil {
			files = map[string][]byte{}
			labs[k.Lab.Dir] = files
		}
		for name, data := range k.Ref {
			files["ref/"+name] = data
		}
		for name, data := range k.Helpers {
			files["helpers/"+name] = data
		}
		for _, m := range k.Mutants {
			if !m.HeldBack {
				files["mutants/"+m.Name+".patch"] = []byte(m.Patch)
			}
		}
	}
	return catalog.WriteKitArchive(w, labs)
}

func kitFromEntries(l catalog.Lab, files map[string][]byte) (*Kit, error) {
	k := &Kit{Lab: l, Ref: map[string][]byte{}, Helpers: map[string][]byte{}}
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		kind, name, _ := strings.Cut(rel, "/")
		switch kind {
		case "ref":
			k.Ref[name] = files[rel]
		case "helpers":
			k.Helpers[name] = files[rel]
		case "mutants":
			k.Mutants = append(k.Mutants, newMutant(strings.TrimSuffix(name, ".patch"), string(files[rel]), false))
		}
	}
	if len(k.Ref) == 0 {
		return nil, fmt.Errorf("%w for lab %s in %s", ErrNoKit, l.Number, catalog.KitArchive)
	}
	return k, nil
}

// HeldBackMutants reads an instructor's bank: dir/NN-topic/*.patch.
func HeldBackMutants(dir string, l catalog.Lab) ([]Mutant, error) {
	if dir == "" {
		return nil, nil
	}
	if !labfs.IsDir(dir) {
		return nil, fmt.Errorf("%w: held-back mutants: %s is not a directory", catalog.ErrBadOption, dir)
	}
	patches, err := filepath.Glob(filepath.Join(dir, l.Dir, "*.patch"))
	if err != nil {
		return nil, err
	}
	var out []Mutant
	for _, p := range patches {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, newMutant(strings.TrimSuffix(filepath.Base(p), ".patch"), string(data), true))
	}
	return out, nil
}

// Starter is the file a learner starts the track from.
func Starter(l catalog.Lab, pkg string) []byte {
	return fmt.Appendf(nil, `package %s

// The test-writing track of lab %s. This directory holds the correct
// reference (labctl lays it here; editing those copies changes nothing) and
// the helpers you may use; this file is yours. Write tests that pass on the
// reference and fail on its classic bugs:
//
//	make write-%s      runs them on the reference, then on every mutant
//
// What a good suite pins: the "Write the test" section of
// labs/%s/README.md. Tests run under -race and count only if they
// pass here inside 5 s; a kill counts only as a failed assertion, never a
// panic or a hang (recover a forbidden panic and t.Errorf it; guard a hang
// fake time cannot see with a 1-2 s watchdog). Wait in testing/synctest's
// fake time, never in real time.
`, pkg, l.Number, l.Number, l.Dir)
}

// PackageName is the package clause of the first Go file in files.
func PackageName(files map[string][]byte) (string, error) {
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !strings.HasSuffix(name, ".go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, files[name], parser.PackageClauseOnly)
		if err != nil {
			return "", err
		}
		return f.Name.Name, nil
	}
	return "", errors.New("no Go files")
}

// Materialize writes the track's read-only copies into write/: the lab's
// reference and helpers, the references it imports, and, if the learner
// has none yet, the starter file. Copies already up to date are left
// alone; the learner's own files are never touched.
func (k *Kit) Materialize(root string) (created bool, err error) {
	put := func(dir string, files map[string][]byte, rewrite bool) error {
		abs := filepath.Join(root, Dir, dir)
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return err
		}
		for name, data := range files {
			if rewrite {
				data = rewriteImports(name, data)
			}
			p := filepath.Join(abs, name)
			if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
				continue
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return err
			}
		}
		return nil
	}
	if err := put(k.Lab.Dir, k.Ref, true); err != nil {
		return false, err
	}
	if err := put(k.Lab.Dir, k.Helpers, false); err != nil {
		return false, err
	}
	for dir, files := range k.Deps {
		if err := put(dir, files, true); err != nil {
			return false, err
		}
	}
	starter := filepath.Join(root, DirOf(k.Lab), File)
	if _, err := os.Stat(starter); errors.Is(err, os.ErrNotExist) {
		pkg, err := PackageName(k.Ref)
		if err != nil {
			return false, err
		}
		return true, os.WriteFile(starter, Starter(k.Lab, pkg), 0o644)
	}
	return false, nil
}
