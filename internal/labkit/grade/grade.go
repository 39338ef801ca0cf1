// Package grade grades the tracks a checkout holds (labctl grade): the labs
// against the pristine tests (and an instructor's held-back ones), the
// learner's tests by the mutants they kill, and the reports (grade.json,
// junit.xml, grade.md). It also writes the GitHub Classroom autograding
// document, one graded command per test, and grades the one test such a
// command names (labctl classroom).
package grade

import (
	"cmp"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/checklist"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
)

// Options configures Run.
type Options struct {
	Root string
	Labs []catalog.Lab // nil: every built lab
	// TestsDir holds an instructor's held-back tests: TestsDir/NN-topic/*_test.go
	// (or TestsDir/NN/…) are added to that lab for the run.
	TestsDir string
	// PristineRef, when set, is a git revision whose solutions/ test files
	// (or, in a template, whose pristine archive) hold the pristine tests;
	// otherwise the working tree's solutions/ or archive are used.
	PristineRef string
	NoRace      bool
	Log         io.Writer
	// MutantsDir is an instructor's held-back mutant bank for the
	// test-writing track: MutantsDir/NN-topic/*.patch.
	MutantsDir string
	// SkipWrite leaves the test-writing track out of the grade.
	SkipWrite bool
}

// GradedTest is one test's entry in a grade report.
type GradedTest struct {
	Name     string        `json:"name"`
	Status   gotest.Status `json:"status"`
	Seconds  float64       `json:"seconds"`
	HeldBack bool          `json:"held_back,omitempty"`
	// Summary is the failure in one line: the assertion's message, what it
	// expected and what came (or why the test skipped).
	Summary string `json:"summary,omitempty"`
	Message string `json:"message,omitempty"` // the whole failure, frame lines and stacks removed
}

// GradedLab is one lab's entry in a grade report.
type GradedLab struct {
	Number string `json:"lab"`
	Dir    string `json:"dir"`
	Title  string `json:"title"`
	Passed int    `json:"passed"`
	Total  int    `json:"total"`
	Edited bool   `json:"tests_were_edited"` // the learner's copy differed and was restored
	Build  string `json:"build_error,omitempty"`
	// NoRedis says, in one line, which real-Redis tests skipped and why.
	NoRedis string       `json:"no_redis,omitempty"`
	Tests   []GradedTest `json:"tests"`
	// Checklist is which production-readiness items this lab's tests keep
	// (checklist/PRODUCTION_READINESS.md); nil when no item names the lab.
	Checklist *checklist.LabScore `json:"checklist,omitempty"`
	// Hints is how many of the lab's near-solutions the learner opened
	// (.labctl/hints.json); nil when the lab has none to open. What that
	// is worth is the instructor's call.
	Hints *HintUse `json:"hints,omitempty"`
	// Write is the test-writing track: the mutants the learner's tests in
	// write/NN-topic kill; nil when it was not graded.
	Write *WriteGrade `json:"tests_track,omitempty"`
}

// HintUse is how many near-solutions a lab offers and how many were opened.
type HintUse struct {
	Opened  int `json:"near_solutions_opened"`
	Offered int `json:"near_solutions_offered"`
}

// HintsLine is "hints: 1 of 4 near-solutions opened", or "".
func (l GradedLab) HintsLine() string {
	if l.Hints == nil {
		return ""
	}
	return fmt.Sprintf("hints: %d of %d near-solutions opened", l.Hints.Opened, l.Hints.Offered)
}

// Name is the lab's directory without its number: "admission".
func (l GradedLab) Name() string {
	_, name, ok := strings.Cut(l.Dir, "-")
	if !ok {
		return l.Dir
	}
	return name
}

// ChecklistLine is "admission: 5/6 checklist items", or "" when no item
// names the lab.
func (l GradedLab) ChecklistLine() string {
	if l.Checklist == nil {
		return ""
	}
	return fmt.Sprintf("%s: %d/%d checklist items", l.Name(), l.Checklist.Kept, l.Checklist.Total)
}

// Report is a whole grade report.
type Report struct {
	Generated time.Time   `json:"generated"`
	Passed    int         `json:"passed"`
	Total     int         `json:"total"`
	Labs      []GradedLab `json:"labs"`
	// The test-writing track across the labs: mutants killed and offered.
	MutantsKilled int `json:"mutants_killed"`
	MutantsTotal  int `json:"mutants_total"`
	// Tracks are the tracks graded: "labs" (Passed and Total count its
	// tests) and "write" (the Mutants counts).
	Tracks []catalog.Track `json:"tracks"`
}

// Score is the fraction of tests passed, 0 when there are none.
func (g Report) Score() float64 {
	if g.Total == 0 {
		return 0
	}
	return float64(g.Passed) / float64(g.Total)
}

