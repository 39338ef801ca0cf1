package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/grade"
	"github.com/production-go/gateway-lab/internal/labkit/verify"
	"github.com/production-go/gateway-lab/internal/testkit/redismark"
)

func cmdVerify(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	stubsRef := fs.String("stubs-ref", "", "git `revision` whose labs/ are the pristine stubs (a fork passes upstream's commit)")
	noRace := fs.Bool("no-race", false, "run stubs, solutions and mutants without -race")
	fresh := fs.Bool("fresh", false, "run everything again: ignore the test cache and the mutant verdict cache")
	fast := fs.Bool("fast", false, "only files, identical tests, black-box tests and stubs red (no solution or mutant runs)")
	skipMutants := fs.Bool("skip-mutants", false, "skip the kill matrix")
	parallel := fs.Int("parallel", 0, "mutant runs at once (0: one per CPU)")
	oneByOne := fs.Bool("one-by-one", false, "build each mutant on its own instead of a lab's mutants in one test binary (slower)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := needsSolutions(e, "verify"); err != nil {
		return err
	}
	c, err := catalog.Load(e.root)
	if err != nil {
		return err
	}
	labs, err := c.Select(pos)
	if err != nil {
		return err
	}
	started := time.Now()
	reports, err := verify.Run(ctx, verify.Options{
		Root: e.root, Labs: labs, StubsRef: *stubsRef, NoRace: *noRace, Fresh: *fresh,
		Fast: *fast, SkipMutants: *skipMutants || *fast, Parallel: *parallel, Log: e.stderr, OneByOne: *oneByOne,
	})
	if err != nil {
		return err
	}
	printVerifyTable(e.stdout, reports, *fast, *skipMutants || *fast)
	printVerifyNotes(e.stdout, reports)
	return verifyVerdict(e.stdout, reports, time.Since(started))
}

func printVerifyTable(w io.Writer, reports []verify.LabReport, fast, skipMutants bool) {
	t := table(w)
	fmt.Fprintln(w)
	fmt.Fprintln(t, "lab\tdir\ttests\tidentical\tblack-box\tstubs red\tgreen\tmutants killed")
	for _, r := range reports {
		green := fmt.Sprintf("%d/%d", r.Green, len(r.Tests))
		if fast {
			green = "(go test)"
		}
		mut := fmt.Sprintf("%d/%d", r.Killed(), len(r.Mutants))
		if skipMutants {
			mut = "skipped"
		}
		fmt.Fprintf(t, "%s\t%s\t%d\t%s\t%s\t%d/%d\t%s\t%s\n", r.Lab.Number, r.Lab.Dir, len(r.Tests),
			mark(r.Identical), mark(r.APIClean), r.StubsRed, len(r.Tests), green, mut)
	}
	t.Flush()
}

// printVerifyNotes says what could not be checked here, and each lab's kill matrix.
func printVerifyNotes(w io.Writer, reports []verify.LabReport) {
	for _, r := range reports {
		if len(r.Unchecked) > 0 {
			fmt.Fprintf(w, "\nlab %s: not checked on the stub (they need a real Redis; install redis-server or set REDIS_URL): %s\n", r.Lab.Number, strings.Join(r.Unchecked, ", "))
		}
		for _, m := range r.Mutants {
			if len(m.Unchecked) > 0 {
				fmt.Fprintf(w, "\nlab %s: mutant %s must be killed by %s, which skipped here (no real Redis): not checked\n", r.Lab.Number, m.Name, strings.Join(m.Unchecked, ", "))
			}
		}
		if len(r.Skipped) > 0 {
			fmt.Fprintf(w, "\nlab %s: skipped on the solution (counted green; `labctl integration` runs them for real): %s\n", r.Lab.Number, strings.Join(r.Skipped, ", "))
		}
		if len(r.Mutants) == 0 {
			continue
		}
		fmt.Fprintf(w, "\nlab %s kill matrix:\n", r.Lab.Number)
		t := table(w)
		for _, m := range r.Mutants {
			by := strings.Join(m.KilledBy, ", ")
			switch {
			case m.Problem != "":
				by = "BROKEN"
			case !m.Killed:
				by = "SURVIVED"
			}
			fmt.Fprintf(t, "  %s\t%s\n", m.Name, by)
		}
		t.Flush()
	}
}

func verifyVerdict(w io.Writer, reports []verify.LabReport, took time.Duration) error {
	bad := 0
	for _, r := range reports {
		if !r.OK() {
			bad++
		}
	}
	if bad == 0 {
		fmt.Fprintf(w, "\nverify: %d labs OK (%.0fs)\n", len(reports), took.Seconds())
		return nil
	}
	fmt.Fprintf(w, "\nverify: %d of %d labs have problems:\n", bad, len(reports))
	for _, r := range reports {
		for _, p := range r.Problems {
			fmt.Fprintf(w, "  lab %s: %s\n", r.Lab.Number, p)
		}
	}
	return errRed
}

