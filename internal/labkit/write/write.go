// Package write is the test-writing track (labctl write): for each lab the
// learner gets the correct reference implementation and writes the tests;
// the score is how many of the lab's mutants those tests kill, a kill
// counting only as a failed assertion inside TestLimit. Kit is what the
// track of one lab is made of, from solutions/ or a template's kit archive.
package write

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
	"github.com/production-go/gateway-lab/internal/labkit/mutation"
	"golang.org/x/sync/errgroup"
)

// TestLimit is the most one test may take, in real time, and still
// count: on the reference (a slower test is left out: timing belongs in
// testing/synctest's fake clock) and when it fails on a mutant (a kill that
// took longer is the bug hanging, not a test catching it).
const TestLimit = 5 * time.Second

// writeCacheDir keeps the track's verdicts, relative to the root.
const writeCacheDir = ".labctl/write-cache"

// writeSchema changes whenever the way a verdict is reached changes.
const writeSchema = "write-verdict-v11"

// Options configures Run.
type Options struct {
	Root string
	Lab  catalog.Lab
	// SelfCheck runs the reference's own tests instead of the learner's:
	// they must kill every shipped mutant.
	SelfCheck bool
	// MutantsDir is an instructor's held-back bank: MutantsDir/NN-topic/*.patch.
	MutantsDir string
	Parallel   int  // mutant runs at once; 0 = one per CPU
	Fresh      bool // ignore remembered verdicts
	// OneByOne builds each mutant on its own instead of folding them into
	// one test binary (the mutant schema); the verdicts are the same.
	OneByOne bool
	Log      io.Writer
	// TestsFile, when set, is scored instead of the tests in write/NN-topic:
	// an instructor scoring a submission, or the course's own example suites.
	TestsFile string
	// TestLimit, when set, replaces the package's TestLimit (tests of
	// labctl itself).
	TestLimit time.Duration
	// KitRef, when set, is a git revision whose kit archive holds the
	// reference and the shipped mutants, instead of this checkout's.
	KitRef string
}

func (o Options) limit() time.Duration {
	if o.TestLimit > 0 {
		return o.TestLimit
	}
	return TestLimit
}

// Report is a run of the test-writing track for one lab.
type Report struct {
	Number string `json:"lab"`
	Dir    string `json:"dir"`
	Title  string `json:"title"`
	// Files are the learner's test files, relative to the root.
	Files []string `json:"files"`
	Tests []Test   `json:"tests"`
	// BuildError is the compiler's words when the tests do not build.
	BuildError string `json:"build_error,omitempty"`
	// Problem is a reason nothing counts: the tests leave goroutines
	// behind on the correct code, say.
	Problem string         `json:"problem,omitempty"`
	Mutants []MutantResult `json:"mutants"`
	Killed  int            `json:"killed"`
	Total   int            `json:"total"`
	// The held-back bank's part of Killed and Total.
	HeldBackKilled int `json:"held_back_killed"`
	HeldBackTotal  int `json:"held_back_total"`
}

// Shipped returns the killed and total counts of the shipped mutants.
func (r *Report) Shipped() (killed, total int) {
	return r.Killed - r.HeldBackKilled, r.Total - r.HeldBackTotal
}

// Line is the report's last line, which scripts read.
func (r *Report) Line() string {
	return fmt.Sprintf("write %s: killed %d/%d mutants", r.Number, r.Killed, r.Total)
}

// Test is one of the learner's tests on the correct code.
type Test struct {
	Name    string  `json:"name"`
	Counts  bool    `json:"counts"`
	Why     string  `json:"why,omitempty"` // why it does not count
	Seconds float64 `json:"seconds"`
	Message string  `json:"message,omitempty"`
}

// MutantResult is one mutant's fate under the learner's tests.
type MutantResult struct {
	Name     string   `json:"name"`
	HeldBack bool     `json:"held_back,omitempty"`
	Killed   bool     `json:"killed"`
	KilledBy []string `json:"killed_by,omitempty"`
	// Discounted are failures that did not count: "TestX panicked".
	Discounted []string `json:"discounted,omitempty"`
	// Why it survived, when it did: no test reached the code it changes,
	// or the tests ran it and asserted nothing it breaks.
	Survived string `json:"survived,omitempty"`
	Nudge    string `json:"nudge,omitempty"`
	Problem  string `json:"problem,omitempty"` // the patch does not apply or compile
	Cached   bool   `json:"-"`
}

// writeRun is one lab's track being scored.
type writeRun struct {
	opts    Options
	kit     *Kit
	learner map[string][]byte // the tests being scored: file name → content
	cacheID string            // the inputs every verdict shares
	// mutantTimeout bounds one mutant's run: 30 s more than three times
	// what the counting tests took on the reference.
	mutantTimeout time.Duration

	raceOnce sync.Once // the race pass's null run
	racePass []string
	raceErr  error

	schema *mutation.SchemaBuild // the mutants built as one; nil: each on its own

	logMu sync.Mutex // one log line at a time
}

