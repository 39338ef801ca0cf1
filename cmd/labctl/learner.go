package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/write"
)

func cmdList(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	c, err := catalog.Load(e.root)
	if err != nil {
		return err
	}
	if !c.Holds(catalog.TrackLabs) && c.Holds(catalog.TrackWrite) {
		return listWrite(e, c)
	}
	run, err := runBuiltLabs(ctx, e, c.BuiltLabs())
	if err != nil {
		return err
	}
	t := table(e.stdout)
	fmt.Fprintln(t, "lab\ttitle\tpassing\tstatus")
	var notes []string
	next := ""
	for _, l := range c.Labs {
		row, err := progressRow(e.root, l, run)
		if err != nil {
			return err
		}
		fmt.Fprintln(t, strings.Join(row.cells, "\t"))
		if row.note != "" {
			notes = append(notes, "lab "+l.Number+": "+row.note)
		}
		if next == "" && l.Built() && !row.done {
			next = l.Number
		}
	}
	t.Flush()
	for _, n := range notes {
		fmt.Fprintln(e.stdout, n)
	}
	if next != "" {
		fmt.Fprintf(e.stdout, "\nnext: make lab-%s\n", next)
	}
	return nil
}

// runBuiltLabs runs every built lab's tests once, with -race like `make
// lab-NN` so both share one build cache.
func runBuiltLabs(ctx context.Context, e *env, labs []catalog.Lab) (*gotest.Run, error) {
	if len(labs) == 0 {
		return &gotest.Run{}, nil
	}
	var pkgs []string
	for _, l := range labs {
		pkgs = append(pkgs, "./"+filepath.ToSlash(l.LabDir()))
	}
	fmt.Fprintln(e.stderr, "running the labs' tests (the first run compiles them, ~1–2 min)…")
	return gotest.RunTests(ctx, gotest.RunOptions{Dir: e.root, Packages: pkgs, Race: true, Timeout: 2 * time.Minute})
}

// progress is one lab's row of the progress table, and a line under it.
type progress struct {
	cells []string
	note  string // e.g. which real-Redis test skipped and why
	done  bool
}

func progressRow(root string, l catalog.Lab, run *gotest.Run) (progress, error) {
	if !l.Built() {
		return progress{cells: []string{l.Number, l.Title, "-", "not built yet (issue #" + strconv.Itoa(l.Issue) + ")"}}, nil
	}
	tests, err := gotest.LabTests(root, l)
	if err != nil {
		return progress{}, err
	}
	o := gotest.ReadOutcome(run.Package(l.LabDir()), tests)
	status := "in progress"
	switch {
	case o.BuildFailed:
		status = "does not compile"
	case o.Done():
		status = "✓ done"
	case len(o.Passed) == 0:
		status = "not started"
	}
	if len(o.NeedRedis) > 0 {
		status += fmt.Sprintf(", %d skipped (no Redis)", len(o.NeedRedis))
	}
	if d, err := catalog.CompareTests(root, l); err == nil && !d.Empty() {
		status += "  (tests edited!)"
	}
	passing := fmt.Sprintf("%d/%d", len(o.Passed), len(o.Tests))
	return progress{cells: []string{l.Number, l.Title, passing, status}, note: o.RedisNote(), done: o.Done()}, nil
}

// warnEdited prints a loud banner when a lab's tests differ from the solution's.
func warnEdited(e *env, l catalog.Lab) {
	d, err := catalog.CompareTests(e.root, l)
	if err != nil || d.Empty() {
		return
	}
	bar := strings.Repeat("!", 72)
	fmt.Fprintf(e.stderr, "%s\n!! lab %s: the test files were edited (%s)\n!! Grading restores the original tests; a green run here may not count.\n!! To restore: git checkout -- %s/'*_test.go'\n%s\n",
		bar, l.Number, d, l.LabDir(), bar)
}

func cmdTest(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	noRace := fs.Bool("no-race", false, "run without the race detector (faster, misses data races)")
	runRe := fs.String("run", "", "only tests matching this regexp")
	l, _, err := labCommand(e, fs, "test", args)
	if err != nil {
		return err
	}
	return testLab(ctx, e, l, !*noRace, *runRe)
}

// testLab runs one lab and reports it: one line per test, then the first
// failure with its hint, or what is left to do.
func testLab(ctx context.Context, e *env, l catalog.Lab, race bool, runRe string) error {
	warnEdited(e, l)
	fmt.Fprintf(e.stdout, "lab %s — %s\n", l.Number, l.Title)
	started := time.Now()
	p, err := runLab(ctx, e, l, race, runRe)
	if err != nil {
		return err
	}
	tests, err := gotest.LabTests(e.root, l)
	if err != nil {
		return err
	}
	if runRe != "" {
		tests = slices.DeleteFunc(tests, func(t string) bool { return p.Test(t).Status == gotest.NotRun })
	}
	o := gotest.ReadOutcome(p, tests)
	switch {
	case o.BuildFailed:
		fmt.Fprintf(e.stdout, "\nlab %s does not compile:\n%s\n", l.Number, strings.TrimSpace(p.Output))
		return errRed
	case len(o.Failed) > 0:
		reportRed(e, l, p, o)
		return errRed
	case len(o.NotRun) > 0 || o.PackageFailed:
		fmt.Fprintf(e.stdout, "\nlab %s: %d/%d passing\n\nthe package failed outside any test (a leaked goroutine or a panic):\n%s\n",
			l.Number, len(o.Passed), len(o.Tests), gotest.LastLines(p.Output, 30))
		return errRed
	}
	reportGreen(e, l, o, time.Since(started))
	return nil
}

