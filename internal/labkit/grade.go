package labkit

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// GradeOptions configures Grade.
type GradeOptions struct {
	Root string
	Labs []Lab // nil: every built lab
	// TestsDir holds an instructor's held-back tests: TestsDir/NN-topic/*_test.go
	// (or TestsDir/NN/…) are added to that lab for the run.
	TestsDir string
	// PristineRef, when set, is a git revision whose solutions/ test files are
	// the pristine tests; otherwise the working tree's solutions/ are used.
	PristineRef string
	NoRace      bool
	Log         io.Writer
}

// GradedTest is one test's entry in a grade report.
type GradedTest struct {
	Name     string  `json:"name"`
	Status   Status  `json:"status"`
	Seconds  float64 `json:"seconds"`
	HeldBack bool    `json:"held_back,omitempty"`
	Message  string  `json:"message,omitempty"`
}

// GradedLab is one lab's entry in a grade report.
type GradedLab struct {
	Number string       `json:"lab"`
	Dir    string       `json:"dir"`
	Title  string       `json:"title"`
	Passed int          `json:"passed"`
	Total  int          `json:"total"`
	Edited bool         `json:"tests_were_edited"` // the learner's copy differed and was restored
	Build  string       `json:"build_error,omitempty"`
	Tests  []GradedTest `json:"tests"`
}

// Grade is a whole grade report.
type Grade struct {
	Generated time.Time   `json:"generated"`
	Passed    int         `json:"passed"`
	Total     int         `json:"total"`
	Labs      []GradedLab `json:"labs"`
}

// Score is the fraction of tests passed, 0 when there are none.
func (g Grade) Score() float64 {
	if g.Total == 0 {
		return 0
	}
	return float64(g.Passed) / float64(g.Total)
}

// RunGrade runs the learner's labs against the pristine tests (and any
// held-back ones) and scores every test. A failing learner is not an error.
func RunGrade(ctx context.Context, opts GradeOptions) (*Grade, error) {
	labs, err := labsOrBuilt(opts.Root, opts.Labs)
	if err != nil {
		return nil, err
	}
	ov, err := NewOverlay()
	if err != nil {
		return nil, err
	}
	defer ov.Close()

	g := &Grade{Generated: time.Now().UTC()}
	heldBack := map[string]map[string]bool{} // lab dir → test names
	expected := map[string][]string{}
	var pkgs []string
	for _, l := range labs {
		pristine, err := pristineTests(ctx, opts, l)
		if err != nil {
			return nil, err
		}
		extra, err := heldBackTests(opts.TestsDir, l)
		if err != nil {
			return nil, err
		}
		labDir := filepath.Join(opts.Root, l.LabDir())
		mine, err := ReadTestSources(labDir)
		if err != nil {
			return nil, err
		}
		gl := GradedLab{Number: l.Number, Dir: l.Dir, Title: l.Title, Edited: !diffSources(mine, pristine).Empty()}
		for name := range mine {
			if _, ok := pristine[name]; !ok {
				ov.Delete(filepath.Join(labDir, name))
			}
		}
		all := map[string][]byte{}
		for name, src := range pristine {
			all[name] = src
			if err := ov.Set(filepath.Join(labDir, name), src); err != nil {
				return nil, err
			}
		}
		for name, src := range extra {
			if _, clash := all[name]; clash {
				return nil, fmt.Errorf("held-back test file %s/%s has the name of a lab test file; rename it", l.Dir, name)
			}
			all[name] = src
			if err := ov.Set(filepath.Join(labDir, name), src); err != nil {
				return nil, err
			}
		}
		tests, err := TestFuncs(all)
		if err != nil {
			return nil, err
		}
		extraTests, err := TestFuncs(extra)
		if err != nil {
			return nil, err
		}
		heldBack[l.Dir] = map[string]bool{}
		for _, t := range extraTests {
			heldBack[l.Dir][t] = true
		}
		expected[l.Dir] = tests
		g.Labs = append(g.Labs, gl)
		pkgs = append(pkgs, "./"+filepath.ToSlash(l.LabDir()))
	}
	if len(pkgs) == 0 {
		return g, nil
	}
	overlay, err := ov.File()
	if err != nil {
		return nil, err
	}
	if opts.Log != nil {
		fmt.Fprintf(opts.Log, "grade: running %d labs with the pristine tests restored…\n", len(pkgs))
	}
	run, err := RunTests(ctx, RunOptions{Dir: opts.Root, Packages: pkgs, Race: !opts.NoRace, Count: 1, Overlay: overlay, Timeout: 5 * time.Minute})
	if err != nil {
		return nil, err
	}
	for i := range g.Labs {
		gl := &g.Labs[i]
		p := run.Package("labs/" + gl.Dir)
		if p != nil && p.BuildFailed {
			gl.Build = strings.TrimSpace(p.Output)
		}
		for _, name := range expected[gl.Dir] {
			res := p.Test(name)
			gt := GradedTest{Name: name, Status: res.Status, Seconds: res.Elapsed.Seconds(), HeldBack: heldBack[gl.Dir][name]}
			switch {
			case gl.Build != "":
				gt.Message = "the lab does not compile"
			case res.Status == Pass:
				gl.Passed++
			case res.Status == NotRun:
				gt.Message = "no result: an earlier panic or timeout ended the run\n" + LastLines(p.Output, 10)
			default:
				gt.Message = FailureMessage(res.Output)
			}
			gl.Tests = append(gl.Tests, gt)
		}
		gl.Total = len(gl.Tests)
		g.Passed += gl.Passed
		g.Total += gl.Total
	}
	return g, nil
}