// gradePlan is what grading one lab needs once its tests are in the overlay.
type gradePlan struct {
	lab      catalog.Lab
	edited   bool            // the learner's test files differ from the pristine ones
	tests    []string        // pristine and held-back tests, in report order
	heldBack map[string]bool // test name → it came from TestsDir
}

// Run grades the tracks the checkout holds: the learner's labs
// against the pristine tests (and any held-back ones), each test scored,
// and the learner's tests by the mutants they kill. A failing learner is
// not an error.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.TestsDir != "" && !labfs.IsDir(opts.TestsDir) {
		return nil, fmt.Errorf("%w: --tests %s is not a directory", catalog.ErrBadOption, opts.TestsDir)
	}
	c, err := catalog.Load(opts.Root)
	if err != nil {
		return nil, err
	}
	labs := opts.Labs
	if labs == nil {
		labs = slices.DeleteFunc(slices.Clone(c.Labs), func(l catalog.Lab) bool { return !l.Built() && (opts.SkipWrite || !l.Writable()) })
	}
	ov, err := gotest.NewOverlay()
	if err != nil {
		return nil, err
	}
	defer ov.Close()
	plans := map[string]gradePlan{}
	var pkgs []string
	for _, l := range labs {
		if !l.Built() {
			continue
		}
		if plans[l.Dir], err = planGrade(ctx, opts, l, ov); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, "./"+filepath.ToSlash(l.LabDir()))
	}
	g := &Report{Generated: time.Now().UTC()}
	var run *gotest.Run
	if len(pkgs) > 0 {
		g.Tracks = append(g.Tracks, catalog.TrackLabs)
		if run, err = runGrade(ctx, opts, ov, pkgs); err != nil {
			return nil, err
		}
	}
	if !opts.SkipWrite && slices.ContainsFunc(labs, catalog.Lab.Writable) {
		g.Tracks = append(g.Tracks, catalog.TrackWrite)
	}
	// A checklist is optional (an old template may lack one); a broken
	// one is an error, not a silently missing score.
	cl, err := checklist.Load(opts.Root)
	if errors.Is(err, fs.ErrNotExist) {
		cl, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	hintState, err := catalog.LoadHintState(opts.Root)
	if err != nil {
		hintState = nil // a state the learner broke says nothing; the grade stands without it
	}
	for _, l := range labs {
		gl := GradedLab{Number: l.Number, Dir: l.Dir, Title: l.Title}
		if pl, ok := plans[l.Dir]; ok {
			p := run.Package("labs/" + l.Dir)
			gl = scoreLab(pl, p)
			if hints, err := catalog.LoadHints(opts.Root, l); err == nil && hintState != nil {
				if opened, offered := hintState.Opened(l.Number, hints); offered > 0 {
					gl.Hints = &HintUse{Opened: opened, Offered: offered}
				}
			}
			if cl != nil {
				gl.Checklist = checklist.ScoreLab(cl, l.Dir, func(test string) bool { return gl.Build == "" && p.Test(test).Status == gotest.Pass })
			}
		}
		if !opts.SkipWrite && l.Writable() {
			if gl.Write, err = gradeWrite(ctx, opts, c, cl, l); err != nil {
				return nil, fmt.Errorf("lab %s, test-writing track: %w", l.Number, err)
			}
			g.MutantsKilled += gl.Write.Killed
			g.MutantsTotal += gl.Write.Total
		}
		g.Labs = append(g.Labs, gl)
		g.Passed += gl.Passed
		g.Total += gl.Total
	}
	return g, nil
}

// planGrade puts the pristine and held-back tests of one lab into the
// overlay, hides the learner's own test files, and lists the tests to score.
func planGrade(ctx context.Context, opts Options, l catalog.Lab, ov *gotest.Overlay) (gradePlan, error) {
	pristine, err := pristineTests(ctx, opts, l)
	if err != nil {
		return gradePlan{}, err
	}
	extra, err := heldBackTests(opts.TestsDir, l)
	if err != nil {
		return gradePlan{}, err
	}
	labDir := filepath.Join(opts.Root, l.LabDir())
	mine, err := catalog.ReadTestSources(labDir)
	if err != nil {
		return gradePlan{}, err
	}
	for name := range mine {
		if _, ok := pristine[name]; !ok {
			ov.Delete(filepath.Join(labDir, name))
		}
	}
	all := maps.Clone(pristine)
	for name, src := range extra {
		if _, clash := all[name]; clash {
			return gradePlan{}, fmt.Errorf("held-back test file %s/%s has the name of a lab test file; rename it", l.Dir, name)
		}
		all[name] = src
	}
	for name, src := range all {
		if err := ov.Set(filepath.Join(labDir, name), src); err != nil {
			return gradePlan{}, err
		}
	}
	tests, err := catalog.ExerciseTestFuncs(all)
	if err != nil {
		return gradePlan{}, err
	}
	extraTests, err := catalog.ExerciseTestFuncs(extra)
	if err != nil {
		return gradePlan{}, err
	}
	pl := gradePlan{lab: l, edited: !catalog.DiffSources(mine, pristine).Empty(), tests: gotest.ReportOrder(tests), heldBack: map[string]bool{}}
	for _, t := range extraTests {
		pl.heldBack[t] = true
	}
	return pl, nil
}

