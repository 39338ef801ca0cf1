package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit"
)

func cmdList(ctx context.Context, e *env, args []string) error {
	fs := flags(e, "list")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	c, err := labkit.LoadCatalog(e.root)
	if err != nil {
		return err
	}
	var pkgs []string
	for _, l := range c.BuiltLabs() {
		pkgs = append(pkgs, "./"+filepath.ToSlash(l.LabDir()))
	}
	var run *labkit.Run
	if len(pkgs) > 0 {
		fmt.Fprintln(e.stderr, "running the labs' tests…")
		if run, err = labkit.RunTests(ctx, labkit.RunOptions{Dir: e.root, Packages: pkgs, Timeout: 2 * time.Minute}); err != nil {
			return err
		}
	}
	fmt.Fprintf(e.stdout, "%-4s %-46s %-9s %s\n", "lab", "title", "passing", "status")
	next := ""
	for _, l := range c.Labs {
		if !l.Built() {
			fmt.Fprintf(e.stdout, "%-4s %-46s %-9s %s\n", l.Number, l.Title, "-", "not built yet (issue #"+strconv.Itoa(l.Issue)+")")
			continue
		}
		sources, err := labkit.ReadTestSources(filepath.Join(e.root, l.LabDir()))
		if err != nil {
			return err
		}
		tests, err := labkit.TestFuncs(sources)
		if err != nil {
			return err
		}
		p := run.Package(l.LabDir())
		passing := 0
		for _, t := range tests {
			if p.Test(t).Status == labkit.Pass {
				passing++
			}
		}
		status := "in progress"
		switch {
		case p != nil && p.BuildFailed:
			status = "does not compile"
		case passing == len(tests) && len(tests) > 0:
			status = "✓ done"
		case passing == 0:
			status = "not started"
		}
		if d, err := labkit.CompareTests(e.root, l); err == nil && !d.Empty() {
			status += "  (tests edited!)"
		}
		if next == "" && !strings.HasPrefix(status, "✓") {
			next = l.Number
		}
		fmt.Fprintf(e.stdout, "%-4s %-46s %-9s %s\n", l.Number, l.Title, fmt.Sprintf("%d/%d", passing, len(tests)), status)
	}
	if next != "" {
		fmt.Fprintf(e.stdout, "\nnext: make lab-%s\n", next)
	}
	return nil
}

// warnEdited prints a loud banner when a lab's tests differ from the solution's.
func warnEdited(e *env, l labkit.Lab) {
	d, err := labkit.CompareTests(e.root, l)
	if err != nil || d.Empty() {
		return
	}
	bar := strings.Repeat("!", 72)
	fmt.Fprintf(e.stderr, "%s\n!! lab %s: the test files were edited (%s)\n!! Grading restores the original tests; a green run here may not count.\n!! To restore: git checkout -- %s/'*_test.go'\n%s\n",
		bar, l.Number, d, l.LabDir(), bar)
}

func cmdTest(ctx context.Context, e *env, args []string) error {
	fs := flags(e, "test")
	noRace := fs.Bool("no-race", false, "run without the race detector (faster, misses data races)")
	runRe := fs.String("run", "", "only tests matching this regexp")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	_, l, err := catalogLab(e, pos, "test")
	if err != nil {
		return err
	}
	return testLab(ctx, e, l, !*noRace, *runRe)
}

func testLab(ctx context.Context, e *env, l labkit.Lab, race bool, runRe string) error {
	warnEdited(e, l)
	fmt.Fprintf(e.stdout, "lab %s — %s\n", l.Number, l.Title)
	started := time.Now()
	run, err := labkit.RunTests(ctx, labkit.RunOptions{
		Dir: e.root, Packages: []string{"./" + filepath.ToSlash(l.LabDir())},
		Race: race, Count: 1, Run: runRe, Timeout: 2 * time.Minute,
		OnEvent: func(ev labkit.Event) {
			if ev.Test == "" || strings.Contains(ev.Test, "/") {
				return
			}
			switch ev.Action {
			case "pass":
				fmt.Fprintf(e.stdout, "  ✓ %-56s %5.2fs\n", ev.Test, ev.Elapsed)
			case "fail":
				fmt.Fprintf(e.stdout, "  ✗ %-56s %5.2fs\n", ev.Test, ev.Elapsed)
			case "skip":
				fmt.Fprintf(e.stdout, "  - %-56s skipped\n", ev.Test)
			}
		},
	})
	if err != nil {
		return err
	}
	p := run.Package(l.LabDir())
	if p == nil {
		return fmt.Errorf("go test reported nothing for %s:\n%s", l.LabDir(), run.Stderr)
	}
	if p.BuildFailed {
		fmt.Fprintf(e.stdout, "\nlab %s does not compile:\n%s\n", l.Number, strings.TrimSpace(p.Output))
		return errRed
	}
	var failed []string
	passed := 0
	for _, name := range p.Order {
		switch p.Tests[name].Status {
		case labkit.Pass:
			passed++
		case labkit.Fail:
			failed = append(failed, name)
		}
	}
	total := len(p.Order)
	if len(failed) == 0 && p.Status != labkit.Fail {
		fmt.Fprintf(e.stdout, "\nlab %s: all %d tests pass (%.1fs). ", l.Number, total, time.Since(started).Seconds())
		fmt.Fprintf(e.stdout, "Read the mutants in %s/testdata/mutants/ to see the bugs these tests catch.\nnext: make progress\n", l.SolutionDir())
		return nil
	}
	fmt.Fprintf(e.stdout, "\nlab %s: %d/%d passing\n", l.Number, passed, total)
	if len(failed) == 0 {
		fmt.Fprintf(e.stdout, "\nthe package failed outside any test (a leaked goroutine or a panic):\n%s\n", labkit.LastLines(p.Output, 30))
		return errRed
	}
	first := failed[0]
	fmt.Fprintf(e.stdout, "\nfirst failing test: %s\n%s\n", first, indentLines(labkit.FailureMessage(p.Tests[first].Output)))
	if hints, err := labkit.LoadHints(e.root, l); err == nil {
		i := labkit.HintFor(hints, first)
		if i < 0 {
			i = 0
		}
		fmt.Fprintf(e.stdout, "\nhint %d/%d — %s\n%s\n", i+1, len(hints), hints[i].Title, indentLines(hints[i].Body))
	}
	fmt.Fprintf(e.stdout, "\nmore hints: make hint LAB=%s    re-run on save: make watch LAB=%s\n", l.Number, l.Number)
	return errRed
}

