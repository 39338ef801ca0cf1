package labkit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// VerifyOptions configures Verify.
type VerifyOptions struct {
	Root string
	Labs []Lab // nil: every built lab
	// StubsRef, when set, is a git revision whose labs/ tree is the pristine
	// stub: a learner's fork checks upstream's stubs, not its own solved ones.
	StubsRef    string
	NoRace      bool // solutions and mutants run with -race unless set
	Fresh       bool // -count=1: ignore the test cache
	SkipMutants bool
	Parallel    int       // mutant runs at once; 0 = 2
	Log         io.Writer // progress lines; nil = discard
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
}

// LabReport is everything Verify found about one lab.
type LabReport struct {
	Lab       Lab
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

// Verify checks every convention the labs rely on: lab and solution tests
// byte-identical; tests black-box (no unexported identifiers from non-test
// files); README and hints present and naming real tests; every exercise test
// red on the stub, one by one; every test green on the solution; every mutant
// patch killed by at least one test. Problems go into the reports; an error
// means the checks could not run.
func Verify(ctx context.Context, opts VerifyOptions) ([]LabReport, error) {
	labs, err := labsOrBuilt(opts.Root, opts.Labs)
	if err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, format+"\n", args...)
		}
	}
	count := 0
	if opts.Fresh {
		count = 1
	}
	reports := make([]LabReport, len(labs))
	for i, l := range labs {
		r := &reports[i]
		r.Lab = l
		if err := checkFiles(ctx, opts.Root, r); err != nil {
			return nil, err
		}
	}
	if len(labs) == 0 {
		return reports, nil
	}

	logf("verify: stubs should fail every test (%d labs)…", len(labs))
	if err := checkStubs(ctx, opts, reports, count); err != nil {
		return nil, err
	}

	logf("verify: solutions should pass every test under -race…")
	var pkgs []string
	for _, l := range labs {
		pkgs = append(pkgs, "./"+filepath.ToSlash(l.SolutionDir()))
	}
	run, err := RunTests(ctx, RunOptions{Dir: opts.Root, Packages: pkgs, Race: !opts.NoRace, Count: count, Timeout: 5 * time.Minute})
	if err != nil {
		return nil, err
	}
	for i := range reports {
		r := &reports[i]
		p := run.Package(r.Lab.SolutionDir())
		if p != nil && p.BuildFailed {
			r.problem("solution does not compile:\n%s", indent(p.Output))
			continue
		}
		for _, t := range r.Tests {
			switch res := p.Test(t); res.Status {
			case Pass:
				r.Green++
			case Skip:
				r.Green++
				r.Skipped = append(r.Skipped, t)
			default:
				r.problem("solution: %s %s\n%s", t, res.Status, indent(FailureMessage(res.Output)))
			}
		}
		if p != nil && p.Status == Fail && r.Green == len(r.Tests) {
			r.problem("solution: the package failed outside any test (TestMain, goleak or a panic):\n%s", indent(p.Output))
		}
	}

	if opts.SkipMutants {
		return reports, nil
	}
	for i := range reports {
		r := &reports[i]
		patches, _ := filepath.Glob(filepath.Join(opts.Root, r.Lab.SolutionDir(), "testdata", "mutants", "*.patch"))
		if len(patches) == 0 {
			r.problem("no mutant patches in %s/testdata/mutants: ship each classic bug as a patch", r.Lab.SolutionDir())
			continue
		}
		logf("verify: lab %s: %d mutants, each must be killed…", r.Lab.Number, len(patches))
		r.Mutants = runMutants(ctx, opts, r.Lab, patches, count)
		for _, m := range r.Mutants {
			switch {
			case m.Problem != "":
				r.problem("mutant %s: %s", m.Name, m.Problem)
			case !m.Killed:
				r.problem("mutant %s survived: no exercise test fails with this bug (see the comment at the top of the patch)", m.Name)
			}
		}
	}
	return reports, nil
}