func mark(ok bool) string {
	if ok {
		return "✓"
	}
	return "✗"
}

func cmdGrade(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	out := fs.String("out", "grade-report", "`dir` for grade.json, junit.xml and grade.md")
	tests := fs.String("tests", "", "`dir` of held-back tests: DIR/NN-topic/*_test.go are added to lab NN")
	ref := fs.String("pristine-ref", "", "git `revision` whose solutions/ tests are the pristine ones (default: this checkout's solutions/)")
	noRace := fs.Bool("no-race", false, "grade without the race detector")
	mutants := fs.String("mutants", "", "`dir` of held-back mutants for the test-writing track: DIR/NN-topic/*.patch")
	noWrite := fs.Bool("no-write", false, "leave the test-writing track (write/NN-topic) out of the grade")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	c, err := catalog.Load(e.root)
	if err != nil {
		return err
	}
	var labs []catalog.Lab // nil: every lab of every track here
	if len(pos) > 0 {
		if labs, err = c.SelectAny(pos); err != nil {
			return err
		}
	}
	g, err := grade.Run(ctx, grade.Options{Root: e.root, Labs: labs, TestsDir: *tests, PristineRef: *ref, NoRace: *noRace, Log: e.stderr,
		MutantsDir: *mutants, SkipWrite: *noWrite})
	if err != nil {
		return err
	}
	dir := *out
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(e.root, dir)
	}
	if err := g.WriteReports(dir); err != nil {
		return err
	}
	printGrade(e, g, *out)
	return nil
}

// printGrade is the grade on the terminal: a row per lab with the tracks
// this checkout holds, then the notes, the checklist, and the totals.
func printGrade(e *env, g *grade.Report, out string) {
	labs, write := slices.Contains(g.Tracks, catalog.TrackLabs), slices.Contains(g.Tracks, catalog.TrackWrite)
	t := table(e.stdout)
	head := "lab\ttitle"
	if labs {
		head += "\tpassed"
	}
	if write {
		head += "\ttests track"
	}
	fmt.Fprintln(t, head+"\tnote")
	var notes []string
	for _, l := range g.Labs {
		fmt.Fprintf(t, "%s\t%s", l.Number, l.Title)
		if labs {
			fmt.Fprintf(t, "\t%d/%d", l.Passed, l.Total)
		}
		if write {
			track := "-"
			if l.Write != nil {
				track = l.Write.Line()
			}
			fmt.Fprintf(t, "\t%s", track)
		}
		if l.Edited {
			fmt.Fprint(t, "\tedited tests restored")
		}
		fmt.Fprintln(t)
		if l.NoRedis != "" {
			notes = append(notes, "lab "+l.Number+": "+l.NoRedis)
		}
	}
	t.Flush()
	for _, n := range notes {
		fmt.Fprintln(e.stdout, n)
	}
	for _, l := range g.Labs {
		if line := l.HintsLine(); line != "" {
			fmt.Fprintf(e.stdout, "lab %s %s\n", l.Number, line)
		}
	}
	var items []string
	for _, l := range g.Labs {
		if line := l.ChecklistLine(); line != "" {
			items = append(items, "  "+line)
		}
	}
	if len(items) > 0 {
		fmt.Fprintln(e.stdout, "\nproduction promises your code keeps (checklist/PRODUCTION_READINESS.md):")
		fmt.Fprintln(e.stdout, strings.Join(items, "\n"))
	}
	fmt.Fprintln(e.stdout)
	if write {
		fmt.Fprintf(e.stdout, "test-writing track: %d/%d mutants killed by your tests in write/\n", g.MutantsKilled, g.MutantsTotal)
	}
	if labs {
		fmt.Fprintf(e.stdout, "grade: %d/%d tests (%.0f%%)\n", g.Passed, g.Total, 100*g.Score())
	}
	fmt.Fprintf(e.stdout, "reports in %s/{grade.json,junit.xml,grade.md}\n", out)
}

// needsSolutions refuses a maintainer's command where there is no
// solutions/ to check: in a learner template.
func needsSolutions(e *env, name string) error {
	if fi, err := os.Stat(filepath.Join(e.root, "solutions")); err == nil && fi.IsDir() {
		return nil
	}
	return fmt.Errorf("%w: labctl %s is a maintainer's command: it checks the course's solutions/, which a learner template does not hold (labctl grade grades this one)", catalog.ErrOtherTrack, name)
}

