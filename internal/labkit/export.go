package labkit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ExportOptions configures Export.
type ExportOptions struct {
	Root string // the course repository
	Dir  string // the template to write; must not exist yet, or be empty
	// SkipTidy leaves go.mod and go.sum as they are instead of dropping the
	// tool directives and running `go mod tidy` (which needs the go command
	// and the modules, from the cache or a proxy).
	SkipTidy bool
	Log      io.Writer
}

// ExportReport says what Export wrote.
type ExportReport struct {
	Dir     string
	Commit  string   // the course repository's HEAD, when it is a git checkout
	Files   int      // files copied or written
	Labs    []string // lab directories whose tests went into the archive
	Tests   int      // test files in the archive
	Dropped []string // Makefile targets left out of the learner's Makefile
}

// What a learner template holds. Everything else — solutions/ with its
// mutants, the apps, scripts/, docker-compose.yml, maintainer CI — stays in
// the course repository. deploy/ goes along because the docs link to its
// manifests as examples to read.
var (
	exportDirs  = []string{"labs/", "write/", "docs/", "checklist/", "cmd/labctl/", "internal/", "deploy/"}
	exportFiles = []string{"Makefile", "go.mod", "go.sum", "README.md", ".gitignore", "LICENSE", ".github/workflows/grade.yml"}
	// toolDirs lose their own tests and testdata in the template: those
	// test labctl and the helpers, which a learner does not maintain.
	toolDirs = []string{"cmd/", "internal/"}
)

// learnerTargets are the Makefile targets a template keeps: running,
// hinting, watching and grading the labs. The others need solutions/.
var learnerTargets = []string{"help", "$(LABCTL)", "$(LABS)", "$(WRITES)", "progress", "hint", "watch", "grade", "clean"}

