// Package export writes a learner template of one track of the course
// (labctl export): what each template holds and leaves out (its spec, which
// the instructor guide and the template's README quote), the learner's
// Makefile, and the search of every file written for any of that track's
// answers, archives unpacked and encodings undone (FindLeaks).
package export

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

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/grade"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
	"github.com/production-go/gateway-lab/internal/labkit/write"
)

// Options configures Run.
type Options struct {
	Root string // the course repository
	Dir  string // the template to write; must not exist yet, or be empty
	// Track is which half of the course the template holds: TrackLabs
	// (the default) or TrackWrite.
	Track catalog.Track
	// SkipTidy leaves go.mod and go.sum as they are instead of dropping the
	// tool directives and running `go mod tidy` (which needs the go command
	// and the modules, from the cache or a proxy).
	SkipTidy bool
	Log      io.Writer
}

// Report says what Run wrote.
type Report struct {
	Dir     string
	Track   catalog.Track
	Commit  string   // the course repository's HEAD, when it is a git checkout
	Files   int      // files copied or written
	Labs    []string // lab directories the template holds a track of
	Tests   int      // test files in the pristine archive (TrackLabs)
	Mutants int      // shipped mutants in the kit (TrackWrite)
	Dropped []string // Makefile targets left out of the learner's Makefile
	// Needles is how many answers the finished template was searched for.
	Needles int
}

// Run writes a learner template of the course into opts.Dir, holding
// one track (templateSpecs says what each holds; the instructor guide
// says why there are two). Whatever the track, the template holds none of
// that track's answers: Run searches every file it wrote, archives
// unpacked and encodings undone, for every answer (ImplementationAnswers,
// WriteAnswers), and fails with ErrAnswerInTemplate if it finds one.
func Run(ctx context.Context, opts Options) (*Report, error) {
	spec, err := specOf(opts.Track)
	if err != nil {
		return nil, err
	}
	root, dir, err := exportPaths(opts)
	if err != nil {
		return nil, err
	}
	rep := &Report{Dir: dir, Track: spec.Track}
	c, err := catalog.Load(root)
	if err != nil {
		return nil, err
	}
	if out, err := labfs.GitOutput(ctx, root, "rev-parse", "HEAD"); err == nil {
		rep.Commit = strings.TrimSpace(string(out))
	}
	if err := copyCourse(ctx, root, dir, spec, rep); err != nil {
		return nil, err
	}
	switch spec.Track {
	case catalog.TrackLabs:
		pristine, err := pristineOfLabs(root, c, rep)
		if err != nil {
			return nil, err
		}
		if err := exportArchive(dir, pristine); err != nil {
			return nil, err
		}
		if err := exportAutograding(dir); err != nil {
			return nil, err
		}
		rep.Files += 2
	case catalog.TrackWrite:
		if err := exportWriteKit(root, dir, c, rep); err != nil {
			return nil, err
		}
		rep.Files++
	}
	if !opts.SkipTidy {
		if opts.Log != nil {
			fmt.Fprintln(opts.Log, "export: dropping the maintainers' tools from go.mod and running go mod tidy…")
		}
		if err := pruneModule(ctx, dir); err != nil {
			return nil, err
		}
	}
	if opts.Log != nil {
		fmt.Fprintln(opts.Log, "export: searching every file of the template for answers…")
	}
	needles, err := spec.answers(root, c)
	if err != nil {
		return nil, err
	}
	rep.Needles = len(needles)
	leaks, err := FindLeaks(dir, needles)
	if err != nil {
		return nil, err
	}
	if len(leaks) > 0 {
		return rep, describeLeaks(dir, leaks)
	}
	return rep, nil
}

// pristineOfLabs reads the pristine test files of every built lab, lab
// directory → file name → content, and notes the labs and the count in
// rep. A lab whose tests in labs/ differ from them is an error: a template
// must ship the tests it grades with.
func pristineOfLabs(root string, c *catalog.Catalog, rep *Report) (map[string]map[string][]byte, error) {
	pristine := map[string]map[string][]byte{}
	for _, l := range c.BuiltLabs() {
		d, err := catalog.CompareTests(root, l)
		if err != nil {
			return nil, err
		}
		if !d.Empty() {
			return nil, fmt.Errorf("lab %s: the test files in labs/ and the pristine ones differ (%s); a template must ship the tests it grades with: run labctl verify %s", l.Number, d, l.Number)
		}
		if pristine[l.Dir], err = catalog.PristineTests(root, l); err != nil {
			return nil, err
		}
		rep.Labs = append(rep.Labs, l.Dir)
		rep.Tests += len(pristine[l.Dir])
	}
	return pristine, nil
}

