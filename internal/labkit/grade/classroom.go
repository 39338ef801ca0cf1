package grade

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
)

// AutogradingFile is where `labctl classroom` writes the autograding
// configuration, relative to the root.
const AutogradingFile = ".github/classroom/autograding.json"

// ErrUnknownTest is returned when a test name is not one of a lab's tests.
var ErrUnknownTest = errors.New("unknown test")

// Autograding is the autograding.json document in GitHub Classroom's
// original schema: a list of commands, each passing on exit status 0 and
// worth its points. The schema outlived the service: the archived
// education/autograding action and the tools that replaced Classroom read it.
type Autograding struct {
	Tests []AutogradingTest `json:"tests"`
}

// AutogradingTest is one graded command. Timeout is in minutes.
type AutogradingTest struct {
	Name       string `json:"name"`
	Setup      string `json:"setup"`
	Run        string `json:"run"`
	Input      string `json:"input"`
	Output     string `json:"output"`
	Comparison string `json:"comparison"`
	Timeout    int    `json:"timeout"`
	Points     int    `json:"points"`
}

// ClassroomOptions configures GenerateAutograding.
type ClassroomOptions struct {
	Root string
	Labs []catalog.Lab // nil: every built lab
	// LabPoints, when positive, is what each lab is worth, spread over its
	// tests as evenly as whole points allow (the first tests in report order
	// take the remainder). Zero: one point per test, the count labctl grade
	// reports, so both graders agree on every score.
	LabPoints int
	// Timeout is each command's limit in minutes; 0 means 10. The first
	// command compiles the race-enabled standard library and dependencies.
	Timeout int
}

// GenerateAutograding lists one graded command per pristine test of every
// lab, in catalogue order and each lab's report order. Each command runs
// exactly that test under -race with the pristine tests restored
// (`labctl classroom run NN TestX`), so editing a test file earns nothing.
func GenerateAutograding(opts ClassroomOptions) (*Autograding, error) {
	labs, err := catalog.LabsOrBuilt(opts.Root, opts.Labs)
	if err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 10
	}
	doc := &Autograding{Tests: []AutogradingTest{}}
	for _, l := range labs {
		sources, err := catalog.PristineTests(opts.Root, l)
		if err != nil {
			return nil, err
		}
		tests, err := catalog.ExerciseTestFuncs(sources)
		if err != nil {
			return nil, err
		}
		tests = gotest.ReportOrder(tests)
		if len(tests) == 0 {
			return nil, fmt.Errorf("lab %s has no tests to grade", l.Number)
		}
		points, err := spreadPoints(l, len(tests), opts.LabPoints)
		if err != nil {
			return nil, err
		}
		for i, t := range tests {
			doc.Tests = append(doc.Tests, AutogradingTest{
				Name:       l.Dir + "/" + t,
				Run:        "go run ./cmd/labctl classroom run " + l.Number + " " + t,
				Comparison: "included",
				Timeout:    timeout,
				Points:     points[i],
			})
		}
	}
	return doc, nil
}

// spreadPoints gives n tests their share of a lab's points.
func spreadPoints(l catalog.Lab, n, labPoints int) ([]int, error) {
	points := make([]int, n)
	if labPoints <= 0 {
		for i := range points {
			points[i] = 1
		}
		return points, nil
	}
	if labPoints < n {
		return nil, fmt.Errorf("%w: lab %s has %d tests, so it must be worth at least %d points (every graded test earns at least one), not %d",
			catalog.ErrBadOption, l.Number, n, n, labPoints)
	}
	for i := range points {
		points[i] = labPoints / n
		if i < labPoints%n {
			points[i]++
		}
	}
	return points, nil
}

// Marshal renders the document as committed: two-space indent, a final newline.
func (a *Autograding) Marshal() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(a); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Total is the sum of every test's points.
func (a *Autograding) Total() int {
	n := 0
	for _, t := range a.Tests {
		n += t.Points
	}
	return n
}

// RunOne runs exactly one test of one lab the way Run runs them all:
// the pristine tests (and any held-back ones) in place of the learner's,
// learner-added test files hidden, -count=1, -race unless NoRace. A name
// that is not one of the lab's tests is an error, never a vacuous pass.
func RunOne(ctx context.Context, opts Options, l catalog.Lab, test string) (GradedLab, error) {
	if opts.TestsDir != "" && !labfs.IsDir(opts.TestsDir) {
		return GradedLab{}, fmt.Errorf("%w: --tests %s is not a directory", catalog.ErrBadOption, opts.TestsDir)
	}
	ov, err := gotest.NewOverlay()
	if err != nil {
		return GradedLab{}, err
	}
	defer ov.Close()
	pl, err := planGrade(ctx, opts, l, ov)
	if err != nil {
		return GradedLab{}, err
	}
	if !slices.Contains(pl.tests, test) {
		return GradedLab{}, fmt.Errorf("%w: lab %s has no test %s; its tests: %s", ErrUnknownTest, l.Number, test, strings.Join(pl.tests, ", "))
	}
	pl.tests = []string{test}
	overlay, err := ov.File()
	if err != nil {
		return GradedLab{}, err
	}
	run, err := gotest.RunTests(ctx, gotest.RunOptions{
		Dir: opts.Root, Packages: []string{"./" + filepath.ToSlash(l.LabDir())},
		Race: !opts.NoRace, Count: 1, Run: "^" + test + "$", Overlay: overlay, Timeout: 5 * time.Minute,
	})
	if err != nil {
		return GradedLab{}, err
	}
	return scoreLab(pl, run.Package("labs/"+l.Dir)), nil
}