// checkFiles covers the static conventions: files present, tests identical,
// hints naming real tests, and black-box tests.
func checkFiles(ctx context.Context, root string, r *LabReport) error {
	l := r.Lab
	for _, f := range []string{filepath.Join(l.LabDir(), "README.md"), filepath.Join(l.LabDir(), l.Hints)} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			r.problem("missing %s", f)
		}
	}
	diff, err := CompareTests(root, l)
	if err != nil {
		return err
	}
	r.Identical = diff.Empty()
	if !r.Identical {
		r.problem("labs/%s and solutions/%s test files must be byte-identical: %s", l.Dir, l.Dir, diff)
	}
	sources, err := ReadTestSources(filepath.Join(root, l.SolutionDir()))
	if err != nil {
		return err
	}
	if r.Tests, err = TestFuncs(sources); err != nil {
		r.problem("%v", err)
	}
	if len(r.Tests) == 0 {
		r.problem("no exercise tests in %s", l.SolutionDir())
	}
	if hints, err := LoadHints(root, l); err == nil {
		for _, h := range hints {
			for _, t := range h.Tests {
				if !slices.Contains(r.Tests, t) {
					r.problem("%s: hint %q names %s, which is not a test", l.Hints, h.Title, t)
				}
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		r.problem("%v", err)
	}
	r.APIClean = true
	for _, dir := range []string{l.LabDir(), l.SolutionDir()} {
		v, err := CheckBlackBox(ctx, root, dir)
		if err != nil {
			r.problem("%v", err)
			r.APIClean = false
			continue
		}
		for _, x := range v {
			r.APIClean = false
			r.problem("%s/%s: tests must use only the exported API", dir, x)
		}
	}
	return nil
}

func checkStubs(ctx context.Context, opts VerifyOptions, reports []LabReport, count int) error {
	var pkgs []string
	var overlayFile string
	if opts.StubsRef != "" {
		ov, err := NewOverlay()
		if err != nil {
			return err
		}
		defer ov.Close()
		for _, r := range reports {
			if err := overlayFromGit(ctx, opts.Root, opts.StubsRef, r.Lab.LabDir(), ov); err != nil {
				return err
			}
		}
		if overlayFile, err = ov.File(); err != nil {
			return err
		}
	}
	for _, r := range reports {
		pkgs = append(pkgs, "./"+filepath.ToSlash(r.Lab.LabDir()))
	}
	// Stubs run without -race: they return at once, and the check is about
	// which tests fail, not about timing.
	run, err := RunTests(ctx, RunOptions{Dir: opts.Root, Packages: pkgs, Count: max(count, 1), Overlay: overlayFile, Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	for i := range reports {
		r := &reports[i]
		p := run.Package(r.Lab.LabDir())
		if p != nil && p.BuildFailed {
			r.problem("stub does not compile (a stub must build and fail at run time):\n%s", indent(p.Output))
			continue
		}
		for _, t := range r.Tests {
			switch res := p.Test(t); res.Status {
			case Fail:
				r.StubsRed++
			case NotRun:
				r.problem("stub: %s never reported (a panic or hang in an earlier test hides the others)\n%s", t, indent(LastLines(p.Output, 8)))
			case Skip:
				if strings.Contains(res.Output, redisSkipMarker) {
					r.Unchecked = append(r.Unchecked, t) // needs a real Redis, and there is none here
					continue
				}
				r.problem("stub: %s is skip on the stub; every exercise test must fail until the learner writes the code", t)
			default:
				r.problem("stub: %s is %s on the stub; every exercise test must fail until the learner writes the code", t, res.Status)
			}
		}
	}
	return nil
}

// redisSkipMarker starts the skip message of the real-Redis test helper.
const redisSkipMarker = "redistest: skipped"

// overlayFromGit makes the build see dir exactly as it is at ref.
func overlayFromGit(ctx context.Context, root, ref, dir string, ov *Overlay) error {
	out, err := gitOutput(ctx, root, "ls-tree", "--name-only", ref, filepath.ToSlash(dir)+"/")
	if err != nil {
		return fmt.Errorf("list %s at %s: %w", dir, ref, err)
	}
	atRef := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasSuffix(p, ".go") {
			continue
		}
		content, err := gitOutput(ctx, root, "show", ref+":"+p)
		if err != nil {
			return fmt.Errorf("read %s at %s: %w", p, ref, err)
		}
		atRef[filepath.Base(p)] = true
		if err := ov.Set(filepath.Join(root, filepath.FromSlash(p)), content); err != nil {
			return err
		}
	}
	local, _ := filepath.Glob(filepath.Join(root, dir, "*.go"))
	for _, f := range local {
		if !atRef[filepath.Base(f)] {
			ov.Delete(f)
		}
	}
	return nil
}

func gitOutput(ctx context.Context, root string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = root
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil, fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
	}
	return out, err
}

func runMutants(ctx context.Context, opts VerifyOptions, l Lab, patches []string, count int) []MutantResult {
	results := make([]MutantResult, len(patches))
	parallel := opts.Parallel
	if parallel < 1 {
		parallel = 2
	}
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, p := range patches {
		results[i].Name = strings.TrimSuffix(filepath.Base(p), ".patch")
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			runMutant(ctx, opts, l, p, count, &results[i])
		})
	}
	wg.Wait()
	return results
}

