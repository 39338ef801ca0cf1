// Package verify checks every convention the labs rely on (labctl verify):
// lab and solution tests byte-identical and black-box, the reference
// exporting exactly the stub's API, hints naming real tests, every exercise
// test red on the stub and green on the solution, and every mutant killed
// the way the test-writing track counts a kill. Verdicts whose inputs did
// not change are remembered (cacheDir).
package verify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
	"github.com/production-go/gateway-lab/internal/testkit/redismark"
)

// Options configures Run.
type Options struct {
	Root string
	Labs []catalog.Lab // nil: every built lab
	// StubsRef, when set, is a git revision whose labs/ tree is the pristine
	// stub: a learner's fork checks upstream's stubs, not its own solved ones.
	StubsRef string
	NoRace   bool // tests run with -race unless set
	Fresh    bool // -count=1 and no verify cache: run everything again
	// Fast checks only what needs no solution run: files, identical tests,
	// black-box tests and stubs red. `make test` runs the solutions itself.
	Fast        bool
	SkipMutants bool
	Parallel    int       // mutant runs at once; 0 = one per CPU
	Log         io.Writer // progress lines; nil = discard
	// OneByOne builds each mutant on its own instead of a lab's mutants
	// in one test binary (the mutant schema, internal/labkit/mutation/schema.go).
	OneByOne bool
}

// MutantResult is one mutant patch's fate.
type MutantResult struct {
	Name     string
	Killed   bool
	KilledBy []string // failing tests, or "(package)" for a failure outside any test
	Problem  string   // the patch does not apply, the mutant does not compile, or a required killer missed it
	// Required lists the tests a "# Must be killed by: …" line in the patch
	// names: the mutant only counts as killed if each of them fails.
	Required []string
	// Unchecked lists required tests that skipped (no real Redis here).
	Unchecked []string
	Cached    bool // the verdict came from the verify cache
}

// LabReport is everything Run found about one lab.
type LabReport struct {
	Lab       catalog.Lab
	Tests     []string // the exercise tests, from the test files
	StubsRed  int
	Green     int
	Skipped   []string // solution tests that skipped
	Unchecked []string // stub tests that skipped for want of Redis: neither red nor a problem
	Mutants   []MutantResult
	Problems  []string
	Identical bool
	APIClean  bool
}

// OK reports whether the lab met every convention.
func (r LabReport) OK() bool { return len(r.Problems) == 0 }

// Killed counts the mutants at least one test killed.
func (r LabReport) Killed() int {
	n := 0
	for _, m := range r.Mutants {
		if m.Killed {
			n++
		}
	}
	return n
}

func (r *LabReport) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// verifier carries one Run call's options and its progress log, which
// the mutant runs write to concurrently.
type verifier struct {
	Options
	cache   *verifyCache
	mu      sync.Mutex
	schemas map[string]*labSchema // by lab dir
}