func pristineTests(ctx context.Context, opts GradeOptions, l Lab) (map[string][]byte, error) {
	if opts.PristineRef == "" {
		return ReadTestSources(filepath.Join(opts.Root, l.SolutionDir()))
	}
	out, err := gitOutput(ctx, opts.Root, "ls-tree", "--name-only", opts.PristineRef, filepath.ToSlash(l.SolutionDir())+"/")
	if err != nil {
		return nil, err
	}
	tests := map[string][]byte{}
	for _, p := range strings.Fields(string(out)) {
		if !strings.HasSuffix(p, "_test.go") {
			continue
		}
		b, err := gitOutput(ctx, opts.Root, "show", opts.PristineRef+":"+p)
		if err != nil {
			return nil, err
		}
		tests[filepath.Base(p)] = b
	}
	return tests, nil
}

func heldBackTests(dir string, l Lab) (map[string][]byte, error) {
	if dir == "" {
		return map[string][]byte{}, nil
	}
	for _, d := range []string{l.Dir, l.Number} {
		p := filepath.Join(dir, d)
		if isDir(p) {
			return ReadTestSources(p)
		}
	}
	return map[string][]byte{}, nil
}

// WriteReports writes grade.json, junit.xml and grade.md into dir.
func (g *Grade) WriteReports(dir string) error {
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
func (g *Grade) JUnit() ([]byte, error) {
	s := junitSuites{Tests: g.Total}
	for _, l := range g.Labs {
		suite := junitSuite{Name: "lab " + l.Number + " " + l.Dir, Tests: l.Total}
		for _, t := range l.Tests {
			c := junitCase{Name: t.Name, Classname: "labs/" + l.Dir, Time: fmt.Sprintf("%.3f", t.Seconds)}
			switch t.Status {
			case Pass:
			case Skip:
				// A skipped exercise test earns nothing: it counts as a failure
				// here too, so a dashboard cannot show it as green.
				suite.Failures++
				c.Failure = &junitFailure{Message: "skipped", Body: t.Message}
			default:
				suite.Failures++
				c.Failure = &junitFailure{Message: firstLine(t.Message, string(t.Status)), Body: t.Message}
			}
			suite.Cases = append(suite.Cases, c)
		}
		s.Failures += suite.Failures
		s.Suites = append(s.Suites, suite)
	}
	b, err := xml.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}

// Markdown renders a short summary for a CI job page.
func (g *Grade) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Lab grade: %d/%d tests (%.0f%%)\n\n", g.Passed, g.Total, 100*g.Score())
	b.WriteString("| lab | title | passed | total | note |\n| --- | --- | ---: | ---: | --- |\n")
	for _, l := range g.Labs {
		var notes []string
		if l.Build != "" {
			notes = append(notes, "does not compile")
		}
		if l.Edited {
			notes = append(notes, "tests were edited; graded with the pristine ones")
		}
		if slices.ContainsFunc(l.Tests, func(t GradedTest) bool { return t.HeldBack }) {
			notes = append(notes, "includes held-back tests")
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %s |\n", l.Number, l.Title, l.Passed, l.Total, strings.Join(notes, "; "))
	}
	var failing []string
	for _, l := range g.Labs {
		for _, t := range l.Tests {
			if t.Status != Pass {
				failing = append(failing, fmt.Sprintf("- lab %s `%s`: %s", l.Number, t.Name, firstLine(t.Message, string(t.Status))))
			}
		}
	}
	if len(failing) > 0 {
		b.WriteString("\n<details><summary>Failing tests</summary>\n\n")
		b.WriteString(strings.Join(failing, "\n"))
		b.WriteString("\n\n</details>\n")
	}
	return b.String()
}

// firstLine picks the line of a failure that says the most: testify's
// "Messages:" (what the test author wrote for the learner), else its
// "Error:", else the first non-blank line.
func firstLine(s, fallback string) string {
	var first, errLine string
	for line := range strings.Lines(s) {
		t := strings.TrimSpace(line)
		switch {
		case t == "":
		case strings.HasPrefix(t, "Messages:"):
			return strings.TrimSpace(strings.TrimPrefix(t, "Messages:"))
		case strings.HasPrefix(t, "Error:") && errLine == "":
			errLine = strings.TrimSpace(strings.TrimPrefix(t, "Error:"))
		case first == "":
			first = t
		}
	}
	switch {
	case errLine != "":
		return errLine
	case first != "":
		return first
	}
	return fallback
}

// Summary is the one line of a test failure a person reads first.
func Summary(message string) string { return firstLine(message, "failed") }