func runMutant(ctx context.Context, opts VerifyOptions, l Lab, patchPath string, count int, res *MutantResult) {
	text, err := os.ReadFile(patchPath)
	if err != nil {
		res.Problem = err.Error()
		return
	}
	files, err := ParsePatch(string(text))
	if err != nil {
		res.Problem = err.Error()
		return
	}
	res.Required = requiredKillers(string(text))
	ov, err := NewOverlay()
	if err != nil {
		res.Problem = err.Error()
		return
	}
	defer ov.Close()
	for _, f := range files {
		if strings.HasSuffix(f.Path, "_test.go") {
			res.Problem = "a mutant changes the solution, never its tests (" + f.Path + ")"
			return
		}
		target := filepath.Join(opts.Root, l.SolutionDir(), filepath.FromSlash(f.Path))
		orig, err := os.ReadFile(target)
		if err != nil {
			res.Problem = err.Error()
			return
		}
		patched, err := f.Apply(string(orig))
		if err != nil {
			res.Problem = err.Error()
			return
		}
		if err := ov.Set(target, []byte(patched)); err != nil {
			res.Problem = err.Error()
			return
		}
	}
	overlay, err := ov.File()
	if err != nil {
		res.Problem = err.Error()
		return
	}
	run, err := RunTests(ctx, RunOptions{
		Dir: opts.Root, Packages: []string{"./" + filepath.ToSlash(l.SolutionDir())},
		Race: !opts.NoRace, Count: max(count, 1), Overlay: overlay, Timeout: 2 * time.Minute,
	})
	if err != nil {
		res.Problem = err.Error()
		return
	}
	p := run.Package(l.SolutionDir())
	if p == nil {
		res.Problem = "go test reported nothing for the package"
		return
	}
	if p.BuildFailed {
		res.Problem = "does not compile:\n" + indent(p.Output)
		return
	}
	for _, name := range p.Order {
		if p.Tests[name].Status == Fail {
			res.KilledBy = append(res.KilledBy, name)
		}
	}
	if len(res.KilledBy) == 0 && p.Status == Fail {
		res.KilledBy = []string{"(package)"}
	}
	res.Killed = len(res.KilledBy) > 0
	for _, want := range res.Required {
		switch {
		case slices.Contains(res.KilledBy, want):
		case p.Test(want).Status == Skip:
			res.Unchecked = append(res.Unchecked, want)
		default:
			res.Problem = fmt.Sprintf("must be killed by %s (the patch says so), but that test %s", want, p.Test(want).Status)
		}
	}
}

// requiredKillers reads "# Must be killed by: TestA, TestB" lines.
func requiredKillers(patch string) []string {
	var out []string
	for line := range strings.Lines(patch) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "# Must be killed by:")
		if !ok {
			continue
		}
		for _, name := range strings.Split(rest, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out = append(out, name)
			}
		}
	}
	return out
}

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return "      " + strings.ReplaceAll(s, "\n", "\n      ")
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