// Run scores a learner's tests (or, with SelfCheck, the reference's
// own) by the mutants they kill. A weak suite is not an error; an error
// means the run itself could not be made.
func Run(ctx context.Context, opts Options) (*Report, error) {
	c, err := catalog.Load(opts.Root)
	if err != nil {
		return nil, err
	}
	var kit *Kit
	if opts.KitRef != "" {
		kit, err = LoadKitAt(ctx, opts.Root, opts.KitRef, c, opts.Lab)
	} else {
		kit, err = LoadKit(opts.Root, c, opts.Lab)
	}
	if err != nil {
		return nil, err
	}
	held, err := HeldBackMutants(opts.MutantsDir, opts.Lab)
	if err != nil {
		return nil, err
	}
	kit.Mutants = append(kit.Mutants, held...)
	w := &writeRun{opts: opts, kit: kit}
	rep := &Report{Number: opts.Lab.Number, Dir: opts.Lab.Dir, Title: opts.Lab.Title, Total: len(kit.Mutants)}
	if w.learner, rep.Files, err = w.tests(); err != nil {
		return nil, err
	}
	for _, m := range kit.Mutants {
		if m.HeldBack {
			rep.HeldBackTotal++
		}
	}
	if w.cacheID, err = w.cacheBase(ctx); err != nil {
		w.logf("write: no verdict cache this run: %v", err)
	}
	base, err := w.reference(ctx)
	if err != nil {
		return nil, err
	}
	rep.Tests, rep.BuildError, rep.Problem = base.Tests, base.BuildError, base.Problem
	counting := countingTests(base.Tests)
	w.mutantTimeout = opts.timeoutFor(base.Tests)
	if err := w.runMutants(ctx, rep, base, counting); err != nil {
		return nil, err
	}
	for _, m := range rep.Mutants {
		if m.Killed {
			rep.Killed++
			if m.HeldBack {
				rep.HeldBackKilled++
			}
		}
	}
	return rep, nil
}

// runMutants gives every mutant its verdict in rep.Mutants: those
// remembered or not reached at once, the rest by running them, as one
// build where they fold into a schema.
func (w *writeRun) runMutants(ctx context.Context, rep *Report, base *baseRun, counting []string) error {
	mutants := w.kit.Mutants
	rep.Mutants = make([]MutantResult, len(mutants))
	jobs := make([]writeJob, len(mutants))
	var pending []Mutant
	for i, m := range mutants {
		jobs[i] = w.settle(m, base, counting)
		if !jobs[i].settled {
			pending = append(pending, m)
		}
	}
	w.startSchema(ctx, pending)
	defer w.schema.Close()
	limit := w.parallel()
	var g errgroup.Group
	g.SetLimit(limit)
	var done atomic.Int32
	report := len(counting) > 0 && rep.BuildError == "" && rep.Problem == ""
	if report {
		w.logf("write %s: %d tests count; %d mutants to try (%d at a time)…", w.kit.Lab.Number, len(counting), len(mutants), limit)
	}
	// The slowest last time first: a mutant that holds a test to its
	// time limit then overlaps the rest instead of ending the run alone.
	took := w.timings()
	var mu sync.Mutex
	order := make([]int, len(mutants))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(took[mutants[b].Name], took[mutants[a].Name]) })
	for _, i := range order {
		g.Go(func() error {
			started := time.Now()
			res := w.mutant(ctx, jobs[i], counting)
			rep.Mutants[i] = res
			if !jobs[i].settled {
				mu.Lock()
				took[res.Name] = time.Since(started).Seconds()
				mu.Unlock()
			}
			if report {
				w.logf("write %s: [%d/%d] %s: %s", w.kit.Lab.Number, done.Add(1), len(mutants), res.Name, writeVerdict(res, time.Since(started)))
			}
			return nil
		})
	}
	_ = g.Wait() // each mutant records its own problem
	w.putTimings(took)
	return ctx.Err()
}

// parallel is how many mutants run at once.
func (w *writeRun) parallel() int {
	switch {
	case w.opts.Parallel > 0:
		return w.opts.Parallel
	case w.schema != nil:
		// Built once, the mutants only run: twice the CPUs and one, as
		// a test waiting on a real-time timeout or a loopback socket
		// leaves its CPU to another.
		return 2*runtime.NumCPU() + 1
	default:
		// One more than the CPUs: a go test spends part of its run loading
		// packages and waiting on the linker, which another can overlap.
		return runtime.NumCPU() + 1
	}
}

// logf writes one line to the log. The mutants run in parallel and each
// says its verdict; a Log need not be safe for concurrent writes (a
// bytes.Buffer is not), so the lines are written one at a time.
func (w *writeRun) logf(format string, args ...any) {
	if w.opts.Log != nil {
		w.logMu.Lock()
		defer w.logMu.Unlock()
		fmt.Fprintf(w.opts.Log, format+"\n", args...)
	}
}

func writeVerdict(m MutantResult, took time.Duration) string {
	var s string
	switch {
	case m.Problem != "":
		s = "BROKEN: " + gotest.FirstLine(m.Problem)
	case m.Killed:
		s = "killed by " + strings.Join(m.KilledBy, ", ")
	default:
		s = "survived"
	}
	if m.Cached {
		return s + " (remembered)"
	}
	return fmt.Sprintf("%s (%.1fs)", s, took.Seconds())
}