func cmdIntegration(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	runRe := fs.String("run", "^"+gotest.IntegrationPrefix, "regexp selecting the real-Redis tests")
	minTests := fs.Int("min", 1, "fail unless at least this many tests ran")
	require := fs.String("require", "", "comma-separated `tests` that must be among those that ran and passed")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := needsSolutions(e, "integration"); err != nil {
		return err
	}
	pkgs := pos
	if len(pkgs) == 0 {
		pkgs = []string{"./internal/...", "./solutions/...", "./gateway/..."}
	}
	fmt.Fprintf(e.stderr, "integration: go test -race -run '%s' %s with REDIS_INTEGRATION_REQUIRED=1…\n", *runRe, strings.Join(pkgs, " "))
	run, err := gotest.RunTests(ctx, gotest.RunOptions{
		Dir: e.root, Packages: pkgs, Race: true, Count: 1, Run: *runRe, Timeout: 5 * time.Minute,
		Env: []string{"REDIS_INTEGRATION_REQUIRED=1"},
	})
	if err != nil {
		return err
	}
	gate := judgeIntegration(run)
	gate.require(*require)
	if gate.ran < *minTests {
		gate.fail(fmt.Sprintf("%d tests matched %q, want at least %d: a filter that matches nothing is a green that proves nothing", gate.ran, *runRe, *minTests))
	}
	gate.print(e.stdout)
	if len(gate.problems) > 0 {
		return errRed
	}
	return nil
}

// integrationGate is the verdict on a real-Redis run: a row per test, and
// every reason the run proves less than it claims.
type integrationGate struct {
	rows     [][]string // test, status, real Redis
	problems []string
	passed   map[string]bool
	ran      int
}

func (g *integrationGate) fail(problem string) { g.problems = append(g.problems, problem) }

// judgeIntegration requires every selected test to pass, never skip, and
// show the real-Redis line.
func judgeIntegration(run *gotest.Run) *integrationGate {
	g := &integrationGate{passed: map[string]bool{}}
	paths := slices.Sorted(func(yield func(string) bool) {
		for p := range run.Packages {
			if !yield(p) {
				return
			}
		}
	})
	for _, path := range paths {
		p := run.Packages[path]
		if p.BuildFailed {
			g.fail(path + " does not compile")
		}
		for _, name := range p.Order {
			g.judgeTest(shortPkg(path), p.Tests[name])
		}
		if p.Status == gotest.Fail && len(p.Order) == 0 && !p.BuildFailed {
			g.fail(path + " failed outside any test:\n" + gotest.Indent(gotest.LastLines(p.Output, 15), 4))
		}
	}
	return g
}

func (g *integrationGate) judgeTest(pkg string, t *gotest.TestResult) {
	g.ran++
	real := strings.Contains(t.Output, redismark.Real)
	g.rows = append(g.rows, []string{pkg + "." + t.Name, string(t.Status), mark(real)})
	switch {
	case t.Status == gotest.Skip:
		g.fail(t.Name + " skipped: the integration gate counts a skip as a failure")
	case t.Status != gotest.Pass:
		msg, _ := gotest.FirstFailure(t.Output)
		g.fail(t.Name + " " + string(t.Status) + ":\n" + gotest.Indent(msg, 4))
	case !real:
		g.fail(t.Name + " passed without using the real-Redis helper (no " + redismark.Real + " line): it proves nothing here")
	default:
		g.passed[t.Name] = true
	}
}

// require fails the gate for each named test that did not run and pass.
func (g *integrationGate) require(names string) {
	for _, name := range strings.Split(names, ",") {
		if name = strings.TrimSpace(name); name != "" && !g.passed[name] {
			g.fail(name + " is required but did not run and pass: was it renamed, or did the filter miss it?")
		}
	}
}

func (g *integrationGate) print(w io.Writer) {
	t := table(w)
	fmt.Fprintln(t, "test\tstatus\treal Redis")
	for _, row := range g.rows {
		fmt.Fprintln(t, strings.Join(row, "\t"))
	}
	t.Flush()
	if len(g.problems) > 0 {
		fmt.Fprintln(w, "\nintegration: FAILED")
		for _, p := range g.problems {
			fmt.Fprintln(w, "  "+p)
		}
		fmt.Fprintf(w, "integration: %d passed, %d failed\n", len(g.passed), len(g.problems))
		return
	}
	fmt.Fprintf(w, "\nall %d selected tests reached a real Redis and passed\nintegration: %d passed, 0 failed, 0 skipped\n", g.ran, g.ran)
}

func shortPkg(path string) string {
	for _, dir := range []string{"/internal/", "/solutions/"} {
		if i := strings.Index(path, dir); i >= 0 {
			return path[i+1:]
		}
	}
	return path
}
