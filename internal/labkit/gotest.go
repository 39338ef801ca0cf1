package labkit

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
	Shuffle  bool
	Overlay  string        // -overlay file
	Timeout  time.Duration // -timeout; 0 = go test's default
	Env      []string      // extra environment, KEY=VALUE
	OnEvent  func(Event)   // called for every event as it arrives
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

// RunTests runs `go test -json` and collects the outcome. A failing test is
// not an error; an error means go test could not be run or said nothing.
func RunTests(ctx context.Context, opts RunOptions) (*Run, error) {
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
	if opts.Shuffle {
		args = append(args, "-shuffle=on")
	}
	if opts.Overlay != "" {
		args = append(args, "-overlay", opts.Overlay)
	}
	if opts.Timeout > 0 {
		args = append(args, "-timeout", opts.Timeout.String())
	}
	args = append(args, opts.Packages...)

	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = opts.Dir
	cmd.Env = append(os.Environ(), opts.Env...)
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

func parseEvents(r io.Reader, onEvent func(Event)) (*Run, error) {
	run := &Run{Packages: map[string]*PackageResult{}}
	pkg := func(path string) *PackageResult {
		p, ok := run.Packages[path]
		if !ok {
			p = &PackageResult{Path: path, Status: NotRun, Tests: map[string]*TestResult{}}
			run.Packages[path] = p
		}
		return p
	}
	buildOut := map[string]*strings.Builder{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1024*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue // go test may print plain lines (e.g. "no test files") on some paths
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return run, fmt.Errorf("bad event %q: %w", line, err)
		}
		if onEvent != nil {
			onEvent(ev)
		}
		switch ev.Action {
		case "build-output":
			b := buildOut[ev.ImportPath]
			if b == nil {
				b = &strings.Builder{}
				buildOut[ev.ImportPath] = b
			}
			b.WriteString(ev.Output)
			continue
		case "build-fail":
			continue
		}
		if ev.Package == "" {
			continue
		}
		p := pkg(ev.Package)
		if ev.Test == "" {
			switch ev.Action {
			case "output":
				p.Output += ev.Output
			case "pass", "fail", "skip":
				p.Status = Status(ev.Action)
				if ev.FailedBuild != "" {
					p.BuildFailed = true
					if b := buildOut[ev.FailedBuild]; b != nil {
						p.Output += b.String()
					}
				}
			}
			continue
		}
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
	return run, sc.Err()
}

// FailureMessage trims a failed test's output to what a person acts on: the
// lines testify and t.Error print, without the RUN/FAIL frame lines.
func FailureMessage(output string) string {
	var keep []string
	for line := range strings.Lines(output) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "goroutine ") && strings.HasSuffix(trimmed, ":") {
			// A panic's goroutine dump: the panic line above says what
			// happened; the stacks are for a debugger, not a learner.
			keep = append(keep, "    (goroutine stacks omitted: run go test -v on the package to see them)")
			break
		}
		if strings.Contains(trimmed, "main bubble goroutine has exited but blocked goroutines remain") {
			keep = append(keep, strings.TrimRight(line, "\n"),
				"    a goroutine started by your code was still running when the test's function returned:",
				"    every goroutine needs an owner that waits for it to finish.")
			continue
		}
		switch {
		case trimmed == "",
			strings.HasPrefix(trimmed, "=== RUN"),
			strings.HasPrefix(trimmed, "=== PAUSE"),
			strings.HasPrefix(trimmed, "=== CONT"),
			strings.HasPrefix(trimmed, "=== NAME"),
			strings.HasPrefix(trimmed, "--- FAIL"),
			strings.HasPrefix(trimmed, "--- PASS"):
			continue
		}
		keep = append(keep, strings.TrimRight(line, "\n"))
	}
	return strings.Join(keep, "\n")
}