// tests returns the test files being scored: the reference's own in a
// self-check, else every *_test.go in write/NN-topic that is not a helper.
func (w *writeRun) tests() (map[string][]byte, []string, error) {
	if w.opts.SelfCheck {
		if len(w.kit.RefTests) == 0 {
			return nil, nil, fmt.Errorf("%w: --self-check runs the reference's tests, which only the course repository has (solutions/%s)", catalog.ErrBadOption, w.kit.Lab.Dir)
		}
		var names []string
		for _, n := range slices.Sorted(maps.Keys(w.kit.RefTests)) {
			names = append(names, filepath.ToSlash(filepath.Join(w.kit.Lab.SolutionDir(), n)))
		}
		return w.kit.RefTests, names, nil
	}
	if w.opts.TestsFile != "" {
		data, err := os.ReadFile(w.opts.TestsFile)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: --tests: %v", catalog.ErrBadOption, err)
		}
		return map[string][]byte{"given_write_test.go": data}, []string{w.opts.TestsFile}, nil
	}
	dir := filepath.Join(w.opts.Root, DirOf(w.kit.Lab))
	names, err := catalog.TestFiles(dir)
	if err != nil {
		return nil, nil, err
	}
	files := map[string][]byte{}
	var rels []string
	for _, n := range names {
		if _, helper := w.kit.Helpers[n]; helper {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			return nil, nil, err
		}
		files[n] = data
		rels = append(rels, filepath.ToSlash(filepath.Join(DirOf(w.kit.Lab), n)))
	}
	return files, rels, nil
}

// overlay lays the track over write/: the reference (patched, when patch
// is a mutant's) and its dependencies' references with their imports
// pointed at write/, the helpers, the tests being scored; any other Go file
// found there is hidden, so nothing on disk but the learner's tests counts.
func (w *writeRun) overlay(patched map[string][]byte) (*gotest.Overlay, error) {
	ov, err := gotest.NewOverlay()
	if err != nil {
		return nil, err
	}
	lay := func(dir string, files map[string][]byte, keepTests bool) error {
		abs := filepath.Join(w.opts.Root, Dir, dir)
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return err
		}
		onDisk, _ := filepath.Glob(filepath.Join(abs, "*.go"))
		for _, p := range onDisk {
			name := filepath.Base(p)
			if _, ok := files[name]; ok {
				continue
			}
			if strings.HasSuffix(name, "_test.go") && keepTests {
				continue
			}
			ov.Delete(p)
		}
		for name, data := range files {
			if err := ov.Set(filepath.Join(abs, name), data); err != nil {
				return err
			}
		}
		return nil
	}
	own := map[string][]byte{}
	for name, data := range w.kit.Ref {
		if p, ok := patched[name]; ok {
			data = p
		}
		own[name] = rewriteImports(name, data)
	}
	for name, data := range patched {
		if _, ok := w.kit.Ref[name]; !ok {
			own[name] = data // a file the mutant schema adds
		}
	}
	maps.Copy(own, w.kit.Helpers)
	maps.Copy(own, w.learner)
	if err := lay(w.kit.Lab.Dir, own, false); err != nil {
		ov.Close()
		return nil, err
	}
	for dir, files := range w.kit.Deps {
		ref := map[string][]byte{}
		for name, data := range files {
			ref[name] = rewriteImports(name, data)
		}
		if err := lay(dir, ref, true); err != nil {
			ov.Close()
			return nil, err
		}
	}
	return ov, nil
}

// pkg is the track's package directory for go test.
func (w *writeRun) pkg() string { return "./" + filepath.ToSlash(DirOf(w.kit.Lab)) }

// baseRun is the tests on the correct code.
type baseRun struct {
	Tests      []Test
	BuildError string
	Problem    string
	// Covered maps a reference file to its statement blocks: start line,
	// end line, hit (1) or not (0).
	Covered map[string][][3]int
}

// raceCounting is the counting tests that also pass with no mutant when
// run as the race pass runs them (race detector on, no coverage): the
// second null run, made once, and only if some mutant needs a race pass.
func (w *writeRun) raceCounting(ctx context.Context, counting []string) ([]string, error) {
	w.raceOnce.Do(func() {
		p, err := w.runMutant(ctx, "", nil, counting, nil, true)
		if err != nil {
			w.raceErr = err
			return
		}
		for _, t := range counting {
			if p.Test(t).Status == gotest.Pass {
				w.racePass = append(w.racePass, t)
			}
		}
		if strings.Contains(p.Output, "found unexpected goroutines") {
			w.racePass = nil // a leak would look like a kill of every mutant
		}
	})
	return w.racePass, w.raceErr
}

// countingTests names the tests that count.
func countingTests(tests []Test) []string {
	var names []string
	for _, t := range tests {
		if t.Counts {
			names = append(names, t.Name)
		}
	}
	return names
}

