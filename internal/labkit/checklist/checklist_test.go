package checklist

import (
	"cmp"
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/testkit/redismark"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sampleChecklist = "# Checklist\n\nProse with `TestNotAnItem` is ignored.\n\n" +
	"## Admission\n\n" +
	"- **ADM-1** Rate limiting comes before a slot.\n" +
	"  Why: a refused request must not wait for capacity\n" +
	"  it will never use.\n" +
	"  Proof: `solutions/02-admission` `TestA`, `TestB`;\n" +
	"  and the gateway: `solutions/08-gateway` `TestC`\n" +
	"- **ADM-2** Queue wait is its own number\n" +
	"  Why: latency hides it.\n" +
	"  Proof: `solutions/02-admission` `TestB`\n" +
	"\n" +
	"```\n- **EX-1** inside a fence is an example, not an item\n```\n\n" +
	"- **SDK-1** The SDK works\n" +
	"  Why: users use it.\n" +
	"  Proof: `solutions/production_app` `-tags sdk` `TestSDK`\n"

func TestParseChecklistReadsIDsPromisesWhysAndProofs(t *testing.T) {
	c, err := Parse([]byte(sampleChecklist))
	require.NoError(t, err)
	require.Len(t, c.Items, 3, "items inside a code fence are examples")

	adm1 := c.Items[0]
	assert.Equal(t, "ADM-1", adm1.ID)
	assert.Equal(t, "Rate limiting comes before a slot", adm1.Promise, "the trailing period is dropped")
	assert.Equal(t, "a refused request must not wait for capacity it will never use.", adm1.Why, "Why continues on indented lines")
	assert.Equal(t, []Proof{
		{Package: "solutions/02-admission", Tests: []string{"TestA", "TestB"}},
		{Package: "solutions/08-gateway", Tests: []string{"TestC"}},
	}, adm1.Proofs, "a Proof continues on indented lines and names several packages")
	assert.Equal(t, 3, adm1.TestCount())
	assert.Equal(t, "sdk", c.Items[2].Proofs[0].Tags)

	assert.Equal(t, []PackageRun{
		{Package: "solutions/02-admission", Tests: []string{"TestA", "TestB"}},
		{Package: "solutions/08-gateway", Tests: []string{"TestC"}},
		{Package: "solutions/production_app", Tags: "sdk", Tests: []string{"TestSDK"}},
	}, c.Runs(), "one run per package, each test once")
	assert.Equal(t, "^(TestA|TestB)$", runRegexp([]string{"TestA", "TestB"}))
}

func TestParseChecklistRefusesMalformedItems(t *testing.T) {
	for _, tc := range []struct {
		description, text, want string
	}{
		{"no items at all", "# nothing\n", "no items"},
		{"an ID without a number", "- **ADM** x\n  Why: y\n  Proof: `a/b` `TestA`\n", "like ADM-3"},
		{"a duplicate ID", "- **A-1** x\n  Why: y\n  Proof: `a/b` `TestA`\n- **A-1** z\n  Why: y\n  Proof: `a/b` `TestB`\n", "already used on line 1"},
		{"no Why", "- **A-1** x\n  Proof: `a/b` `TestA`\n", "no Why"},
		{"no Proof", "- **A-1** x\n  Why: y\n", "no Proof"},
		{"a test before any package", "- **A-1** x\n  Why: y\n  Proof: `TestA` `a/b`\n", "before any package"},
		{"a package without tests", "- **A-1** x\n  Why: y\n  Proof: `a/b` `c/d` `TestA`\n", "a/b names no test"},
		{"an unknown code span", "- **A-1** x\n  Why: y\n  Proof: `a/b` `goleak`\n", "neither a package"},
		{"a stray indented line", "- **A-1** x\n  something\n  Why: y\n  Proof: `a/b` `TestA`\n", "must start with Why or Proof"},
	} {
		t.Run(tc.description, func(t *testing.T) {
			_, err := Parse([]byte(tc.text))
			require.ErrorIs(t, err, ErrMalformed)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// fakeRunner answers from a table: package → test → status, and records
// what it was asked to run.
type fakeRunner struct {
	results map[string]*gotest.PackageResult
	errs    map[string]error
	asked   []PackageRun
}

func (f *fakeRunner) run(_ context.Context, r PackageRun) (*gotest.PackageResult, error) {
	f.asked = append(f.asked, r)
	if err := f.errs[r.Package]; err != nil {
		return nil, err
	}
	return f.results[r.Package], nil
}

func pkgResult(status gotest.Status, tests map[string]gotest.Status) *gotest.PackageResult {
	p := &gotest.PackageResult{Status: status, Tests: map[string]*gotest.TestResult{}}
	for name, s := range tests {
		p.Tests[name] = &gotest.TestResult{Name: name, Status: s}
	}
	return p
}

func TestChecklistVerdictOnlyAPassCounts(t *testing.T) {
	c, err := Parse([]byte(sampleChecklist))
	require.NoError(t, err)
	skipped := pkgResult(gotest.Pass, map[string]gotest.Status{"TestA": gotest.Pass})
	skipped.Tests["TestB"] = &gotest.TestResult{Name: "TestB", Status: gotest.Skip,
		Output: "    x_test.go:9: " + redismark.SkipMessage("no Redis server: REDIS_URL unset", "REDIS_URL", "REDIS_INTEGRATION_REQUIRED") + "\n"}
	f := &fakeRunner{
		results: map[string]*gotest.PackageResult{
			"solutions/02-admission": skipped,
			"solutions/08-gateway":   pkgResult(gotest.Pass, map[string]gotest.Status{}), // TestC does not exist
		},
		errs: map[string]error{"solutions/production_app": errors.New("go test: exit status 1\nmore")},
	}
	var progressed []string
	v, err := Run(t.Context(), c, f.run, func(i, n int, r PackageRun) {
		progressed = append(progressed, r.Package)
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"solutions/02-admission", "solutions/08-gateway", "solutions/production_app"}, progressed)
	assert.Equal(t, "^(TestA|TestB)$", runRegexp(f.asked[0].Tests))

	require.Len(t, v, 3)
	assert.False(t, v[0].OK(), "a skipped test is never a pass")
	assert.Equal(t, "✗ ADM-1 Rate limiting comes before a slot (TestB skipped: no Redis (REDIS_URL unset) | TestC missing)", v[0].Line())
	assert.Equal(t, "✗ ADM-2 Queue wait is its own number (TestB skipped: no Redis (REDIS_URL unset))", v[1].Line())
	assert.Equal(t, "✗ SDK-1 The SDK works (solutions/production_app: go test: exit status 1)", v[2].Line(), "a package go test could not run fails its items")
}

func TestChecklistVerdictFailuresAndPackageFailures(t *testing.T) {
	c, err := Parse([]byte(sampleChecklist))
	require.NoError(t, err)

	leaky := pkgResult(gotest.Fail, map[string]gotest.Status{"TestA": gotest.Pass, "TestB": gotest.Pass})
	leaky.Output = "PASS\ngoleak: Errors on successful test run: found unexpected goroutines\nFAIL\n"
	panicked := pkgResult(gotest.Fail, map[string]gotest.Status{"TestC": gotest.NotRun})
	f := &fakeRunner{results: map[string]*gotest.PackageResult{
		"solutions/02-admission":   leaky,
		"solutions/08-gateway":     panicked,
		"solutions/production_app": {Status: gotest.Fail, BuildFailed: true, Tests: map[string]*gotest.TestResult{}},
	}}
	v, err := Run(t.Context(), c, f.run, nil)
	require.NoError(t, err)
	assert.Contains(t, v[0].Line(), "solutions/02-admission failed outside its tests", "tests that pass in a package that leaks keep nothing")
	assert.Contains(t, v[0].Line(), "TestC did not run", "a test cut off by a panic is not a pass")
	assert.Equal(t, "✗ SDK-1 The SDK works (solutions/production_app does not build)", v[2].Line())

	f.results = map[string]*gotest.PackageResult{
		"solutions/02-admission":   pkgResult(gotest.Fail, map[string]gotest.Status{"TestA": gotest.Fail, "TestB": gotest.Pass}),
		"solutions/08-gateway":     pkgResult(gotest.Pass, map[string]gotest.Status{"TestC": gotest.Pass}),
		"solutions/production_app": pkgResult(gotest.Pass, map[string]gotest.Status{"TestSDK": gotest.Pass}),
	}
	v, err = Run(t.Context(), c, f.run, nil)
	require.NoError(t, err)
	assert.Equal(t, "✗ ADM-1 Rate limiting comes before a slot (TestA failed)", v[0].Line(), "a failing test is named, and the package's own FAIL is not repeated")
	assert.Equal(t, "✓ ADM-2 Queue wait is its own number (1 test)", v[1].Line())
	assert.Equal(t, "✓ SDK-1 The SDK works (1 test)", v[2].Line())
}

func TestChecklistScoresALabByItsOwnTests(t *testing.T) {
	c, err := Parse([]byte(sampleChecklist))
	require.NoError(t, err)
	passed := map[string]bool{"TestA": true}
	lc := ScoreLab(c, "02-admission", func(t string) bool { return passed[t] })
	require.NotNil(t, lc)
	assert.Equal(t, 0, lc.Kept, "ADM-1 needs TestB too; ADM-2 is TestB")
	assert.Equal(t, 2, lc.Total)

	passed["TestB"] = true
	lc = ScoreLab(c, "02-admission", func(t string) bool { return passed[t] })
	assert.Equal(t, 2, lc.Kept, "the gateway's TestC belongs to another package: the lab keeps ADM-1 with its own tests")
	assert.Equal(t, []string{"TestA", "TestB"}, lc.Items[0].Tests)

	assert.Nil(t, ScoreLab(c, "05-drain", func(string) bool { return true }), "a lab no item names has no checklist score")
}

func TestTheRepositoryChecklistParses(t *testing.T) {
	c, err := Load("../../..")
	require.NoError(t, err)
	ids := map[string]bool{}
	declared := map[string][]string{}
	for _, it := range c.Items {
		ids[strings.Split(it.ID, "-")[0]] = true
		for _, p := range it.Proofs {
			if _, ok := declared[p.Package]; !ok {
				src, err := catalog.ReadTestSources(filepath.Join("../../..", p.Package))
				require.NoError(t, err, "%s names package %s", it.ID, p.Package)
				declared[p.Package], err = catalog.TestFuncs(src)
				require.NoError(t, err)
			}
			for _, name := range p.Tests {
				assert.Contains(t, declared[p.Package], name, "%s names %s in %s, which does not declare it", it.ID, name, p.Package)
			}
		}
	}
	for _, prefix := range []string{"CONC", "ADM", "TMO", "RETRY", "BRK", "DRAIN", "BRIDGE", "LIMIT", "OBS", "SEC", "DEP"} {
		assert.True(t, ids[prefix], "the checklist has %s items", prefix)
	}
}

func TestCompactIDsFoldsRunsOfThree(t *testing.T) {
	assert.Equal(t, "CONC-4, ADM-1, ADM-4…6, ADM-8, TMO-1, TMO-2, RETRY-2…4", compactIDs([]string{"CONC-4", "ADM-1", "ADM-4", "ADM-5", "ADM-6", "ADM-8", "TMO-1", "TMO-2", "RETRY-2", "RETRY-3", "RETRY-4"}))
	assert.Equal(t, "", compactIDs(nil))
}

// TestTheCourseMapSaysWhatTheCodeHas holds docs/README.md's table of labs
// to the code: each lab's test count is its pristine tests', and its
// checklist column is the items labctl grade reports for it.
func TestTheCourseMapSaysWhatTheCodeHas(t *testing.T) {
	const root = "../../.."
	doc, err := os.ReadFile(filepath.Join(root, "docs/README.md"))
	require.NoError(t, err)
	c, err := catalog.Load(root)
	require.NoError(t, err)
	cl, err := Load(root)
	require.NoError(t, err)
	row := regexp.MustCompile(`^\| (\d\d) \| \[[a-z]+\]\([^)]+\) \((\d+)(?: tests)?\) \|.*\| ([^|]+) \|$`)
	seen := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		l, err := c.Find(m[1])
		require.NoError(t, err)
		seen[l.Number] = true
		src, err := catalog.PristineTests(root, l)
		require.NoError(t, err)
		tests, err := catalog.ExerciseTestFuncs(src)
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(len(tests)), m[2], "lab %s's test count in docs/README.md", l.Number)
		var ids []string
		for _, it := range cl.ForLab(l.Dir) {
			ids = append(ids, it.ID)
		}
		want := cmp.Or(compactIDs(ids), "—")
		assert.Equal(t, want, strings.TrimSpace(m[3]), "lab %s's checklist column in docs/README.md is what labctl grade reports", l.Number)
	}
	for _, l := range c.BuiltLabs() {
		assert.True(t, seen[l.Number], "docs/README.md has a row for lab %s", l.Number)
	}

	// "Twelve labs": wherever the course counts its labs in words.
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen"}
	count := regexp.MustCompile(`(?i)\b(` + strings.Join(words, "|") + `)\b (?:numbered )?labs\b`)
	for _, doc := range []string{"README.md", "docs/README.md", "docs/instructor-guide.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		require.NoError(t, err)
		for _, m := range count.FindAllStringSubmatch(string(b), -1) {
			assert.Equal(t, len(c.BuiltLabs()), slices.Index(words, strings.ToLower(m[1])), "%s says %q", doc, m[0])
		}
	}
}