// compileNotice is how long runLab waits for a first test line before it
// says it is compiling: a cold build takes minutes and must not look hung.
var compileNotice = 3 * time.Second

// runLab runs one lab's tests, streaming a line per test as it finishes.
func runLab(ctx context.Context, e *env, l catalog.Lab, race bool, runRe string) (*gotest.PackageResult, error) {
	lines := &testLines{w: e.stdout}
	notice := time.AfterFunc(compileNotice, func() {
		lines.once(fmt.Sprintf("  compiling lab %s… (the very first run also downloads and builds the dependencies: a minute or two)", l.Number))
	})
	defer notice.Stop()
	run, err := gotest.RunTests(ctx, gotest.RunOptions{
		Dir: e.root, Packages: []string{"./" + filepath.ToSlash(l.LabDir())},
		Race: race, Count: 1, Run: runRe, Timeout: 2 * time.Minute,
		OnEvent: func(ev gotest.Event) {
			if ev.Action == "run" || ev.Action == "start" {
				notice.Stop()
			}
			lines.event(ev)
		},
	})
	lines.flush()
	if err != nil {
		return nil, err
	}
	p := run.Package(l.LabDir())
	if p == nil {
		return nil, fmt.Errorf("go test reported nothing for %s:\n%s", l.LabDir(), run.Stderr)
	}
	return p, nil
}

// testLines prints one line per finished top-level test. The real-Redis
// tests' lines wait until the end, so they come last, as in the report.
type testLines struct {
	mu    sync.Mutex
	w     io.Writer
	held  []string
	noted bool
}

func (t *testLines) event(ev gotest.Event) {
	if ev.Test == "" || strings.Contains(ev.Test, "/") {
		return
	}
	var line string
	switch ev.Action {
	case "pass":
		line = fmt.Sprintf("  ✓ %-56s %5.2fs", ev.Test, ev.Elapsed)
	case "fail":
		line = fmt.Sprintf("  ✗ %-56s %5.2fs", ev.Test, ev.Elapsed)
	case "skip":
		line = fmt.Sprintf("  - %-56s skipped", ev.Test)
	default:
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if strings.HasPrefix(ev.Test, gotest.IntegrationPrefix) {
		t.held = append(t.held, line)
		return
	}
	fmt.Fprintln(t.w, line)
}

// once prints a line at most once (the compiling notice).
func (t *testLines) once(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.noted {
		t.noted = true
		fmt.Fprintln(t.w, line)
	}
}

func (t *testLines) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, line := range t.held {
		fmt.Fprintln(t.w, line)
	}
	t.held = nil
}

func reportGreen(e *env, l catalog.Lab, o gotest.Outcome, took time.Duration) {
	if !o.Done() {
		fmt.Fprintf(e.stdout, "\nlab %s: %d/%d pass; the rest need a real Redis:\n  %s\n", l.Number, len(o.Passed), len(o.Tests), o.RedisNote())
		fmt.Fprintf(e.stdout, "next: make lab-%s again with Redis, or make progress\n", l.Number)
		return
	}
	fmt.Fprintf(e.stdout, "\nlab %s: all %d tests pass (%.1fs). ", l.Number, len(o.Tests), took.Seconds())
	fmt.Fprintf(e.stdout, "Read the mutants in %s/testdata/mutants/ to see the bugs these tests catch.\nnext: make progress\n", l.SolutionDir())
}

func reportRed(e *env, l catalog.Lab, p *gotest.PackageResult, o gotest.Outcome) {
	fmt.Fprintf(e.stdout, "\nlab %s: %d/%d passing", l.Number, len(o.Passed), len(o.Tests))
	if files, err := catalog.FilesToEdit(e.root, l); err == nil && len(files) > 0 {
		fmt.Fprintf(e.stdout, " — edit %s in %s/", strings.Join(files, ", "), filepath.ToSlash(l.LabDir()))
	}
	fmt.Fprintln(e.stdout)
	if note := o.RedisNote(); note != "" {
		fmt.Fprintf(e.stdout, "  %s\n", note)
	}
	first := o.Failed[0]
	msg, more := gotest.FirstFailure(p.Test(first).Output)
	fmt.Fprintf(e.stdout, "\nfirst failing test: %s\n%s\n", first, gotest.Indent(msg, 4))
	if more > 0 {
		fmt.Fprintf(e.stdout, "    (%d more in this test: go test -run '^%s$' ./%s)\n", more, first, filepath.ToSlash(l.LabDir()))
	}
	showHint(e, l, first)
	fmt.Fprintf(e.stdout, "\nmore hints: make hint LAB=%s    re-run on save: make watch LAB=%s\n", l.Number, l.Number)
}