// timeoutFor bounds one mutant's run: 30 s more than three times what the
// counting tests took on the reference.
func (o Options) timeoutFor(tests []Test) time.Duration {
	d := 30 * time.Second
	if o.TestLimit > 0 {
		d = 6 * o.TestLimit // labctl's own tests, with a short limit
	}
	for _, t := range tests {
		if t.Counts {
			d += time.Duration(3 * t.Seconds * float64(time.Second))
		}
	}
	return d
}

// embeds reports whether a test file embeds files: //go:embed is laid over
// like the source, so a test could read the mutated reference and "kill"
// every mutant by comparing it with the pristine one.
func embeds(files map[string][]byte) (string, bool) {
	for _, name := range slices.Sorted(maps.Keys(files)) {
		f, err := parser.ParseFile(token.NewFileSet(), name, files[name], parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			continue // the build reports it
		}
		for _, imp := range f.Imports {
			if imp.Path.Value == `"embed"` {
				return name, true
			}
		}
		if bytes.Contains(files[name], []byte("//go:embed")) {
			return name, true
		}
	}
	return "", false
}

// reference runs the tests on the correct code, with coverage, and says
// which of them count; then it runs the counting ones again the way the
// mutants run (no race detector, no coverage, only those tests), and a test
// that fails there does not count either: a kill must come from the bug,
// not from how the run was made.
func (w *writeRun) reference(ctx context.Context) (*baseRun, error) {
	var out baseRun
	key := w.key("reference", "")
	if w.get(key, &out) {
		return &out, nil
	}
	if n, err := catalog.TestFuncs(w.learner); err != nil {
		out.BuildError = err.Error()
		return &out, nil
	} else if len(n) == 0 {
		out.Problem = "no tests yet: write a func TestX(t *testing.T) in " + filepath.ToSlash(filepath.Join(DirOf(w.kit.Lab), File))
		return &out, nil
	}
	if name, ok := embeds(w.learner); ok {
		out.Problem = name + " embeds files (//go:embed): the build lays the mutated reference where an embed reads, so a test could tell a mutant by its source; read what you need with os.ReadFile instead"
		return &out, nil
	}
	w.logf("write %s: running your tests on the reference (the first run builds it, a few seconds)…", w.kit.Lab.Number)
	// The cover tool reads the files on disk, not the overlay: put the
	// pristine copies there first.
	if _, err := w.kit.Materialize(w.opts.Root); err != nil {
		return nil, err
	}
	ov, err := w.overlay(nil)
	if err != nil {
		return nil, err
	}
	defer ov.Close()
	overlay, err := ov.File()
	if err != nil {
		return nil, err
	}
	profile := filepath.Join(filepath.Dir(overlay), "cover.out")
	names, _ := catalog.TestFuncs(w.learner)
	p, err := w.referenceRun(ctx, overlay, profile, names)
	if err != nil {
		return nil, err
	}
	if p.BuildFailed {
		out.BuildError = strings.TrimSpace(p.Output)
		return &out, nil
	}
	w.judgeReference(&out, p, names)
	if out.Covered, err = readCoverage(profile); err != nil {
		return nil, err
	}
	if err := w.nullRun(ctx, &out); err != nil {
		return nil, err
	}
	if slices.ContainsFunc(out.Tests, func(t Test) bool { return t.Why == "skipped on the correct code" }) {
		return &out, nil // a skip depends on this machine (Redis): do not remember it
	}
	w.put(key, out)
	return &out, nil
}

// referenceRun runs the tests on the correct code under the race detector
// and with coverage. A panic ends the test binary, so the tests it stopped
// run again without the ones that failed, and each is judged on its own.
func (w *writeRun) referenceRun(ctx context.Context, overlay, profile string, names []string) (*gotest.PackageResult, error) {
	var p *gotest.PackageResult
	var skip []string
	for {
		args := []string{"-covermode=atomic", "-coverprofile=" + profile, "-run", gotest.ExactNames(names)}
		if len(skip) > 0 {
			args = append(args, "-skip", gotest.ExactNames(skip))
		}
		prev := p
		var err error
		p, err = gotest.RunPackage(ctx, gotest.RunOptions{
			Dir: w.opts.Root, Packages: []string{w.pkg()}, Race: true, Count: 1, Overlay: overlay,
			Timeout: 2 * time.Minute, Args: args,
		})
		if err != nil || p.BuildFailed {
			return p, err
		}
		if prev != nil { // keep what the tests skipped here did the first time
			for _, t := range skip {
				p.Tests[t] = prev.Tests[t]
			}
		}
		if !slices.ContainsFunc(names, func(t string) bool { return p.Test(t).Status == gotest.NotRun }) {
			return p, nil
		}
		more := false
		for _, t := range names {
			if p.Test(t).Status == gotest.Fail && !slices.Contains(skip, t) {
				skip, more = append(skip, t), true
			}
		}
		if !more {
			return p, nil
		}
	}
}