func (v *verifier) logf(format string, args ...any) {
	if v.Log == nil {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	fmt.Fprintf(v.Log, format+"\n", args...)
}

// count is go test's -count: 1 ignores the test cache.
func (v *verifier) count() int {
	if v.Fresh {
		return 1
	}
	return 0
}

// Run checks every convention the labs rely on: lab and solution tests
// byte-identical; tests black-box (no unexported identifiers from non-test
// files); README and hints present and naming real tests; every exercise test
// red on the stub, one by one; every test green on the solution; every mutant
// patch killed by at least one test. Problems go into the reports; an error
// means the checks could not run.
func Run(ctx context.Context, opts Options) ([]LabReport, error) {
	labs, err := catalog.LabsOrBuilt(opts.Root, opts.Labs)
	if err != nil {
		return nil, err
	}
	reports := make([]LabReport, len(labs))
	if len(labs) == 0 {
		return reports, nil
	}
	v := &verifier{Options: opts}
	v.cache = v.openCache(ctx, labs)
	v.logf("verify: files, identical tests, black-box tests (%d labs)…", len(labs))
	for i, l := range labs {
		reports[i].Lab = l
		if err := v.checkFiles(&reports[i]); err != nil {
			return nil, err
		}
	}
	if err := v.checkBlackBox(ctx, reports); err != nil {
		return nil, err
	}
	v.logf("verify: stubs should fail every test…")
	if err := v.checkStubs(ctx, reports); err != nil {
		return nil, err
	}
	if opts.Fast {
		return reports, nil
	}
	v.logf("verify: solutions should pass every test…")
	if err := v.checkSolutions(ctx, reports); err != nil {
		return nil, err
	}
	if opts.SkipMutants {
		return reports, nil
	}
	return reports, v.checkMutants(ctx, reports)
}

// checkFiles covers the conventions a read of the files settles: files
// present, tests identical, hints naming real tests, the same exported API.
func (v *verifier) checkFiles(r *LabReport) error {
	l := r.Lab
	for _, f := range []string{filepath.Join(l.LabDir(), "README.md"), filepath.Join(l.LabDir(), l.Hints)} {
		if _, err := os.Stat(filepath.Join(v.Root, f)); err != nil {
			r.problem("missing %s", f)
		}
	}
	if err := v.checkTwins(r); err != nil {
		return err
	}
	v.checkHints(r)
	return v.checkExports(r)
}

// checkExports requires the reference to export exactly the stub's API
// (see exports.go).
func (v *verifier) checkExports(r *LabReport) error {
	stub, err := exportedAPI(filepath.Join(v.Root, r.Lab.LabDir()))
	if err != nil {
		return err
	}
	ref, err := exportedAPI(filepath.Join(v.Root, r.Lab.SolutionDir()))
	if err != nil {
		return err
	}
	extra, missing := exportDiff(stub, ref)
	for _, e := range extra {
		r.problem("solutions/%s exports %s, which the stub does not: a product extension belongs in the product's own package", r.Lab.Dir, e)
	}
	for _, e := range missing {
		r.problem("the stub exports %s, which solutions/%s does not", e, r.Lab.Dir)
	}
	return nil
}

// checkTwins compares the lab's and the solution's test files and lists the tests.
func (v *verifier) checkTwins(r *LabReport) error {
	l := r.Lab
	diff, err := catalog.CompareTests(v.Root, l)
	if err != nil {
		return err
	}
	r.Identical = diff.Empty()
	if !r.Identical {
		r.problem("labs/%s and solutions/%s test files must be byte-identical: %s", l.Dir, l.Dir, diff)
	}
	sources, err := catalog.ReadTestSources(filepath.Join(v.Root, l.SolutionDir()))
	if err != nil {
		return err
	}
	if r.Tests, err = catalog.ExerciseTestFuncs(sources); err != nil {
		r.problem("%v", err)
	}
	if len(r.Tests) == 0 {
		r.problem("no exercise tests in %s", l.SolutionDir())
	}
	return nil
}

// checkHints requires every hint to keep the rules for its levels
// (HintProblems), every "Tests:" line of the hints to name real tests,
// and every test to be named by a hint: labctl test shows the hint that
// names the first failure, and a test no hint names gets whichever hint
// comes next, unrelated to what failed.
func (v *verifier) checkHints(r *LabReport) {
	hints, err := catalog.LoadHints(v.Root, r.Lab)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.problem("%v", err)
		}
		return
	}
	for _, h := range hints {
		for _, p := range catalog.HintProblems(h) {
			r.problem("%s: hint %q: %s", r.Lab.Hints, h.Title, p)
		}
		for _, t := range h.Tests {
			if !slices.Contains(r.Tests, t) {
				r.problem("%s: hint %q names %s, which is not a test", r.Lab.Hints, h.Title, t)
			}
		}
	}
	for _, t := range r.Tests {
		if catalog.HintFor(hints, t) < 0 {
			r.problem("%s: no hint names %s (add it to the Tests: line of the hint that fixes it)", r.Lab.Hints, t)
		}
	}
}

// checkBlackBox requires the tests of both twins to use only the exported
// API. The labs whose verdict is cached are not loaded again; the others are
// type-checked in one load.
func (v *verifier) checkBlackBox(ctx context.Context, reports []LabReport) error {
	var dirs []string
	keys := make([]string, len(reports))
	for i := range reports {
		r := &reports[i]
		r.APIClean = true
		keys[i] = v.cache.key("blackbox", []string{r.Lab.LabDir(), r.Lab.SolutionDir()}, nil)
		var clean bool
		if !v.Fresh && v.cache.get(keys[i], &clean) && clean {
			continue
		}
		dirs = append(dirs, r.Lab.LabDir(), r.Lab.SolutionDir())
	}
	if len(dirs) == 0 {
		v.logf("verify: black-box: every lab's verdict is cached")
		return nil
	}
	found, err := blackBoxUses(ctx, v.Root, dirs, !v.NoRace)
	if err != nil {
		return err
	}
	for i := range reports {
		r := &reports[i]
		if !slices.Contains(dirs, r.Lab.LabDir()) {
			continue
		}
		for _, dir := range []string{r.Lab.LabDir(), r.Lab.SolutionDir()} {
			res := found[filepath.Clean(dir)]
			if res.Err != nil {
				r.problem("%v", res.Err)
				r.APIClean = false
			}
			for _, x := range res.Violations {
				r.APIClean = false
				r.problem("%s/%s: tests must use only the exported API", dir, x)
			}
		}
		if r.APIClean {
			v.cache.put(keys[i], true)
		}
	}
	return nil
}