func runGrade(ctx context.Context, opts Options, ov *gotest.Overlay, pkgs []string) (*gotest.Run, error) {
	overlay, err := ov.File()
	if err != nil {
		return nil, err
	}
	if opts.Log != nil {
		fmt.Fprintf(opts.Log, "grade: running %d labs with the pristine tests restored…\n", len(pkgs))
	}
	return gotest.RunTests(ctx, gotest.RunOptions{Dir: opts.Root, Packages: pkgs, Race: !opts.NoRace, Count: 1, Overlay: overlay, Timeout: 5 * time.Minute})
}

// scoreLab turns one lab's run into its report entry: a test earns its
// point only by passing; every other outcome keeps the line that says why.
func scoreLab(pl gradePlan, p *gotest.PackageResult) GradedLab {
	gl := GradedLab{Number: pl.lab.Number, Dir: pl.lab.Dir, Title: pl.lab.Title, Edited: pl.edited}
	o := gotest.ReadOutcome(p, pl.tests)
	if o.BuildFailed {
		gl.Build = strings.TrimSpace(p.Output)
	}
	gl.NoRedis = o.RedisNote()
	for _, name := range o.Tests {
		res := p.Test(name)
		gt := GradedTest{Name: name, Status: res.Status, Seconds: res.Elapsed.Seconds(), HeldBack: pl.heldBack[name]}
		switch {
		case o.BuildFailed:
			gt.Message = "the lab does not compile"
		case res.Status == gotest.Pass:
			gl.Passed++
		case res.Status == gotest.NotRun:
			gt.Message = "no result: an earlier panic or timeout ended the run\n" + gotest.LastLines(p.Output, 10)
		default:
			gt.Message = gotest.FailureMessage(res.Output)
			gt.Summary = gotest.Headline(res.Output)
		}
		if gt.Summary == "" && gt.Message != "" {
			gt.Summary = gotest.Collapse(gotest.FirstLine(gt.Message))
		}
		gl.Tests = append(gl.Tests, gt)
	}
	gl.Total = len(gl.Tests)
	return gl
}

func pristineTests(ctx context.Context, opts Options, l catalog.Lab) (map[string][]byte, error) {
	if opts.PristineRef == "" {
		return catalog.PristineTests(opts.Root, l)
	}
	return catalog.PristineTestsAt(ctx, opts.Root, opts.PristineRef, l)
}

func heldBackTests(dir string, l catalog.Lab) (map[string][]byte, error) {
	if dir == "" {
		return map[string][]byte{}, nil
	}
	for _, d := range []string{l.Dir, l.Number} {
		p := filepath.Join(dir, d)
		if labfs.IsDir(p) {
			return catalog.ReadTestSources(p)
		}
	}
	return map[string][]byte{}, nil
}

// WriteReports writes grade.json, junit.xml and grade.md into dir.
func (g *Report) WriteReports(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(g, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "grade.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	x, err := g.JUnit()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "junit.xml"), x, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "grade.md"), []byte(g.Markdown()), 0o644)
}

// JUnit XML, in the shape CI systems read: one testsuite per lab.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *struct{}     `xml:"skipped,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Body    string `xml:",chardata"`
}