// Export writes a learner template of the course into opts.Dir: the labs
// with their stubs, READMEs, hints and tests; docs; labctl and the internal
// packages it and the labs import; the learner's Makefile, go.mod/go.sum,
// README and grading workflow — and, instead of solutions/, the pristine
// test files packed in PristineArchive, so `make lab-NN`, the edited-tests
// banner and `labctl grade` work in the template and in every copy of it.
func Export(ctx context.Context, opts ExportOptions) (*ExportReport, error) {
	root, dir, err := exportPaths(opts)
	if err != nil {
		return nil, err
	}
	rep := &ExportReport{Dir: dir}
	pristine, err := pristineOfLabs(root, rep)
	if err != nil {
		return nil, err
	}
	if out, err := gitOutput(ctx, root, "rev-parse", "HEAD"); err == nil {
		rep.Commit = strings.TrimSpace(string(out))
	}
	if err := copyCourse(ctx, root, dir, rep); err != nil {
		return nil, err
	}
	if err := exportArchive(dir, pristine); err != nil {
		return nil, err
	}
	rep.Files++
	if err := exportWriteKit(root, dir); err != nil {
		return nil, err
	}
	rep.Files++
	if err := exportAutograding(dir); err != nil {
		return nil, err
	}
	rep.Files++
	if !opts.SkipTidy {
		if opts.Log != nil {
			fmt.Fprintln(opts.Log, "export: dropping the maintainers' tools from go.mod and running go mod tidy…")
		}
		if err := pruneModule(ctx, dir); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// pristineOfLabs reads the pristine test files of every built lab, lab
// directory → file name → content, and notes the labs and the count in
// rep. A lab whose tests in labs/ differ from them is an error: a template
// must ship the tests it grades with.
func pristineOfLabs(root string, rep *ExportReport) (map[string]map[string][]byte, error) {
	c, err := LoadCatalog(root)
	if err != nil {
		return nil, err
	}
	pristine := map[string]map[string][]byte{}
	for _, l := range c.BuiltLabs() {
		d, err := CompareTests(root, l)
		if err != nil {
			return nil, err
		}
		if !d.Empty() {
			return nil, fmt.Errorf("lab %s: the test files in labs/ and the pristine ones differ (%s); a template must ship the tests it grades with: run labctl verify %s", l.Number, d, l.Number)
		}
		if pristine[l.Dir], err = PristineTests(root, l); err != nil {
			return nil, err
		}
		rep.Labs = append(rep.Labs, l.Dir)
		rep.Tests += len(pristine[l.Dir])
	}
	return pristine, nil
}

// copyCourse copies the course files a template holds (see exported) from
// root into dir, each in its learner's edition, and counts them in rep.
func copyCourse(ctx context.Context, root, dir string, rep *ExportReport) error {
	files, err := courseFiles(ctx, root)
	if err != nil {
		return err
	}
	for _, rel := range files {
		if !exported(rel) {
			continue
		}
		src := filepath.Join(root, filepath.FromSlash(rel))
		fi, err := os.Stat(src)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the working tree, still in the index
			}
			return err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if data, err = learnerEdition(rel, data, rep); err != nil {
			return err
		}
		if err := writeFile(dir, rel, data, fi.Mode().Perm()); err != nil {
			return err
		}
		rep.Files++
	}
	return nil
}

// learnerEdition is a course file as the template holds it: the Makefile
// cut to the learner's targets (the ones it drops noted in rep), the README
// under a notice that says what is missing; every other file as it is.
func learnerEdition(rel string, data []byte, rep *ExportReport) ([]byte, error) {
	switch rel {
	case "Makefile":
		mk, dropped, err := LearnerMakefile(data)
		if err != nil {
			return nil, err
		}
		rep.Dropped = dropped
		return mk, nil
	case "README.md":
		return append(learnerNotice(rep.Commit), data...), nil
	}
	if strings.HasPrefix(rel, "labs/") && strings.HasSuffix(rel, "/README.md") {
		return append([]byte(labNotice), data...), nil
	}
	return data, nil
}

// labNotice opens each lab's README in the template: what it points at
// that the template does not hold.
const labNotice = "> **Learner edition.** Where this lesson points at `solutions/` (the reference, its\n" +
	"> `testdata/mutants/`), at `make run` or at the apps, those live in the course repository,\n" +
	"> not in this template. Everything the lab needs to be done here is here.\n\n"

// exportArchive packs the pristine tests into the template's
// PristineArchive, which grading and the edited-tests banner read there.
func exportArchive(dir string, pristine map[string]map[string][]byte) error {
	var archive bytes.Buffer
	if err := WritePristineArchive(&archive, pristine); err != nil {
		return err
	}
	return writeFile(dir, PristineArchive, archive.Bytes(), 0o644)
}

// exportWriteKit packs the test-writing track of every built lab (the
// reference, its helpers, the shipped mutants; never the reference's tests)
// into the template's WriteKitArchive, and writes each lab's starter file
// where the course has none.
func exportWriteKit(root, dir string) error {
	c, err := LoadCatalog(root)
	if err != nil {
		return err
	}
	var kits []*WriteKit
	for _, l := range c.BuiltLabs() {
		k, err := LoadWriteKit(root, c, l)
		if err != nil {
			return err
		}
		kits = append(kits, k)
		starter := filepath.Join(dir, WriteDirOf(l), WriteFile)
		if _, err := os.Stat(starter); errors.Is(err, os.ErrNotExist) {
			pkg, err := PackageName(k.Ref)
			if err != nil {
				return err
			}
			if err := writeFile(dir, filepath.ToSlash(filepath.Join(WriteDirOf(l), WriteFile)), WriteStarter(l, pkg), 0o644); err != nil {
				return err
			}
		}
	}
	var archive bytes.Buffer
	if err := WriteWriteKitArchive(&archive, kits); err != nil {
		return err
	}
	return writeFile(dir, WriteKitArchive, archive.Bytes(), 0o644)
}

// exportPaths resolves the root and the destination, which must be empty
// and outside the repository (a template inside it would be copied into
// the next export, and its go.mod would split the module).
func exportPaths(opts ExportOptions) (root, dir string, err error) {
	if root, err = filepath.Abs(opts.Root); err != nil {
		return "", "", err
	}
	if opts.Dir == "" {
		return "", "", fmt.Errorf("%w: export needs a destination directory", ErrBadOption)
	}
	if dir, err = filepath.Abs(opts.Dir); err != nil {
		return "", "", err
	}
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		return "", "", fmt.Errorf("%w: %s is inside the course repository; export to a directory outside it", ErrBadOption, opts.Dir)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case os.IsNotExist(err):
		return root, dir, nil
	case err != nil:
		return "", "", err
	case len(entries) > 0:
		return "", "", fmt.Errorf("%w: %s is not empty; export writes a fresh template", ErrBadOption, opts.Dir)
	}
	return root, dir, nil
}