func cmdHint(ctx context.Context, e *env, args []string) error {
	fs := flags(e, "hint")
	reset := fs.Bool("reset", false, "forget which hints you have seen")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	_, l, err := catalogLab(e, pos, "hint")
	if err != nil {
		return err
	}
	hints, err := labkit.LoadHints(e.root, l)
	if err != nil {
		return err
	}
	state, err := labkit.LoadHintState(e.root)
	if err != nil {
		return err
	}
	if *reset {
		delete(state.Seen, l.Number)
		fmt.Fprintf(e.stdout, "lab %s: hints reset\n", l.Number)
		return state.Save()
	}
	k := state.Seen[l.Number] + 1
	if len(pos) > 1 {
		if k, err = strconv.Atoi(pos[1]); err != nil || k < 1 || k > len(hints) {
			return fmt.Errorf("%w: lab %s has hints 1 to %d, not %q", errUsage, l.Number, len(hints), pos[1])
		}
	}
	if k > len(hints) {
		fmt.Fprintf(e.stdout, "lab %s: you have seen all %d hints. See one again with: make hint LAB=%s K=1\n", l.Number, len(hints), l.Number)
		return nil
	}
	h := hints[k-1]
	fmt.Fprintf(e.stdout, "lab %s hint %d/%d — %s\n\n%s\n", l.Number, k, len(hints), h.Title, h.Body)
	if k < len(hints) {
		fmt.Fprintf(e.stdout, "\nnext hint: make hint LAB=%s\n", l.Number)
	}
	if k > state.Seen[l.Number] {
		state.Seen[l.Number] = k
		return state.Save()
	}
	return nil
}

func cmdWatch(ctx context.Context, e *env, args []string) error {
	fs := flags(e, "watch")
	interval := fs.Duration("interval", 500*time.Millisecond, "how often to look for saved files")
	noRace := fs.Bool("no-race", false, "run without the race detector")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	_, l, err := catalogLab(e, pos, "watch")
	if err != nil {
		return err
	}
	dir := filepath.Join(e.root, l.LabDir())
	// Polling modification times works on every file system, including the
	// mounted and remote ones where change notifications never arrive; Enter
	// re-runs by hand for anything polling misses.
	lines := make(chan string)
	go readLines(e.stdin, lines) // ends with the process: stdin has no portable cancel
	last := snapshot(dir)
	for {
		if err := testLab(ctx, e, l, !*noRace, ""); err != nil && err != errRed {
			return err
		}
		fmt.Fprintf(e.stdout, "\nwatching %s — save a file to re-run, Enter to re-run now, q to quit\n", l.LabDir())
	wait:
		for {
			select {
			case <-ctx.Done():
				return nil
			case line, ok := <-lines:
				if !ok {
					lines = nil // stdin closed: keep polling
					continue
				}
				if strings.TrimSpace(line) == "q" {
					return nil
				}
				break wait
			case <-time.After(*interval):
				if now := snapshot(dir); now != last {
					last = now
					break wait
				}
			}
		}
		last = snapshot(dir)
	}
}

func readLines(r io.Reader, out chan<- string) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		out <- sc.Text()
	}
	close(out)
}

// snapshot is a cheap fingerprint of the .go files in dir: names, sizes, mtimes.
func snapshot(dir string) string {
	var b strings.Builder
	entries, _ := os.ReadDir(dir)
	for _, en := range entries {
		if !strings.HasSuffix(en.Name(), ".go") && en.Name() != "go.mod" {
			continue
		}
		if fi, err := en.Info(); err == nil {
			fmt.Fprintf(&b, "%s:%d:%d;", en.Name(), fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return b.String()
}

func indentLines(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