// judgeReference says of each test whether it counts, and whether the run
// as a whole leaves nothing to count.
func (w *writeRun) judgeReference(out *baseRun, p *gotest.PackageResult, names []string) {
	for _, name := range names {
		r := p.Test(name)
		t := Test{Name: name, Seconds: r.Elapsed.Seconds()}
		switch {
		case r.Status == gotest.Fail:
			t.Why = "fails on the correct code"
			t.Message = gotest.Headline(r.Output)
		case r.Status == gotest.Skip:
			t.Why = "skipped on the correct code"
			t.Message = gotest.Headline(r.Output)
		case r.Status != gotest.Pass:
			t.Why = "did not run on the correct code (an earlier test panicked or the run timed out)"
		case r.Elapsed > w.opts.limit():
			t.Why = fmt.Sprintf("took %.1fs on the correct code (the limit is %s): wait in testing/synctest's fake time, not in real time", r.Elapsed.Seconds(), w.opts.limit())
		default:
			t.Counts = true
		}
		out.Tests = append(out.Tests, t)
	}
	if p.Status == gotest.Fail && !slices.ContainsFunc(out.Tests, func(t Test) bool { return !t.Counts && t.Why == "fails on the correct code" }) {
		switch {
		case strings.Contains(p.Output, "found unexpected goroutines"):
			out.Problem = "your tests leave goroutines running on the correct code (goleak, in main_test.go): every mutant would look killed, so none counts until the tests wait for what they start\n" + gotest.LastLines(p.Output, 12)
		default:
			out.Problem = "the test binary failed outside any test on the correct code:\n" + gotest.LastLines(p.Output, 12)
		}
	}
}

// nullRun runs the counting tests with no mutant, as the first pass of a
// mutant runs them, and takes out of the count any that fail there; a leak
// goleak reports there means nothing counts.
func (w *writeRun) nullRun(ctx context.Context, out *baseRun) error {
	counting := countingTests(out.Tests)
	if len(counting) == 0 || out.Problem != "" {
		return nil
	}
	w.mutantTimeout = w.opts.timeoutFor(out.Tests)
	p, err := w.runMutant(ctx, "", nil, counting, nil, false)
	if err != nil {
		return err
	}
	for i, t := range out.Tests {
		if !t.Counts {
			continue
		}
		if r := p.Test(t.Name); r.Status != gotest.Pass {
			out.Tests[i].Counts = false
			out.Tests[i].Why = "passes on the correct code only with the race detector or coverage on, or with the tests that do not count: run the way mutants are, it " + map[bool]string{true: "fails", false: "does not finish"}[r.Status == gotest.Fail]
			out.Tests[i].Message = gotest.Headline(r.Output)
		}
	}
	if strings.Contains(p.Output, "found unexpected goroutines") {
		out.Problem = "your tests leave goroutines running on the correct code (goleak, in main_test.go): every mutant would look killed, so none counts until the tests wait for what they start\n" + gotest.LastLines(p.Output, 12)
	}
	return nil
}

// readCoverage reads a cover profile into file base name → blocks.
func readCoverage(profile string) (map[string][][3]int, error) {
	f, err := os.Open(profile)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string][][3]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "mode:") {
			continue
		}
		// path/file.go:12.5,14.2 3 1
		file, rest, ok := strings.Cut(line, ":")
		fields := strings.Fields(rest)
		if !ok || len(fields) != 3 {
			continue
		}
		from, to, _ := strings.Cut(fields[0], ",")
		start, _ := strconv.Atoi(strings.Split(from, ".")[0])
		end, _ := strconv.Atoi(strings.Split(to, ".")[0])
		count, _ := strconv.Atoi(fields[2])
		hit := 0
		if count > 0 {
			hit = 1
		}
		base := filepath.Base(file)
		out[base] = append(out[base], [3]int{start, end, hit})
	}
	return out, sc.Err()
}

// reached reports whether the tests ran any of the code a patch changes.
// A change outside every statement block (a declaration, a field, a
// constant, a Lua script) is assumed reached: coverage cannot tell.
func reached(files []mutation.FilePatch, ref map[string][]byte, covered map[string][][3]int) bool {
	for _, f := range files {
		if !strings.HasSuffix(f.Path, ".go") {
			return true
		}
		ranges, err := f.Touched(string(ref[f.Path]))
		if err != nil {
			return true // the run will say the patch does not apply
		}
		for _, r := range ranges {
			inBlock := false
			for _, b := range covered[filepath.Base(f.Path)] {
				if b[0] <= r[1] && r[0] <= b[1] {
					inBlock = true
					if b[2] == 1 {
						return true
					}
				}
			}
			if !inBlock {
				return true
			}
		}
	}
	return false
}

// writeJob is one mutant on its way to a verdict.
type writeJob struct {
	res     MutantResult
	settled bool // res is the verdict: remembered, not reached, or unusable
	patched map[string][]byte
	key     string
}