// exported reports whether a repository path (slash-separated) belongs in
// the template as it is.
func exported(rel string) bool {
	segs := strings.Split(rel, "/")
	if slices.Contains(segs, "solutions") || slices.Contains(segs, "mutants") || rel == PristineArchive || rel == AutogradingFile || rel == WriteKitArchive {
		return false
	}
	if segs[0] == WriteDir { // the learner's files only: labctl lays the rest
		return len(segs) == 2 && segs[1] == "README.md" || len(segs) == 3 && segs[2] == WriteFile
	}
	if slices.Contains(exportFiles, rel) {
		return true
	}
	if !slices.ContainsFunc(exportDirs, func(d string) bool { return strings.HasPrefix(rel, d) }) {
		return false
	}
	if slices.ContainsFunc(toolDirs, func(d string) bool { return strings.HasPrefix(rel, d) }) {
		return !strings.HasSuffix(rel, "_test.go") && !slices.Contains(segs, "testdata")
	}
	return true
}

// courseFiles lists the repository's files, slash-separated and relative to
// root: what git tracks or would track (untracked files that are not
// ignored) in a git checkout, else every file outside the build and cache
// directories.
func courseFiles(ctx context.Context, root string) ([]string, error) {
	if top, err := gitOutput(ctx, root, "rev-parse", "--show-toplevel"); err == nil && sameDir(strings.TrimSpace(string(top)), root) {
		out, err := gitOutput(ctx, root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
		if err != nil {
			return nil, err
		}
		var files []string
		for _, f := range strings.Split(string(out), "\x00") {
			if f != "" && !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
		slices.Sort(files)
		return files, nil
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", ".labctl", "grade-report", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	return files, err
}

func sameDir(a, b string) bool {
	ea, err1 := filepath.EvalSymlinks(a)
	eb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ea == eb
}

func writeFile(dir, rel string, data []byte, perm fs.FileMode) error {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, perm)
}

// exportAutograding writes the template's autograding.json from its own
// catalogue and archive: the same tests, so the same document.
func exportAutograding(dir string) error {
	doc, err := GenerateAutograding(ClassroomOptions{Root: dir})
	if err != nil {
		return err
	}
	b, err := doc.Marshal()
	if err != nil {
		return err
	}
	return writeFile(dir, AutogradingFile, b, 0o644)
}

// learnerNotice opens the template's README: what is missing, and why.
func learnerNotice(commit string) []byte {
	from := "the course repository"
	if commit != "" {
		from = "commit " + commit[:min(12, len(commit))] + " of the course repository"
	}
	return fmt.Appendf(nil, `> **Learner edition**, written by `+"`labctl export`"+` from %s.
> The reference solutions and their classic-bug mutants are not here, and neither are the
> commands that need them (`+"`make run`, `make test`, `make verify`"+`, …); where this README or
> docs/ point into `+"`solutions/`"+`, that file lives in the course repository. Start with
> `+"`make lab-01`"+`. `+"`make grade`"+` scores every lab against the pristine tests packed in
> `+"`%s`"+`.

`, from, PristineArchive)
}

// pruneModule drops the maintainers' tool directives and lets go mod tidy
// remove every requirement only solutions/ and the tools needed: the
// template's go.mod then lists what the labs and labctl import, and
// `go mod tidy` there changes nothing.
func pruneModule(ctx context.Context, dir string) error {
	out, err := commandOutput(ctx, dir, "go", "mod", "edit", "-json")
	if err != nil {
		return err
	}
	var mod struct{ Tool []struct{ Path string } }
	if err := json.Unmarshal(out, &mod); err != nil {
		return fmt.Errorf("read go.mod: %w", err)
	}
	if len(mod.Tool) > 0 {
		args := []string{"mod", "edit"}
		for _, t := range mod.Tool {
			args = append(args, "-droptool="+t.Path)
		}
		if _, err := commandOutput(ctx, dir, "go", args...); err != nil {
			return err
		}
	}
	if _, err := commandOutput(ctx, dir, "go", "mod", "tidy"); err != nil {
		return fmt.Errorf("go mod tidy in the template: %w", err)
	}
	return nil
}