// showHint prints the nudge of the hint for a failing test (the first
// one with levels left when no hint names it) — its title and first
// sentence, not the answer — and remembers it as the current step, so that
// `make hint` reveals that hint's approach next, then its near-solution.
func showHint(e *env, l catalog.Lab, test string) {
	hints, err := catalog.LoadHints(e.root, l)
	if err != nil {
		return
	}
	state, err := catalog.LoadHintState(e.root)
	if err != nil {
		fmt.Fprintln(e.stderr, "labctl:", err)
		return
	}
	k := catalog.HintFor(hints, test) + 1
	if k == 0 {
		if k, _ = state.Next(l.Number, hints); k == 0 {
			k = 1
		}
	}
	h := hints[k-1]
	nudge := h.Levels()[0]
	fmt.Fprintf(e.stdout, "\nhint %d/%d — %s\n%s\n", k, len(hints), h.Title, gotest.Indent(nudge.Text, 4))
	state.Reveal(l.Number, k, nudge.N)
	state.Current[l.Number] = k
	if err := state.Save(); err != nil {
		fmt.Fprintln(e.stderr, "labctl: remember hint:", err)
	}
}

func cmdHint(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	reset := fs.Bool("reset", false, "forget which hints you have seen")
	l, rest, err := labCommand(e, fs, "hint", args)
	if err != nil {
		return err
	}
	hints, err := catalog.LoadHints(e.root, l)
	if err != nil {
		return err
	}
	state, err := catalog.LoadHintState(e.root)
	if err != nil {
		return err
	}
	if *reset {
		state.Reset(l.Number)
		fmt.Fprintf(e.stdout, "lab %s: hints reset\n", l.Number)
		return state.Save()
	}
	k, more := state.Next(l.Number, hints)
	if len(rest) > 0 {
		if k, err = strconv.Atoi(rest[0]); err != nil || k < 1 || k > len(hints) {
			return fmt.Errorf("%w: lab %s has hints 1 to %d, not %q", errUsage, l.Number, len(hints), rest[0])
		}
		// Again, as far as it was revealed (its nudge, if not at all).
		h := hints[k-1]
		level := h.Levels()[0]
		for _, lv := range h.Levels() {
			if lv.N <= state.Level(l.Number, k) {
				level = lv
			}
		}
		printHint(e, l, k, len(hints), h, level)
		state.Reveal(l.Number, k, level.N)
		return state.Save()
	}
	if !more {
		fmt.Fprintf(e.stdout, "lab %s: you have seen all %d hints in full. See one again with: make hint LAB=%s K=1\n", l.Number, len(hints), l.Number)
		return nil
	}
	h := hints[k-1]
	level := state.NextLevel(l.Number, k, h)
	printHint(e, l, k, len(hints), h, level)
	state.Reveal(l.Number, k, level.N)
	state.Current[l.Number] = k
	if next, ok := state.Next(l.Number, hints); ok {
		if next == k {
			fmt.Fprintf(e.stdout, "\nmore of this hint (%s): make hint LAB=%s\n", state.NextLevel(l.Number, k, h).Name(), l.Number)
		} else {
			fmt.Fprintf(e.stdout, "\nnext hint: make hint LAB=%s\n", l.Number)
		}
	}
	return state.Save()
}

// printHint shows one level of a hint, saying which.
func printHint(e *env, l catalog.Lab, k, n int, h catalog.Hint, level catalog.Level) {
	levels := h.Levels()
	at := 1
	for i, lv := range levels {
		if lv.N == level.N {
			at = i + 1
		}
	}
	fmt.Fprintf(e.stdout, "lab %s hint %d/%d — %s (%s, %d of %d)\n\n%s\n", l.Number, k, n, h.Title, level.Name(), at, len(levels), level.Text)
}

// listWrite is the progress table of the test-writing template: how many
// tests each lab's file holds so far. Scores come from make write-NN,
// which runs them.
func listWrite(e *env, c *catalog.Catalog) error {
	t := table(e.stdout)
	fmt.Fprintln(t, "lab\ttitle\ttests written\tfile")
	next := ""
	for _, l := range c.WriteLabs() {
		file := filepath.Join(write.DirOf(l), write.File)
		n := 0
		if src, err := os.ReadFile(filepath.Join(e.root, file)); err == nil {
			tests, err := catalog.TestFuncs(map[string][]byte{write.File: src})
			if err != nil {
				fmt.Fprintf(t, "%s\t%s\t%s\t%s\n", l.Number, l.Title, "does not parse", file)
				continue
			}
			n = len(tests)
		}
		if n == 0 && next == "" {
			next = l.Number
		}
		fmt.Fprintf(t, "%s\t%s\t%d\t%s\n", l.Number, l.Title, n, filepath.ToSlash(file))
	}
	t.Flush()
	fmt.Fprintln(e.stdout, "\nmake write-NN scores a lab's tests by the mutants they kill.")
	if next != "" {
		fmt.Fprintf(e.stdout, "next: make write-%s\n", next)
	}
	return nil
}