// settle gives a mutant its verdict without running it where it can:
// remembered, not reached by any test, or nothing counts yet.
func (w *writeRun) settle(m Mutant, base *baseRun, counting []string) writeJob {
	res := MutantResult{Name: m.Name, HeldBack: m.HeldBack}
	done := func(res MutantResult) writeJob {
		if !res.Killed && res.Problem == "" {
			res.Nudge = m.Nudge
		}
		return writeJob{res: res, settled: true}
	}
	files, patched, err := w.apply(m.Patch)
	if err != nil {
		res.Problem = err.Error()
		return done(res)
	}
	switch {
	case base.BuildError != "":
		res.Survived = "your tests do not build"
		return done(res)
	case len(counting) == 0:
		res.Survived = "no test counts yet"
		return done(res)
	case base.Problem != "":
		res.Survived = "nothing counts yet (see above)"
		return done(res)
	case !reached(files, w.kit.Ref, base.Covered):
		res.Survived = "no test reaches the code it changes"
		return done(res)
	}
	kind := "mutant"
	if w.opts.OneByOne {
		kind = "mutant-alone" // the check of the shared build must not read its verdicts
	}
	key := w.key(kind, m.Patch+"\x00"+strings.Join(counting, ","))
	var cached MutantResult
	if w.get(key, &cached) {
		cached.Name, cached.HeldBack, cached.Cached = m.Name, m.HeldBack, true
		return done(cached)
	}
	res.Nudge = m.Nudge // cleared if it is killed
	return writeJob{res: res, patched: patched, key: key}
}

// mutant runs a mutant settle could not decide.
func (w *writeRun) mutant(ctx context.Context, job writeJob, counting []string) MutantResult {
	if job.settled {
		return job.res
	}
	res := w.decide(ctx, job, counting)
	// A survivor comes back with what it breaks; a killed or broken mutant
	// without. The nudge is the mutant's, not the verdict's: the verdict
	// remembered for the next run is stored without it (settle adds it).
	if !res.Killed && res.Problem == "" {
		res.Nudge = job.res.Nudge
	}
	return res
}

// decide runs one mutant against the counting tests, without the race
// detector and then, for a survivor, with it; the verdict it returns is
// the one remembered, without a nudge.
func (w *writeRun) decide(ctx context.Context, job writeJob, counting []string) MutantResult {
	res, patched, key := job.res, job.patched, job.key
	res.Nudge = ""
	var err error
	// Without the race detector first (a build and run about twice as
	// fast); a mutant that survives runs again with it, so a race the
	// tests drive still kills.
	for _, race := range []bool{false, true} {
		res.Discounted, res.Survived = nil, ""
		counting := counting
		if race {
			if counting, err = w.raceCounting(ctx, counting); err != nil {
				res.Problem = err.Error()
				return res
			}
			if len(counting) == 0 {
				break
			}
		}
		if err := w.pass(ctx, &res, patched, counting, race); err != nil {
			res.Problem = err.Error()
			return res
		}
		if res.Killed {
			break
		}
	}
	if !res.Killed && res.Survived == "" {
		res.Survived = "your tests ran the changed code and passed"
	}
	w.put(key, res)
	return res
}

// apply parses a mutant's patch and applies it to the reference's files.
func (w *writeRun) apply(patch string) ([]mutation.FilePatch, map[string][]byte, error) {
	files, err := mutation.ParsePatch(patch)
	if err != nil {
		return nil, nil, err
	}
	patched := map[string][]byte{}
	for _, f := range files {
		if strings.HasSuffix(f.Path, "_test.go") || strings.Contains(f.Path, "/") {
			return nil, nil, errors.New("a mutant changes the reference's own files, not " + f.Path)
		}
		orig, ok := w.kit.Ref[f.Path]
		if !ok {
			return nil, nil, errors.New("the patch changes " + f.Path + ", which the reference does not have")
		}
		out, err := f.Apply(string(orig))
		if err != nil {
			return nil, nil, err
		}
		patched[f.Path] = []byte(out)
	}
	return files, patched, nil
}

// pass runs the counting tests on a mutant, with or without the race
// detector, and judges the run. A panic or a timeout ends the test binary,
// so the tests after it never ran: they run again without the ones that
// blew up, as often as another blows up (each run skips one more).
func (w *writeRun) pass(ctx context.Context, res *MutantResult, patched map[string][]byte, counting []string, race bool) error {
	var skip []string
	for {
		p, err := w.runMutant(ctx, res.Name, patched, counting, skip, race)
		if err != nil {
			return err
		}
		judgeWriteMutant(res, p, counting, w.opts.limit())
		if res.Killed || len(res.Discounted) == 0 {
			return nil
		}
		if !slices.ContainsFunc(counting, func(t string) bool { return p.Test(t).Status == gotest.NotRun }) {
			return nil
		}
		more := false
		for _, t := range counting {
			r := p.Test(t)
			if (r.Status == gotest.Fail || timedOut(r)) && !slices.Contains(skip, t) {
				skip = append(skip, t)
				more = true
			}
		}
		if !more {
			return nil
		}
	}
}

