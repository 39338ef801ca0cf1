package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/mutation"
	"github.com/production-go/gateway-lab/internal/labkit/write"
	"golang.org/x/sync/errgroup"
)

// mutantJob is one patch of one lab, and where its verdict goes.
type mutantJob struct {
	report *LabReport
	index  int
	patch  string
}

// checkMutants applies every lab's mutant patches, each in its own go test
// run, up to Parallel at once, and requires each mutant to be killed. A
// verdict cached for the same inputs is reused instead of run again.
func (v *verifier) checkMutants(ctx context.Context, reports []LabReport) error {
	var jobs []mutantJob
	for i := range reports {
		r := &reports[i]
		patches, _ := filepath.Glob(filepath.Join(v.Root, r.Lab.SolutionDir(), "testdata", "mutants", "*.patch"))
		if len(patches) == 0 {
			r.problem("no mutant patches in %s/testdata/mutants: ship each classic bug as a patch", r.Lab.SolutionDir())
			continue
		}
		r.Mutants = make([]MutantResult, len(patches))
		for k, p := range patches {
			jobs = append(jobs, mutantJob{report: r, index: k, patch: p})
		}
	}
	limit := v.Parallel
	if limit < 1 {
		limit = runtime.NumCPU()
	}
	v.logf("verify: %d mutants, each must be killed (%d at a time)…", len(jobs), limit)
	var g errgroup.Group
	g.SetLimit(limit)
	var done atomic.Int32
	for _, j := range jobs {
		g.Go(func() error {
			started := time.Now()
			res := v.mutant(ctx, j.report.Lab, j.patch)
			j.report.Mutants[j.index] = res
			v.logf("verify: [%d/%d] lab %s %s: %s", done.Add(1), len(jobs), j.report.Lab.Number, res.Name, verdict(res, time.Since(started)))
			return nil
		})
	}
	_ = g.Wait() // every job records its own problem and returns nil
	v.closeSchemas()
	for i := range reports {
		judgeMutants(&reports[i])
	}
	return ctx.Err()
}

// verdict is a mutant's progress line: how it ended and what it cost.
func verdict(m MutantResult, took time.Duration) string {
	var s string
	switch {
	case m.Problem != "":
		s = "BROKEN: " + gotest.FirstLine(m.Problem)
	case !m.Killed:
		s = "SURVIVED"
	default:
		s = "killed by " + strings.Join(m.KilledBy, ", ")
	}
	if m.Cached {
		return s + " (cached)"
	}
	return fmt.Sprintf("%s (%.1fs)", s, took.Seconds())
}

func judgeMutants(r *LabReport) {
	for _, m := range r.Mutants {
		switch {
		case m.Problem != "":
			r.problem("mutant %s: %s", m.Name, m.Problem)
		case !m.Killed:
			r.problem("mutant %s survived: no exercise test fails with this bug (see the comment at the top of the patch)", m.Name)
		}
	}
}

// mutant returns the verdict on one patch: from the cache, or from a run.
func (v *verifier) mutant(ctx context.Context, l catalog.Lab, patchPath string) MutantResult {
	res := MutantResult{Name: strings.TrimSuffix(filepath.Base(patchPath), ".patch")}
	if err := v.tryMutant(ctx, l, patchPath, &res); err != nil {
		res.Problem = err.Error()
	}
	return res
}

func (v *verifier) tryMutant(ctx context.Context, l catalog.Lab, patchPath string, res *MutantResult) error {
	text, err := os.ReadFile(patchPath)
	if err != nil {
		return err
	}
	key := v.cache.key("mutant", []string{l.SolutionDir()}, text)
	var cached MutantResult
	if !v.Fresh && v.cache.get(key, &cached) && cached.Killed {
		cached.Name, cached.Cached = res.Name, true
		*res = cached
		return nil
	}
	res.Required = mutation.RequiredKillers(string(text))
	p, err := v.runMutant(ctx, l, res.Name, string(text))
	if err != nil {
		return err
	}
	judgeMutant(res, p)
	if res.Killed && res.Problem == "" && len(res.Unchecked) == 0 {
		v.cache.put(key, *res)
	}
	return nil
}

// runMutant runs the solution's tests with the patch applied through an
// overlay; the working tree is never touched. A mutant that folds into the
// lab's schema runs in its binary, built once for all of them.
func (v *verifier) runMutant(ctx context.Context, l catalog.Lab, name, patch string) (*gotest.PackageResult, error) {
	if b := v.schemaFor(ctx, l); b != nil {
		if id, ok := b.ID(name); ok {
			p, used, err := b.Run(ctx, mutation.SchemaRunOptions{ID: id, Race: !v.NoRace, Timeout: 2 * time.Minute})
			if used || err != nil {
				return p, err
			}
		}
	}
	ov, err := mutantOverlay(v.Root, l, patch)
	if err != nil {
		return nil, err
	}
	defer ov.Close()
	overlay, err := ov.File()
	if err != nil {
		return nil, err
	}
	p, err := gotest.RunPackage(ctx, gotest.RunOptions{
		Dir: v.Root, Packages: []string{"./" + filepath.ToSlash(l.SolutionDir())},
		Race: !v.NoRace, Count: 1, Overlay: overlay, Timeout: 2 * time.Minute,
	})
	if err == nil && p.BuildFailed {
		err = fmt.Errorf("does not compile:\n%s", gotest.Indent(p.Output, 6))
	}
	return p, err
}

