package gotest

import (
	"path/filepath"
	"slices"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/testkit/redismark"
)

// IntegrationPrefix starts the name of every test that needs a real Redis.
const IntegrationPrefix = "TestIntegration"

// ReportOrder returns tests in the order labctl reports them: as declared,
// with the real-Redis tests last, so the first failure a learner sees is a
// unit test that names one behaviour (the integration test fails whenever
// anything else does).
func ReportOrder(tests []string) []string {
	out := slices.Clone(tests)
	slices.SortStableFunc(out, func(a, b string) int {
		ai, bi := strings.HasPrefix(a, IntegrationPrefix), strings.HasPrefix(b, IntegrationPrefix)
		switch {
		case ai == bi:
			return 0
		case bi:
			return -1
		default:
			return 1
		}
	})
	return out
}

// LabTests lists the exercise tests in a lab's directory, in report order,
// and within it in the order of the lab's hints — its steps — when its
// hints file can be read: the first failure a learner is shown belongs to
// the earliest step not yet done, not to whichever test file sorts first.
func LabTests(root string, l catalog.Lab) ([]string, error) {
	sources, err := catalog.ReadTestSources(filepath.Join(root, l.LabDir()))
	if err != nil {
		return nil, err
	}
	tests, err := catalog.ExerciseTestFuncs(sources)
	if err != nil {
		return nil, err
	}
	if hints, herr := catalog.LoadHints(root, l); herr == nil {
		step := func(t string) int {
			if i := catalog.HintFor(hints, t); i >= 0 {
				return i
			}
			return len(hints) // a test no hint names: after the ones that are
		}
		slices.SortStableFunc(tests, func(a, b string) int { return step(a) - step(b) })
	}
	return ReportOrder(tests), nil
}

// Outcome is what one run says about a lab's tests. labctl test, progress
// and grade all read a run through it, so they agree on every count.
type Outcome struct {
	Tests       []string // report order
	Passed      []string
	Failed      []string // report order: the first is the one to show
	NotRun      []string // no outcome: the package did not build, or a panic ended the run
	NeedRedis   []string // skipped because there is no Redis here
	Skipped     []string // skipped for another reason
	RedisReason string   // why there is no Redis, in one line
	BuildFailed bool
	// PackageFailed: the package failed outside any test (TestMain, goleak, a panic).
	PackageFailed bool
}

// ReadOutcome sorts the given tests by their outcome in p (nil: nothing ran).
func ReadOutcome(p *PackageResult, tests []string) Outcome {
	o := Outcome{Tests: ReportOrder(tests)}
	if p != nil {
		o.BuildFailed = p.BuildFailed
		o.PackageFailed = p.Status == Fail && !p.BuildFailed
	}
	for _, name := range o.Tests {
		res := p.Test(name)
		switch res.Status {
		case Pass:
			o.Passed = append(o.Passed, name)
		case Fail:
			o.Failed = append(o.Failed, name)
		case Skip:
			if reason, ok := redismark.SkipReason(res.Output); ok {
				o.NeedRedis = append(o.NeedRedis, name)
				o.RedisReason = reason
				continue
			}
			o.Skipped = append(o.Skipped, name)
		default:
			o.NotRun = append(o.NotRun, name)
		}
	}
	if len(o.Failed) > 0 || len(o.NotRun) > 0 {
		o.PackageFailed = false // the tests say why
	}
	return o
}

// Done reports whether every test passed.
func (o Outcome) Done() bool {
	return len(o.Tests) > 0 && len(o.Passed) == len(o.Tests) && !o.PackageFailed && !o.BuildFailed
}

// RedisNote is the one line every command prints when real-Redis tests
// skipped: which, and why. Empty when none did.
func (o Outcome) RedisNote() string {
	if len(o.NeedRedis) == 0 {
		return ""
	}
	return strings.Join(o.NeedRedis, ", ") + " skipped: " + o.RedisReason
}