// runMutant runs the counting tests on mutant name (the reference when
// name is ""): in the schema's binary where it folded, else built on its
// own by go test.
func (w *writeRun) runMutant(ctx context.Context, name string, patched map[string][]byte, counting, skip []string, race bool) (*gotest.PackageResult, error) {
	if id, ok := w.schema.ID(name); ok {
		if p, used, err := w.runSchema(ctx, id, counting, skip, race); used || err != nil {
			return p, err
		}
	}
	ov, err := w.overlay(patched)
	if err != nil {
		return nil, err
	}
	defer ov.Close()
	overlay, err := ov.File()
	if err != nil {
		return nil, err
	}
	// vet ran with the reference run; once per mutant it is only cost. No
	// coverage: the cover tool reads the files on disk, not the overlay, so
	// it would build the pristine reference instead of the mutant.
	args := []string{"-vet=off"}
	if len(skip) > 0 {
		args = append(args, "-skip", gotest.ExactNames(skip))
	}
	p, err := gotest.RunPackage(ctx, gotest.RunOptions{
		Dir: w.opts.Root, Packages: []string{w.pkg()}, Race: race, Count: 1, Overlay: overlay,
		Run: gotest.ExactNames(counting), Timeout: w.mutantTimeout, Args: args,
	})
	if err == nil && p.BuildFailed {
		err = fmt.Errorf("the mutant does not compile:\n%s", gotest.Indent(p.Output, 6))
	}
	return p, err
}

// judgeWriteMutant reads a mutant's run. A kill is a test failing by what
// it asserts (t.Error, t.Fatal, require, or the race detector catching a
// race it drove) inside TestLimit; a panic, the binary's timeout or a
// slow failure is discounted. A goroutine leak goleak reports at the end
// of the run counts too: the tests drove the code into leaking.
func judgeWriteMutant(res *MutantResult, p *gotest.PackageResult, counting []string, limit time.Duration) {
	for _, name := range counting {
		r := p.Test(name)
		if r.Status != gotest.Fail {
			continue
		}
		switch why := Discount(r, limit); why {
		case "":
			if !slices.Contains(res.KilledBy, name) {
				res.KilledBy = append(res.KilledBy, name)
			}
		default:
			res.Discounted = append(res.Discounted, name+" "+why)
		}
	}
	for _, name := range counting {
		// test2json files the timeout's panic under the test that was
		// running, which never gets a --- FAIL line of its own.
		if r := p.Test(name); r.Status != gotest.Fail && timedOut(r) {
			res.Discounted = append(res.Discounted, name+" hung until the test binary timed out")
		}
	}
	if strings.Contains(p.Output, "test timed out after") {
		for _, name := range hungTests(p.Output) {
			if slices.Contains(counting, name) && p.Test(name).Status != gotest.Fail && !slices.ContainsFunc(res.Discounted, func(d string) bool { return strings.HasPrefix(d, name+" ") }) {
				res.Discounted = append(res.Discounted, name+" hung until the test binary timed out")
			}
		}
	}
	// A leak after the tests counts when they all ran within the limit:
	// one that took longer drove the leak too late to count, as a late
	// failure does not.
	slow := slices.ContainsFunc(counting, func(name string) bool { return p.Test(name).Elapsed > limit })
	if len(res.KilledBy) == 0 && len(res.Discounted) == 0 && !slow && p.Status == gotest.Fail && strings.Contains(p.Output, "found unexpected goroutines") &&
		!strings.Contains(p.Output, "panic: ") && !strings.Contains(p.Output, "test timed out after") {
		res.KilledBy = append(res.KilledBy, "(goroutine leak after the tests)")
	}
	res.Killed = len(res.KilledBy) > 0
	switch {
	case res.Killed:
		res.Survived = ""
	case len(res.Discounted) > 0:
		res.Survived = "your tests caught it only by crashing or hanging, which does not count (see below)"
	}
}

// hungTests reads the "running tests:" list Go prints when a test binary
// times out.
func hungTests(out string) []string {
	var names []string
	in := false
	for line := range strings.Lines(out) {
		t := strings.TrimSpace(line)
		switch {
		case t == "running tests:":
			in = true
		case in && strings.HasPrefix(t, "Test"):
			name, _, _ := strings.Cut(t, " ")
			name, _, _ = strings.Cut(name, "/")
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
		case in:
			return names
		}
	}
	return names
}

// Discount says why a failing test's failure does not count, "" if it does.
func Discount(r gotest.TestResult, limit time.Duration) string {
	switch {
	case timedOut(r):
		return "hung until the test binary timed out"
	case panicked(r.Output):
		return "panicked" + panicMessage(r.Output)
	case r.Elapsed > limit:
		return fmt.Sprintf("failed only after %.1fs (the limit is %s)", r.Elapsed.Seconds(), limit)
	}
	return ""
}

// timedOut reports that the binary's timeout ended this test. test2json
// files the timeout's panic under the last test that printed, which may be
// a parallel test that had already finished: the "running tests:" list the
// panic prints names the ones it really stopped.
func timedOut(r gotest.TestResult) bool {
	if !strings.Contains(r.Output, "test timed out after") {
		return false
	}
	running := hungTests(r.Output)
	return len(running) == 0 || slices.Contains(running, r.Name)
}