// checkStubs runs the stubs and requires each exercise test to fail. A lab
// whose stub failed every test before, with the same inputs, is not run
// again. Stubs run with -race like everything else only to share its build
// cache: they return at once, and the check is about which tests fail.
func (v *verifier) checkStubs(ctx context.Context, reports []LabReport) error {
	var pkgs []string
	var todo []*LabReport
	keys := map[*LabReport]string{}
	for i := range reports {
		r := &reports[i]
		if v.StubsRef == "" { // stubs from git are not what the key hashes
			keys[r] = v.cache.key("stubs", []string{r.Lab.LabDir()}, []byte(strings.Join(r.Tests, ",")))
			if red := 0; !v.Fresh && v.cache.get(keys[r], &red) && red == len(r.Tests) {
				r.StubsRed = red
				continue
			}
		}
		todo = append(todo, r)
		pkgs = append(pkgs, "./"+filepath.ToSlash(r.Lab.LabDir()))
	}
	if len(todo) == 0 {
		v.logf("verify: stubs: every lab's verdict is cached")
		return nil
	}
	overlayFile, cleanup, err := v.stubsOverlay(ctx, todo)
	if err != nil {
		return err
	}
	defer cleanup()
	run, err := gotest.RunTests(ctx, gotest.RunOptions{Dir: v.Root, Packages: pkgs, Race: !v.NoRace, Count: 1, Overlay: overlayFile, Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	for _, r := range todo {
		problems := len(r.Problems)
		judgeStub(r, run.Package(r.Lab.LabDir()))
		if len(r.Problems) == problems && r.StubsRed == len(r.Tests) {
			v.cache.put(keys[r], r.StubsRed)
		}
	}
	return nil
}

// stubsOverlay makes the build see labs/ as it is at StubsRef ("" without one).
func (v *verifier) stubsOverlay(ctx context.Context, reports []*LabReport) (file string, cleanup func(), err error) {
	if v.StubsRef == "" {
		return "", func() {}, nil
	}
	ov, err := gotest.NewOverlay()
	if err != nil {
		return "", nil, err
	}
	for _, r := range reports {
		if err := overlayFromGit(ctx, v.Root, v.StubsRef, r.Lab.LabDir(), ov); err != nil {
			ov.Close()
			return "", nil, err
		}
	}
	if file, err = ov.File(); err != nil {
		ov.Close()
		return "", nil, err
	}
	return file, func() { ov.Close() }, nil
}

func judgeStub(r *LabReport, p *gotest.PackageResult) {
	judgeTests(r, p, "stub does not compile (a stub must build and fail at run time)", func(t string, res gotest.TestResult) {
		switch res.Status {
		case gotest.Fail:
			r.StubsRed++
		case gotest.NotRun:
			r.problem("stub: %s never reported (a panic or hang in an earlier test hides the others)\n%s", t, gotest.Indent(gotest.LastLines(p.Output, 8), 6))
		case gotest.Skip:
			if _, ok := redismark.SkipReason(res.Output); ok {
				r.Unchecked = append(r.Unchecked, t) // needs a real Redis, and there is none here
				return
			}
			r.problem("stub: %s is skip on the stub; every exercise test must fail until the learner writes the code", t)
		default:
			r.problem("stub: %s is %s on the stub; every exercise test must fail until the learner writes the code", t, res.Status)
		}
	})
}

// judgeTests hands each exercise test's result in p to judge, unless the
// package did not build, which is one problem, named by buildProblem.
func judgeTests(r *LabReport, p *gotest.PackageResult, buildProblem string, judge func(test string, res gotest.TestResult)) bool {
	if p != nil && p.BuildFailed {
		r.problem("%s:\n%s", buildProblem, gotest.Indent(p.Output, 6))
		return false
	}
	for _, t := range r.Tests {
		judge(t, p.Test(t))
	}
	return true
}

// checkSolutions runs every solution and requires every test to pass.
func (v *verifier) checkSolutions(ctx context.Context, reports []LabReport) error {
	var pkgs []string
	for _, r := range reports {
		pkgs = append(pkgs, "./"+filepath.ToSlash(r.Lab.SolutionDir()))
	}
	run, err := gotest.RunTests(ctx, gotest.RunOptions{Dir: v.Root, Packages: pkgs, Race: !v.NoRace, Count: v.count(), Timeout: 5 * time.Minute})
	if err != nil {
		return err
	}
	for i := range reports {
		judgeSolution(&reports[i], run.Package(reports[i].Lab.SolutionDir()))
	}
	return nil
}

func judgeSolution(r *LabReport, p *gotest.PackageResult) {
	built := judgeTests(r, p, "solution does not compile", func(t string, res gotest.TestResult) {
		switch res.Status {
		case gotest.Pass:
			r.Green++
		case gotest.Skip:
			r.Green++
			r.Skipped = append(r.Skipped, t)
		default:
			r.problem("solution: %s %s\n%s", t, res.Status, gotest.Indent(gotest.FailureMessage(res.Output), 6))
		}
	})
	if built && p != nil && p.Status == gotest.Fail && r.Green == len(r.Tests) {
		r.problem("solution: the package failed outside any test (TestMain, goleak or a panic):\n%s", gotest.Indent(p.Output, 6))
	}
}

// overlayFromGit makes the build see dir exactly as it is at ref.
func overlayFromGit(ctx context.Context, root, ref, dir string, ov *gotest.Overlay) error {
	atRef, err := labfs.GitFiles(ctx, root, ref, dir, func(name string) bool { return strings.HasSuffix(name, ".go") })
	if err != nil {
		return err
	}
	for name, content := range atRef {
		if err := ov.Set(filepath.Join(root, dir, name), content); err != nil {
			return err
		}
	}
	local, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
	for _, f := range local {
		if _, ok := atRef[filepath.Base(f)]; !ok {
			ov.Delete(f)
		}
	}
	return nil
}
