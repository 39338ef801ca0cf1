// Package gotest runs `go test -json` — or a test binary go test -c built,
// through test2json (RunBinary) — and reads what it reports: each test's
// outcome, a lab's tests in the order labctl reports them (Outcome), and a
// failure in a few lines a person acts on (FirstFailure, Headline). Overlay
// lays patched or restored files over a package for one run without
// touching the working tree.
package gotest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Status is the outcome of one test or package.
type Status string

// The outcomes `go test -json` reports, plus NotRun for a test that produced
// no outcome at all (its package failed to build, or a panic ended the run).
const (
	Pass   Status = "pass"
	Fail   Status = "fail"
	Skip   Status = "skip"
	NotRun Status = "not run"
)

// Event is one line of `go test -json` (cmd/test2json) output.
type Event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	ImportPath  string // build events
	FailedBuild string
}

// TestResult is one test's outcome; Output holds every line it printed,
// including its subtests'.
type TestResult struct {
	Name    string
	Status  Status
	Elapsed time.Duration
	Output  string
}

// PackageResult is one package's outcome.
type PackageResult struct {
	Path        string
	Status      Status
	BuildFailed bool
	Output      string // package-level output: build errors, panics, TestMain failures
	Tests       map[string]*TestResult
	Order       []string // top-level tests in the order they finished
}

// Test returns the named top-level test's result, NotRun if it produced none.
func (p *PackageResult) Test(name string) TestResult {
	if p != nil {
		if r, ok := p.Tests[name]; ok {
			return *r
		}
	}
	return TestResult{Name: name, Status: NotRun}
}

// RunOptions configures one `go test -json` run.
type RunOptions struct {
	Dir      string   // working directory (the repository root)
	Packages []string // package patterns, e.g. ./labs/01-concurrency
	Race     bool
	Count    int    // -count; 0 leaves the test cache on
	Run      string // -run
	Tags     string // -tags
	Shuffle  bool
	Overlay  string        // -overlay file
	Timeout  time.Duration // -timeout; 0 = go test's default
	Env      []string      // extra environment, KEY=VALUE
	OnEvent  func(Event)   // called for every event as it arrives
	Args     []string      // more go test flags, before the packages
}

// args is the go test command line the options ask for.
func (opts RunOptions) args() []string {
	args := []string{"test", "-json"}
	if opts.Race {
		args = append(args, "-race")
	}
	if opts.Count > 0 {
		args = append(args, fmt.Sprintf("-count=%d", opts.Count))
	}
	if opts.Run != "" {
		args = append(args, "-run", opts.Run)
	}
	if opts.Tags != "" {
		args = append(args, "-tags", opts.Tags)
	}
	if opts.Shuffle {
		args = append(args, "-shuffle=on")
	}
	if opts.Overlay != "" {
		args = append(args, "-overlay", opts.Overlay)
	}
	if opts.Timeout > 0 {
		args = append(args, "-timeout", opts.Timeout.String())
	}
	args = append(args, opts.Args...)
	return append(args, opts.Packages...)
}

// Run is what a `go test -json` run produced.
type Run struct {
	Packages map[string]*PackageResult
	Stderr   string
}

// Package returns the result for an import path ending in suffix (a lab's dir).
func (r *Run) Package(suffix string) *PackageResult {
	for path, p := range r.Packages {
		if path == suffix || strings.HasSuffix(path, "/"+suffix) {
			return p
		}
	}
	return nil
}

// RunPackage runs `go test -json` on one package, opts.Packages[0], and
// returns its result; a run that said nothing of it is an error.
func RunPackage(ctx context.Context, opts RunOptions) (*PackageResult, error) {
	run, err := RunTests(ctx, opts)
	if err != nil {
		return nil, err
	}
	pkg := opts.Packages[0]
	p := run.Package(strings.TrimPrefix(pkg, "./"))
	if p == nil {
		return nil, fmt.Errorf("go test reported nothing for %s:\n%s", pkg, strings.TrimSpace(run.Stderr))
	}
	return p, nil
}

// RunTests runs `go test -json` and collects the outcome. A failing test is
// not an error; an error means go test could not be run or said nothing.
func RunTests(ctx context.Context, opts RunOptions) (*Run, error) {
	args := opts.args()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = opts.Dir
	cmd.Env = append(os.Environ(), opts.Env...)
	if opts.Race {
		cmd.Env = append(cmd.Env, "GORACE="+noExitSleep(os.Getenv("GORACE")))
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start go test: %w", err)
	}
	run, parseErr := parseEvents(stdout, opts.OnEvent)
	waitErr := cmd.Wait()
	run.Stderr = stderr.String()
	if parseErr != nil {
		return run, fmt.Errorf("read go test output: %w", parseErr)
	}
	if ctx.Err() != nil {
		return run, fmt.Errorf("go test %s: %w", strings.Join(opts.Packages, " "), ctx.Err())
	}
	if len(run.Packages) == 0 && waitErr != nil {
		return run, fmt.Errorf("go test %s: %w\n%s", strings.Join(opts.Packages, " "), waitErr, strings.TrimSpace(run.Stderr))
	}
	// Build failures print to stderr as well; attach them to the packages
	// that failed to build so reports can show the compiler's words.
	for _, p := range run.Packages {
		if p.BuildFailed && p.Output == "" {
			p.Output = run.Stderr
		}
	}
	return run, nil
}