// copyCourse copies the course files the track's template holds from root
// into dir, each in its learner's edition, and counts them in rep.
func copyCourse(ctx context.Context, root, dir string, spec *templateSpec, rep *Report) error {
	files, err := courseFiles(ctx, root)
	if err != nil {
		return err
	}
	for _, rel := range files {
		if !spec.copies(rel) {
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
		if data, err = spec.learnerEdition(rel, data, rep); err != nil {
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
// cut to the track's targets (the ones it drops noted in rep), the README
// and each lesson under a notice that says what the template holds;
// every other file as it is.
func (s *templateSpec) learnerEdition(rel string, data []byte, rep *Report) ([]byte, error) {
	switch rel {
	case "Makefile":
		mk, dropped, err := learnerMakefile(data, s.Targets)
		if err != nil {
			return nil, err
		}
		rep.Dropped = dropped
		return mk, nil
	case "README.md":
		return append([]byte(s.Notice(rep.Commit)), data...), nil
	}
	if strings.HasPrefix(rel, "labs/") && strings.HasSuffix(rel, "/README.md") {
		return append([]byte(s.LessonNotice), data...), nil
	}
	return data, nil
}

// exportArchive packs the pristine tests into the template's
// PristineArchive, which grading and the edited-tests banner read there.
func exportArchive(dir string, pristine map[string]map[string][]byte) error {
	var archive bytes.Buffer
	if err := catalog.WritePristineArchive(&archive, pristine); err != nil {
		return err
	}
	return writeFile(dir, catalog.PristineArchive, archive.Bytes(), 0o644)
}

// exportWriteKit packs the test-writing track of every built lab (the
// reference, its helpers, the shipped mutants; never the reference's tests)
// into the template's KitArchive, and writes each lab's starter file
// where the course has none.
func exportWriteKit(root, dir string, c *catalog.Catalog, rep *Report) error {
	var kits []*write.Kit
	for _, l := range c.BuiltLabs() {
		k, err := write.LoadKit(root, c, l)
		if err != nil {
			return err
		}
		kits = append(kits, k)
		rep.Labs = append(rep.Labs, l.Dir)
		rep.Mutants += len(k.Mutants)
		starter := filepath.Join(dir, write.DirOf(l), write.File)
		if _, err := os.Stat(starter); errors.Is(err, os.ErrNotExist) {
			pkg, err := write.PackageName(k.Ref)
			if err != nil {
				return err
			}
			if err := writeFile(dir, filepath.ToSlash(filepath.Join(write.DirOf(l), write.File)), write.Starter(l, pkg), 0o644); err != nil {
				return err
			}
			rep.Files++
		}
	}
	var archive bytes.Buffer
	if err := write.PackKits(&archive, kits); err != nil {
		return err
	}
	return writeFile(dir, catalog.KitArchive, archive.Bytes(), 0o644)
}

// exportPaths resolves the root and the destination, which must be empty
// and outside the repository (a template inside it would be copied into
// the next export, and its go.mod would split the module).
func exportPaths(opts Options) (root, dir string, err error) {
	if root, err = filepath.Abs(opts.Root); err != nil {
		return "", "", err
	}
	if opts.Dir == "" {
		return "", "", fmt.Errorf("%w: export needs a destination directory", catalog.ErrBadOption)
	}
	if dir, err = filepath.Abs(opts.Dir); err != nil {
		return "", "", err
	}
	if rel, err := filepath.Rel(root, dir); err == nil && !strings.HasPrefix(rel, "..") {
		return "", "", fmt.Errorf("%w: %s is inside the course repository; export to a directory outside it", catalog.ErrBadOption, opts.Dir)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case os.IsNotExist(err):
		return root, dir, nil
	case err != nil:
		return "", "", err
	case len(entries) > 0:
		return "", "", fmt.Errorf("%w: %s is not empty; export writes a fresh template", catalog.ErrBadOption, opts.Dir)
	}
	return root, dir, nil
}

// courseFiles lists the repository's files, slash-separated and relative to
// root: what git tracks or would track (untracked files that are not
// ignored) in a git checkout, else every file outside the build and cache
// directories.
func courseFiles(ctx context.Context, root string) ([]string, error) {
	if top, err := labfs.GitOutput(ctx, root, "rev-parse", "--show-toplevel"); err == nil && sameDir(strings.TrimSpace(string(top)), root) {
		out, err := labfs.GitOutput(ctx, root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
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
	doc, err := grade.GenerateAutograding(grade.ClassroomOptions{Root: dir})
	if err != nil {
		return err
	}
	b, err := doc.Marshal()
	if err != nil {
		return err
	}
	return writeFile(dir, grade.AutogradingFile, b, 0o644)
}

// pruneModule drops the maintainers' tool directives and lets go mod tidy
// remove every requirement only solutions/ and the tools needed: the
// template's go.mod then lists what the labs and labctl import, and
// `go mod tidy` there changes nothing.
func pruneModule(ctx context.Context, dir string) error {
	out, err := labfs.CommandOutput(ctx, dir, "go", "mod", "edit", "-json")
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
		if _, err := labfs.CommandOutput(ctx, dir, "go", args...); err != nil {
			return err
		}
	}
	if _, err := labfs.CommandOutput(ctx, dir, "go", "mod", "tidy"); err != nil {
		return fmt.Errorf("go mod tidy in the template: %w", err)
	}
	return nil
}