// JUnit renders the report as JUnit XML.
func (g *Report) JUnit() ([]byte, error) {
	s := junitSuites{Tests: g.Total}
	labs := slices.Contains(g.Tracks, catalog.TrackLabs)
	for _, l := range g.Labs {
		suite := junitSuite{Name: "lab " + l.Number + " " + l.Dir, Tests: l.Total}
		for _, t := range l.Tests {
			c := junitCase{Name: t.Name, Classname: "labs/" + l.Dir, Time: fmt.Sprintf("%.3f", t.Seconds)}
			switch t.Status {
			case gotest.Pass:
			case gotest.Skip:
				// A skipped exercise test earns nothing: it counts as a failure
				// here too, so a dashboard cannot show it as green.
				suite.Failures++
				c.Failure = &junitFailure{Message: cmp.Or(t.Summary, "skipped"), Body: t.Message}
			default:
				suite.Failures++
				c.Failure = &junitFailure{Message: cmp.Or(t.Summary, string(t.Status)), Body: t.Message}
			}
			suite.Cases = append(suite.Cases, c)
		}
		if labs {
			s.Failures += suite.Failures
			s.Suites = append(s.Suites, suite)
		}
		if l.Write == nil {
			continue
		}
		ws := junitSuite{Name: "write " + l.Number + " " + l.Dir, Tests: l.Write.Total}
		for _, m := range l.Write.Mutants {
			c := junitCase{Name: m.Name, Classname: "write/" + l.Dir, Time: "0"}
			if m.HeldBack {
				c.Classname += " (held back)"
			}
			if !m.Killed {
				ws.Failures++
				c.Failure = &junitFailure{Message: "survived: " + cmp.Or(m.Survived, m.Problem), Body: m.Nudge}
			}
			ws.Cases = append(ws.Cases, c)
		}
		s.Tests += ws.Tests
		s.Failures += ws.Failures
		s.Suites = append(s.Suites, ws)
	}
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

// Markdown renders a short summary for a CI job page.
func (g *Report) Markdown() string {
	var b strings.Builder
	if slices.Contains(g.Tracks, catalog.TrackLabs) {
		g.labsMarkdown(&b)
	}
	if g.MutantsTotal > 0 {
		fmt.Fprintf(&b, "\n## Test-writing track: %d/%d mutants killed\n\n", g.MutantsKilled, g.MutantsTotal)
		b.WriteString("| lab | killed | shipped | held back | tests that count | note |\n| --- | ---: | ---: | ---: | ---: | --- |\n")
		for _, l := range g.Labs {
			if w := l.Write; w != nil {
				fmt.Fprintf(&b, "| %s | %d/%d | %d/%d | %d/%d | %d | %s |\n", l.Number, w.Killed, w.Total,
					w.Killed-w.HeldBackKilled, w.Total-w.HeldBackTotal, w.HeldBackKilled, w.HeldBackTotal, w.Tests, w.Note)
			}
		}
	}
	if slices.Contains(g.Tracks, catalog.TrackLabs) {
		g.checklistMarkdown(&b)
		g.failingMarkdown(&b)
	}
	return strings.TrimLeft(b.String(), "\n")
}

// labsMarkdown is the labs track's table: a row per lab.
func (g *Report) labsMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, "## Lab grade: %d/%d tests (%.0f%%)\n\n", g.Passed, g.Total, 100*g.Score())
	b.WriteString("| lab | title | passed | total | note |\n| --- | --- | ---: | ---: | --- |\n")
	for _, l := range g.Labs {
		var notes []string
		if l.Build != "" {
			notes = append(notes, "does not compile")
		}
		if l.Edited {
			notes = append(notes, "tests were edited; graded with the pristine ones")
		}
		if l.NoRedis != "" {
			notes = append(notes, "real-Redis test skipped: no Redis where this ran")
		}
		if slices.ContainsFunc(l.Tests, func(t GradedTest) bool { return t.HeldBack }) {
			notes = append(notes, "includes held-back tests")
		}
		if l.Hints != nil {
			notes = append(notes, fmt.Sprintf("near-solutions opened: %d of %d", l.Hints.Opened, l.Hints.Offered))
		}
		fmt.Fprintf(b, "| %s | %s | %d | %d | %s |\n", l.Number, l.Title, l.Passed, l.Total, strings.Join(notes, "; "))
	}
}

// checklistMarkdown says, per lab, which checklist items its tests keep.
func (g *Report) checklistMarkdown(b *strings.Builder) {
	var items []string
	for _, l := range g.Labs {
		if line := l.ChecklistLine(); line != "" {
			var marks []string
			for _, it := range l.Checklist.Items {
				marks = append(marks, map[bool]string{true: "✓ ", false: "✗ "}[it.Kept]+it.ID)
			}
			items = append(items, fmt.Sprintf("- lab %s %s (%s)", l.Number, line, strings.Join(marks, ", ")))
		}
	}
	if len(items) > 0 {
		b.WriteString("\n### Production-readiness checklist kept\n\n")
		b.WriteString(strings.Join(items, "\n"))
		b.WriteString("\n")
	}
}

// failingMarkdown lists every failing test, folded.
func (g *Report) failingMarkdown(b *strings.Builder) {
	var failing []string
	for _, l := range g.Labs {
		for _, t := range l.Tests {
			if t.Status != gotest.Pass {
				failing = append(failing, fmt.Sprintf("- lab %s `%s`: %s", l.Number, t.Name, cmp.Or(t.Summary, string(t.Status))))
			}
		}
	}
	if len(failing) > 0 {
		b.WriteString("\n<details><summary>Failing tests</summary>\n\n")
		b.WriteString(strings.Join(failing, "\n"))
		b.WriteString("\n\n</details>\n")
	}
}