// collector builds a Run from `go test -json` events, one event at a time.
type collector struct {
	run      *Run
	buildOut map[string]*strings.Builder // import path → compiler output
}

// noExitSleep adds atexit_sleep_ms=0 to a GORACE value that does not set
// it. The race detector otherwise sleeps a second before every -race test
// binary exits, to catch races in goroutines still running; every package
// here ends with goleak.VerifyTestMain, so none are, and the second is
// pure wait (most of a lab's run time).
func noExitSleep(gorace string) string {
	if strings.Contains(gorace, "atexit_sleep_ms") {
		return gorace
	}
	return strings.TrimSpace(gorace + " atexit_sleep_ms=0")
}

func parseEvents(r io.Reader, onEvent func(Event)) (*Run, error) {
	c := &collector{run: &Run{Packages: map[string]*PackageResult{}}, buildOut: map[string]*strings.Builder{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // go test may print plain lines (e.g. "no test files") on some paths
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return c.run, fmt.Errorf("bad event %q: %w", line, err)
		}
		if onEvent != nil {
			onEvent(ev)
		}
		c.add(ev)
	}
	c.settleHeld()
	return c.run, sc.Err()
}

// settleHeld gives a test the outcome its own "--- PASS/FAIL/SKIP" line
// reported when the event for it never came: test2json holds a test's
// result back until the next test starts, and a binary stopped in that
// test (a timeout, a crash, labctl's hang watch) ends before it does.
func (c *collector) settleHeld() {
	for _, p := range c.run.Packages {
		for name, t := range p.Tests {
			if t.Status != NotRun {
				continue
			}
			for line := range strings.Lines(t.Output) {
				for _, st := range []Status{Pass, Fail, Skip} {
					rest, ok := strings.CutPrefix(line, "--- "+strings.ToUpper(string(st))+": "+name+" (")
					if !ok {
						continue
					}
					t.Status = st
					if secs, _, ok := strings.Cut(rest, "s)"); ok {
						if d, err := time.ParseDuration(secs + "s"); err == nil {
							t.Elapsed = d
						}
					}
					p.Order = append(p.Order, name)
				}
			}
		}
	}
}

func (c *collector) add(ev Event) {
	switch {
	case ev.Action == "build-output":
		c.buildOutput(ev)
	case ev.Action == "build-fail", ev.Package == "":
	case ev.Test == "":
		c.packageEvent(ev)
	default:
		c.testEvent(ev)
	}
}

func (c *collector) pkg(path string) *PackageResult {
	p, ok := c.run.Packages[path]
	if !ok {
		p = &PackageResult{Path: path, Status: NotRun, Tests: map[string]*TestResult{}}
		c.run.Packages[path] = p
	}
	return p
}

func (c *collector) buildOutput(ev Event) {
	b := c.buildOut[ev.ImportPath]
	if b == nil {
		b = &strings.Builder{}
		c.buildOut[ev.ImportPath] = b
	}
	b.WriteString(ev.Output)
}

// packageEvent records output and the outcome of a package as a whole; a
// package that failed to build gets the compiler's words as its output.
func (c *collector) packageEvent(ev Event) {
	p := c.pkg(ev.Package)
	switch ev.Action {
	case "output":
		p.Output += ev.Output
	case "pass", "fail", "skip":
		p.Status = Status(ev.Action)
		if ev.FailedBuild != "" {
			p.BuildFailed = true
			if b := c.buildOut[ev.FailedBuild]; b != nil {
				p.Output += b.String()
			}
		}
	}
}

// testEvent records a test's output and outcome; a subtest's output belongs
// to its top-level test, and only the top-level outcome counts.
func (c *collector) testEvent(ev Event) {
	p := c.pkg(ev.Package)
	top, _, _ := strings.Cut(ev.Test, "/")
	t, ok := p.Tests[top]
	if !ok {
		t = &TestResult{Name: top, Status: NotRun}
		p.Tests[top] = t
	}
	switch ev.Action {
	case "output":
		t.Output += ev.Output
	case "pass", "fail", "skip":
		if ev.Test == top {
			t.Status = Status(ev.Action)
			t.Elapsed = time.Duration(ev.Elapsed * float64(time.Second))
			p.Order = append(p.Order, top)
		}
	}
}