// mutantOverlay applies a patch to the solution's files in an overlay.
func mutantOverlay(root string, l catalog.Lab, patch string) (*gotest.Overlay, error) {
	files, err := mutation.ParsePatch(patch)
	if err != nil {
		return nil, err
	}
	ov, err := gotest.NewOverlay()
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := overlayPatched(ov, filepath.Join(root, l.SolutionDir(), filepath.FromSlash(f.Path)), f); err != nil {
			ov.Close()
			return nil, err
		}
	}
	return ov, nil
}

func overlayPatched(ov *gotest.Overlay, target string, f mutation.FilePatch) error {
	if strings.HasSuffix(f.Path, "_test.go") {
		return fmt.Errorf("a mutant changes the solution, never its tests (%s)", f.Path)
	}
	orig, err := os.ReadFile(target)
	if err != nil {
		return err
	}
	patched, err := f.Apply(string(orig))
	if err != nil {
		return err
	}
	return ov.Set(target, []byte(patched))
}

// judgeMutant reads a mutant's run: which tests killed it, and whether the
// tests its patch requires were among them.
func judgeMutant(res *MutantResult, p *gotest.PackageResult) {
	for _, name := range p.Order {
		if p.Tests[name].Status == gotest.Fail {
			res.KilledBy = append(res.KilledBy, name)
		}
	}
	if len(res.KilledBy) == 0 && p.Status == gotest.Fail {
		res.KilledBy = []string{"(package)"}
	}
	res.Killed = len(res.KilledBy) > 0
	// The test-writing track counts only assertion kills inside its time
	// limit; the reference's tests are its self-check, so each mutant needs
	// at least one such kill (labctl write NN --self-check: killed N/N).
	if res.Killed && !slices.ContainsFunc(res.KilledBy, func(n string) bool {
		return n == "(package)" && strings.Contains(p.Output, "found unexpected goroutines") || n != "(package)" && write.Discount(p.Test(n), write.TestLimit) == ""
	}) {
		var why []string
		for _, n := range res.KilledBy {
			why = append(why, n+" "+write.Discount(p.Test(n), write.TestLimit))
		}
		res.Problem = "killed only by crashes or hangs (" + strings.Join(why, "; ") + "): the test-writing track would not count it; a test must catch it by what it asserts, inside " + write.TestLimit.String()
	}
	for _, want := range res.Required {
		switch {
		case slices.Contains(res.KilledBy, want):
		case p.Test(want).Status == gotest.Skip:
			res.Unchecked = append(res.Unchecked, want)
		default:
			res.Problem = fmt.Sprintf("must be killed by %s (the patch says so), but that test %s", want, p.Test(want).Status)
		}
	}
}

// labSchema is one lab's mutants folded into one build, made when the
// first of them needs a run.
type labSchema struct {
	once  sync.Once
	build *mutation.SchemaBuild
}

// schemaFor is the lab's schema, nil when none folds (or with OneByOne).
func (v *verifier) schemaFor(ctx context.Context, l catalog.Lab) *mutation.SchemaBuild {
	if v.OneByOne {
		return nil
	}
	v.mu.Lock()
	if v.schemas == nil {
		v.schemas = map[string]*labSchema{}
	}
	ls := v.schemas[l.Dir]
	if ls == nil {
		ls = &labSchema{}
		v.schemas[l.Dir] = ls
	}
	v.mu.Unlock()
	ls.once.Do(func() {
		dir := filepath.Join(v.Root, l.SolutionDir())
		ref, err := solutionFiles(dir)
		if err != nil {
			return
		}
		var ms []mutation.SchemaMutant
		patches, _ := filepath.Glob(filepath.Join(dir, "testdata", "mutants", "*.patch"))
		for _, p := range patches {
			if patched, ok := patchedFiles(ref, p); ok {
				ms = append(ms, mutation.SchemaMutant{Name: strings.TrimSuffix(filepath.Base(p), ".patch"), Patched: patched})
			}
		}
		overlay := func(files map[string][]byte) (*gotest.Overlay, error) {
			ov, err := gotest.NewOverlay()
			if err != nil {
				return nil, err
			}
			for name, data := range files {
				if err := ov.Set(filepath.Join(dir, name), data); err != nil {
					ov.Close()
					return nil, err
				}
			}
			return ov, nil
		}
		ls.build = mutation.NewSchemaBuild(ctx, v.Root, "./"+filepath.ToSlash(l.SolutionDir()), ref, ms, overlay, func(format string, args ...any) {
			v.logf("verify: lab "+l.Number+": "+format, args...)
		})
	})
	return ls.build
}

func (v *verifier) closeSchemas() {
	for _, ls := range v.schemas {
		ls.build.Close()
	}
}

// solutionFiles are a solution's own files, tests aside: name → content.
func solutionFiles(dir string) (map[string][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	for _, e := range entries {
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		files[e.Name()] = b
	}
	return files, nil
}

// patchedFiles applies a mutant's patch to ref; ok is false for one that
// does not apply, or touches a test or a file in a subdirectory (it runs
// on its own and says why).
func patchedFiles(ref map[string][]byte, patchPath string) (map[string][]byte, bool) {
	text, err := os.ReadFile(patchPath)
	if err != nil {
		return nil, false
	}
	fps, err := mutation.ParsePatch(string(text))
	if err != nil {
		return nil, false
	}
	patched := map[string][]byte{}
	for _, f := range fps {
		orig, ok := ref[f.Path]
		if !ok || strings.HasSuffix(f.Path, "_test.go") {
			return nil, false
		}
		out, err := f.Apply(string(orig))
		if err != nil {
			return nil, false
		}
		patched[f.Path] = []byte(out)
	}
	return patched, true
}
