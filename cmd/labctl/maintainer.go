package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit"
)

func cmdVerify(ctx context.Context, e *env, args []string) error {
	fs := flags(e, "verify")
	stubsRef := fs.String("stubs-ref", "", "git `revision` whose labs/ are the pristine stubs (a fork passes upstream's commit)")
	noRace := fs.Bool("no-race", false, "run solutions and mutants without -race")
	fresh := fs.Bool("fresh", false, "ignore the test cache (-count=1)")
	skipMutants := fs.Bool("skip-mutants", false, "skip the kill matrix")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	c, err := labkit.LoadCatalog(e.root)
	if err != nil {
		return err
	}
	labs, err := c.Select(pos)
	if err != nil {
		return err
	}
	started := time.Now()
	reports, err := labkit.Verify(ctx, labkit.VerifyOptions{
		Root: e.root, Labs: labs, StubsRef: *stubsRef, NoRace: *noRace,
		Fresh: *fresh, SkipMutants: *skipMutants, Log: e.stderr,
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "\n%-4s %-16s %5s  %-9s %-9s %-9s %-9s %s\n", "lab", "dir", "tests", "identical", "black-box", "stubs red", "green", "mutants killed")
	bad := 0
	for _, r := range reports {
		mut := fmt.Sprintf("%d/%d", r.Killed(), len(r.Mutants))
		if *skipMutants {
			mut = "skipped"
		}
		fmt.Fprintf(e.stdout, "%-4s %-16s %5d  %-9s %-9s %-9s %-9s %s\n", r.Lab.Number, r.Lab.Dir, len(r.Tests),
			mark(r.Identical), mark(r.APIClean),
			fmt.Sprintf("%d/%d", r.StubsRed, len(r.Tests)), fmt.Sprintf("%d/%d", r.Green, len(r.Tests)), mut)
		if !r.OK() {
			bad++
		}
	}
	for _, r := range reports {
		if len(r.Unchecked) > 0 {
			fmt.Fprintf(e.stdout, "\nlab %s: not checked on the stub (they need a real Redis; install redis-server or set REDIS_URL): %s\n", r.Lab.Number, strings.Join(r.Unchecked, ", "))
		}
		for _, m := range r.Mutants {
			if len(m.Unchecked) > 0 {
				fmt.Fprintf(e.stdout, "\nlab %s: mutant %s must be killed by %s, which skipped here (no real Redis): not checked\n", r.Lab.Number, m.Name, strings.Join(m.Unchecked, ", "))
			}
		}
		if len(r.Skipped) > 0 {
			fmt.Fprintf(e.stdout, "\nlab %s: skipped on the solution (counted green; `labctl integration` runs them for real): %s\n", r.Lab.Number, strings.Join(r.Skipped, ", "))
		}
		if len(r.Mutants) > 0 {
			fmt.Fprintf(e.stdout, "\nlab %s kill matrix:\n", r.Lab.Number)
			for _, m := range r.Mutants {
				by := strings.Join(m.KilledBy, ", ")
				switch {
				case m.Problem != "":
					by = "BROKEN"
				case !m.Killed:
					by = "SURVIVED"
				}
				fmt.Fprintf(e.stdout, "  %-44s %s\n", m.Name, by)
			}
		}
	}
	if bad == 0 {
		fmt.Fprintf(e.stdout, "\nverify: %d labs OK (%.0fs)\n", len(reports), time.Since(started).Seconds())
		return nil
	}
	fmt.Fprintf(e.stdout, "\nverify: %d of %d labs have problems:\n", bad, len(reports))
	for _, r := range reports {
		for _, p := range r.Problems {
			fmt.Fprintf(e.stdout, "  lab %s: %s\n", r.Lab.Number, p)
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
	fs := flags(e, "grade")
	out := fs.String("out", "grade-report", "`dir` for grade.json, junit.xml and grade.md")
	tests := fs.String("tests", "", "`dir` of held-back tests: DIR/NN-topic/*_test.go are added to lab NN")
	ref := fs.String("pristine-ref", "", "git `revision` whose solutions/ tests are the pristine ones (default: this checkout's solutions/)")
	noRace := fs.Bool("no-race", false, "grade without the race detector")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	c, err := labkit.LoadCatalog(e.root)
	if err != nil {
		return err
	}
	labs, err := c.Select(pos)
	if err != nil {
		return err
	}
	if *tests != "" && !isDir(*tests) {
		return fmt.Errorf("%w: --tests %s is not a directory", errUsage, *tests)
	}
	g, err := labkit.RunGrade(ctx, labkit.GradeOptions{Root: e.root, Labs: labs, TestsDir: *tests, PristineRef: *ref, NoRace: *noRace, Log: e.stderr})
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
	fmt.Fprintf(e.stdout, "%-4s %-46s %s\n", "lab", "title", "passed")
	for _, l := range g.Labs {
		note := ""
		if l.Edited {
			note = "  (edited tests restored)"
		}
		fmt.Fprintf(e.stdout, "%-4s %-46s %d/%d%s\n", l.Number, l.Title, l.Passed, l.Total, note)
	}
	fmt.Fprintf(e.stdout, "\ngrade: %d/%d tests (%.0f%%); reports in %s/{grade.json,junit.xml,grade.md}\n", g.Passed, g.Total, 100*g.Score(), *out)
	return nil
}

// IntegrationMarker is what the Redis test helper logs when a test really
// talks to a Redis server; `labctl integration` requires it in every test.
const IntegrationMarker = "redistest: real Redis"

func cmdIntegration(ctx context.Context, e *env, args []string) error {
	fs := flags(e, "integration")
	runRe := fs.String("run", "^TestIntegration", "regexp selecting the real-Redis tests")
	minTests := fs.Int("min", 1, "fail unless at least this many tests ran")
	require := fs.String("require", "", "comma-separated `tests` that must be among those that ran and passed")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	pkgs := pos
	if len(pkgs) == 0 {
		pkgs = []string{"./internal/...", "./solutions/..."}
	}
	fmt.Fprintf(e.stderr, "integration: go test -race -run '%s' %s with REDIS_INTEGRATION_REQUIRED=1…\n", *runRe, strings.Join(pkgs, " "))
	run, err := labkit.RunTests(ctx, labkit.RunOptions{
		Dir: e.root, Packages: pkgs, Race: true, Count: 1, Run: *runRe, Timeout: 5 * time.Minute,
		Env: []string{"REDIS_INTEGRATION_REQUIRED=1"},
	})
	if err != nil {
		return err
	}
	var problems []string
	passedNames := map[string]bool{}
	ran := 0
	paths := make([]string, 0, len(run.Packages))
	for p := range run.Packages {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	fmt.Fprintf(e.stdout, "%-60s %-6s %s\n", "test", "status", "real Redis")
	for _, path := range paths {
		p := run.Packages[path]
		if p.BuildFailed {
			problems = append(problems, path+" does not compile")
		}
		for _, name := range p.Order {
			t := p.Tests[name]
			ran++
			real := strings.Contains(t.Output, IntegrationMarker)
			fmt.Fprintf(e.stdout, "%-60s %-6s %s\n", shortPkg(path)+"."+name, t.Status, mark(real))
			switch {
			case t.Status == labkit.Skip:
				problems = append(problems, name+" skipped: the integration gate counts a skip as a failure")
			case t.Status != labkit.Pass:
				problems = append(problems, name+" "+string(t.Status)+":\n"+indentLines(labkit.FailureMessage(t.Output)))
			case !real:
				problems = append(problems, name+" passed without using the real-Redis helper (no "+IntegrationMarker+" line): it proves nothing here")
			default:
				passedNames[name] = true
			}
		}
		if p.Status == labkit.Fail && len(p.Order) == 0 && !p.BuildFailed {
			problems = append(problems, path+" failed outside any test:\n"+indentLines(labkit.LastLines(p.Output, 15)))
		}
	}
	for _, name := range strings.Split(*require, ",") {
		if name = strings.TrimSpace(name); name != "" && !passedNames[name] {
			problems = append(problems, name+" is required but did not run and pass: was it renamed, or did the filter miss it?")
		}
	}
	if ran < *minTests {
		problems = append(problems, fmt.Sprintf("%d tests matched %q, want at least %d: a filter that matches nothing is a green that proves nothing", ran, *runRe, *minTests))
	}
	if len(problems) > 0 {
		fmt.Fprintln(e.stdout, "\nintegration: FAILED")
		for _, p := range problems {
			fmt.Fprintln(e.stdout, "  "+p)
		}
		fmt.Fprintf(e.stdout, "integration: %d passed, %d failed\n", len(passedNames), len(problems))
		return errRed
	}
	fmt.Fprintf(e.stdout, "\nall %d selected tests reached a real Redis and passed\nintegration: %d passed, 0 failed, 0 skipped\n", ran, ran)
	return nil
}

func shortPkg(path string) string {
	if i := strings.Index(path, "/internal/"); i >= 0 {
		return path[i+1:]
	}
	if i := strings.Index(path, "/solutions/"); i >= 0 {
		return path[i+1:]
	}
	return path
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