// panicMessage is ": " and the first panic line, shortened, or "".
func panicMessage(out string) string {
	for line := range strings.Lines(out) {
		t := strings.TrimRight(line, "\r\n")
		if msg, ok := strings.CutPrefix(t, "panic: "); ok && !strings.HasPrefix(msg, "deadlock: ") {
			msg = strings.TrimSuffix(strings.TrimSuffix(msg, " [recovered, repanicked]"), " [recovered]")
			if len(msg) > 120 {
				msg = msg[:120] + "…"
			}
			return ": " + msg
		}
		if strings.HasPrefix(t, "fatal error: ") {
			return ": " + t
		}
	}
	return ""
}

// panicked reports a panic or a fatal error in a test's output. synctest's
// own "deadlock:" panic is not one: like the race detector and goleak, it
// is a detector reporting goroutines the code left blocked, which the test
// drove it into.
func panicked(out string) bool {
	for line := range strings.Lines(out) {
		// The runtime prints these at the start of a line; an indented one
		// is a test's own log (a recovered panic it reports, say).
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "panic: deadlock: ") || strings.HasPrefix(line, "panic: test timed out after ") {
			continue // a detector, or the timeout (timedOut says whose)
		}
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			return true
		}
	}
	return false
}

// cacheBase hashes what every verdict of this lab shares: the Go
// environment, go.mod/go.sum, the helper packages tests import, whether
// a real Redis is at hand, and the files laid over write/.
func (w *writeRun) cacheBase(ctx context.Context) (string, error) {
	if w.opts.Fresh {
		return "", nil
	}
	goenv, err := labfs.GoOutput(ctx, w.opts.Root, "env", "GOVERSION", "GOOS", "GOARCH", "GOFLAGS", "GOEXPERIMENT", "CGO_ENABLED")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	_, redisServer := exec.LookPath("redis-server")
	fmt.Fprintf(h, "%s\nlimit=%s\n%s\nredis=%q,%q,%v\n", writeSchema, w.opts.limit(), goenv, os.Getenv("REDIS_URL"), os.Getenv("REDIS_INTEGRATION_REQUIRED"), redisServer == nil)
	for _, f := range []string{"go.mod", "go.sum"} {
		if err := labfs.HashFile(h, w.opts.Root, f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", err
		}
	}
	if err := labfs.HashTree(h, w.opts.Root, filepath.Join("internal", "testkit")); err != nil {
		return "", err
	}
	put := func(kind string, files map[string][]byte) {
		for _, n := range slices.Sorted(maps.Keys(files)) {
			fmt.Fprintf(h, "%s/%s\x00%d\x00", kind, n, len(files[n]))
			h.Write(files[n])
		}
	}
	put("ref", w.kit.Ref)
	put("helpers", w.kit.Helpers)
	put("tests", w.learner)
	// What the tests may read at run time: testdata/ and any other file
	// next to them that is not a laid-out copy.
	dir := DirOf(w.kit.Lab)
	if err := labfs.HashTree(h, w.opts.Root, filepath.Join(dir, "testdata")); err != nil {
		return "", err
	}
	entries, _ := os.ReadDir(filepath.Join(w.opts.Root, dir))
	for _, e := range entries {
		_, ref := w.kit.Ref[e.Name()]
		_, helper := w.kit.Helpers[e.Name()]
		if e.Type().IsRegular() && !ref && !helper && !strings.HasSuffix(e.Name(), ".go") {
			if err := labfs.HashFile(h, w.opts.Root, filepath.Join(dir, e.Name())); err != nil {
				return "", err
			}
		}
	}
	for _, d := range slices.Sorted(maps.Keys(w.kit.Deps)) {
		put("dep/"+d, w.kit.Deps[d])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// timings are how long each mutant of the lab took when it last ran.
func (w *writeRun) timings() map[string]float64 {
	took := map[string]float64{}
	b, err := os.ReadFile(w.timingsFile())
	if err == nil {
		_ = json.Unmarshal(b, &took) // a damaged file only loses the order
	}
	return took
}

func (w *writeRun) putTimings(took map[string]float64) {
	labfs.StoreJSON(filepath.Dir(w.timingsFile()), strings.TrimSuffix(filepath.Base(w.timingsFile()), ".json"), took)
}

func (w *writeRun) timingsFile() string {
	return filepath.Join(w.opts.Root, writeCacheDir, "timings-"+w.kit.Lab.Dir+".json")
}

func (w *writeRun) key(kind, extra string) string {
	if w.cacheID == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(w.cacheID + "\x00" + kind + "\x00" + extra))
	return hex.EncodeToString(sum[:])
}

func (w *writeRun) get(key string, v any) bool {
	return labfs.LoadJSON(filepath.Join(w.opts.Root, writeCacheDir), key, v)
}

func (w *writeRun) put(key string, v any) {
	labfs.StoreJSON(filepath.Join(w.opts.Root, writeCacheDir), key, v)
}

// HasTests reports whether the learner's track holds any test.
func HasTests(root string, k *Kit) bool {
	files, _, err := (&writeRun{opts: Options{Root: root, Lab: k.Lab}, kit: k}).tests()
	if err != nil {
		return true // scored, and the run says what is wrong
	}
	tests, err := catalog.TestFuncs(files)
	return err != nil || len(tests) > 0 // a file that does not parse is scored (as not building)
}
