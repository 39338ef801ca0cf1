package write

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/testdata/labtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run the test-writing track on the fixture lab (01-add, one
// mutant: Sum skips the first number), with learner files written for each.

func writeTrack(t *testing.T, root string, tests string, opts Options) *Report {
	t.Helper()
	l := labtest.FixtureLab(t, root)
	if tests != "" {
		require.NoError(t, os.MkdirAll(filepath.Join(root, DirOf(l)), 0o755))
		labtest.Write(t, root, filepath.Join(DirOf(l), File), tests)
	}
	opts.Root, opts.Lab, opts.Fresh = root, l, true
	rep, err := Run(t.Context(), opts)
	require.NoError(t, err)
	return rep
}

func TestWriteSelfCheckKillsEveryShippedMutant(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), "", Options{SelfCheck: true})
	assert.Equal(t, 1, rep.Total)
	assert.Equal(t, 1, rep.Killed, "the reference's own tests must kill the shipped mutant: %+v", rep.Mutants)
	assert.Equal(t, "write 01: killed 1/1 mutants", rep.Line())
	assert.Equal(t, []string{"TestSumAddsEveryNumber"}, rep.Mutants[0].KilledBy)
}

func TestWriteScoresAnEmptyFileZeroWithoutRunningAnything(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	rep := writeTrack(t, root, "package add\n", Options{})
	assert.Equal(t, "write 01: killed 0/1 mutants", rep.Line())
	assert.Contains(t, rep.Problem, "no tests yet")
	assert.Equal(t, "no test counts yet", rep.Mutants[0].Survived)
	assert.Equal(t, "every number counts.", rep.Mutants[0].Nudge, "a survivor is named with its lesson's first sentence, never its patch")
}

func TestWriteKillsWithAnAssertionAndSaysByWhich(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), labtest.KillsSkipsFirst, Options{})
	require.Len(t, rep.Tests, 1)
	assert.True(t, rep.Tests[0].Counts)
	assert.Equal(t, 1, rep.Killed)
	assert.Equal(t, []string{"TestSumCountsTheFirstNumber"}, rep.Mutants[0].KilledBy)
	assert.Empty(t, rep.Mutants[0].Nudge, "a killed mutant needs no nudge")
}

// TestWriteSaysWhatASurvivorBreaksOnTheFirstRunToo: the run that ran the
// mutant (no verdict remembered yet) names what the survivor breaks, as
// the run that reads the remembered verdict does.
func TestWriteSaysWhatASurvivorBreaksOnTheFirstRunToo(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	const missesIt = "package add\n\nimport \"testing\"\n\nfunc TestSumOfZeroAndOne(t *testing.T) {\n\tif Sum(0, 1) != 1 {\n\t\tt.Error(\"Sum(0, 1) != 1\")\n\t}\n}\n"
	l := labtest.FixtureLab(t, root)
	require.NoError(t, os.MkdirAll(filepath.Join(root, DirOf(l)), 0o755))
	labtest.Write(t, root, filepath.Join(DirOf(l), File), missesIt)
	first, err := Run(t.Context(), Options{Root: root, Lab: l}) // remembering verdicts, as make write-NN does
	require.NoError(t, err)
	require.Len(t, first.Mutants, 1)
	assert.False(t, first.Mutants[0].Killed, "Sum(0, 1) cannot tell a skipped 0")
	assert.False(t, first.Mutants[0].Cached, "the first run ran the mutant")
	assert.Equal(t, "your tests ran the changed code and passed", first.Mutants[0].Survived)
	assert.Equal(t, "every number counts.", first.Mutants[0].Nudge, "the first run names what the survivor breaks")

	again, err := Run(t.Context(), Options{Root: root, Lab: l})
	require.NoError(t, err)
	require.Len(t, again.Mutants, 1)
	assert.True(t, again.Mutants[0].Cached, "the second run reads the remembered verdict")
	assert.Equal(t, first.Mutants[0].Nudge, again.Mutants[0].Nudge, "and says the same")
}

func TestWriteTestsThatOnlySleepOrPanicScoreZero(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), `package add

import (
	"testing"
	"time"
)

func TestSleeps(t *testing.T) { time.Sleep(400 * time.Millisecond) }

func TestPanics(t *testing.T) { panic("boom") }

func TestRunsAfterThePanic(t *testing.T) { _ = Sum(1, 2) }
`, Options{TestLimit: 200 * time.Millisecond})
	why := map[string]string{}
	for _, tt := range rep.Tests {
		why[tt.Name] = tt.Why
	}
	assert.Contains(t, why["TestSleeps"], "fake time", "a test slower than the limit on the correct code does not count")
	assert.Equal(t, "fails on the correct code", why["TestPanics"])
	assert.Empty(t, why["TestRunsAfterThePanic"], "a test the panic stopped is run again without it, and counts")
	assert.Equal(t, 0, rep.Killed, "asserting nothing kills nothing")
	assert.Equal(t, "your tests ran the changed code and passed", rep.Mutants[0].Survived)
}

func TestWriteDoesNotCountAKillByPanic(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), `package add

import "testing"

func TestSumPanicsOnTheBug(t *testing.T) {
	if Sum(5, 1) != 6 {
		panic("wrong sum")
	}
}
`, Options{})
	assert.Equal(t, 0, rep.Killed)
	require.Len(t, rep.Mutants[0].Discounted, 1)
	assert.Equal(t, "TestSumPanicsOnTheBug panicked: wrong sum", rep.Mutants[0].Discounted[0], "the panic is named, so the learner can see what blew up")
}

func TestWriteDoesNotCountAKillAfterTheTimeLimit(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), `package add

import (
	"testing"
	"time"
)

func TestSumSlowlyOnTheBug(t *testing.T) {
	if Sum(5, 1) != 6 {
		time.Sleep(400 * time.Millisecond)
		t.Error("wrong sum, found slowly")
	}
}
`, Options{TestLimit: 200 * time.Millisecond})
	assert.Equal(t, 0, rep.Killed)
	require.Len(t, rep.Mutants[0].Discounted, 1)
	assert.Contains(t, rep.Mutants[0].Discounted[0], "failed only after")
}

func TestWriteATestFailingOnTheReferenceCountsForNothingButTheOthersDo(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), labtest.KillsSkipsFirst+`
func TestWrongAboutTheReference(t *testing.T) {
	if Add(1, 1) != 3 {
		t.Error("expected 3")
	}
}
`, Options{})
	require.Len(t, rep.Tests, 2)
	assert.True(t, rep.Tests[0].Counts)
	assert.False(t, rep.Tests[1].Counts)
	assert.Equal(t, "fails on the correct code", rep.Tests[1].Why)
	assert.Equal(t, []string{"TestSumCountsTheFirstNumber"}, rep.Mutants[0].KilledBy, "the wrong test is not run on the mutants")
}

func TestWriteSkipsAMutantNoTestReaches(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), labtest.OnlyAdd, Options{})
	assert.Equal(t, "no test reaches the code it changes", rep.Mutants[0].Survived)
}

func TestWriteIgnoresEditsToTheReferenceCopies(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	l := labtest.FixtureLab(t, root)
	// A first run lays the reference next to the learner's file.
	writeTrack(t, root, labtest.KillsSkipsFirst, Options{})
	copyPath := filepath.Join(root, DirOf(l), "add.go")
	data, err := os.ReadFile(copyPath)
	require.NoError(t, err, "the reference is left on disk to read")
	// Make the copy skip the first number too: the test now fails on "the
	// reference", and would kill nothing if the copy counted.
	require.NoError(t, os.WriteFile(copyPath, []byte(strings.Replace(string(data), "range xs {", "range xs[1:] {", 1)), 0o644))
	labtest.Write(t, root, filepath.Join(DirOf(l), "extra.go"), "package add\n\nfunc Extra() {}\n")
	rep := writeTrack(t, root, "", Options{})
	require.Len(t, rep.Tests, 1)
	assert.True(t, rep.Tests[0].Counts, "the pristine reference is what the tests run on")
	assert.Equal(t, 1, rep.Killed)
}

func TestWriteScoresAHeldBackBankApart(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	bank := labtest.HeldBackBank(t, "# Lesson: Add adds. It subtracts instead.\n")
	rep := writeTrack(t, root, labtest.OnlyAdd, Options{MutantsDir: bank})
	assert.Equal(t, 2, rep.Total)
	assert.Equal(t, 1, rep.HeldBackTotal)
	assert.Equal(t, 1, rep.HeldBackKilled, "TestAdd kills the held-back bug")
	k, n := rep.Shipped()
	assert.Equal(t, [2]int{0, 1}, [2]int{k, n}, "and not the shipped one")
}

func TestWriteKitArchiveRoundTripsWithoutTheReferenceTests(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	c, err := catalog.Load(root)
	require.NoError(t, err)
	k, err := LoadKit(root, c, c.BuiltLabs()[0])
	require.NoError(t, err)
	require.NotEmpty(t, k.RefTests)
	var buf strings.Builder
	require.NoError(t, PackKits(&buf, []*Kit{k}))
	got, err := catalog.ReadKitArchive(strings.NewReader(buf.String()))
	require.NoError(t, err)
	back, err := kitFromEntries(k.Lab, got["01-add"])
	require.NoError(t, err)
	assert.Equal(t, k.Ref, back.Ref)
	assert.Empty(t, back.RefTests, "a template's kit never holds the reference's tests")
	require.Len(t, back.Mutants, 1)
	assert.Equal(t, k.Mutants[0], back.Mutants[0])
}

func TestWriteCountsDetectorsAndDiscountsCrashes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, output string
		counts       bool
	}{
		{"assertion", "    x_test.go:12: want 6, got 5\n", true},
		{"a test's own log of a recovered panic", "    x_test.go:12: the handler said:\n        panic: boom\n", true},
		{"race", "WARNING: DATA RACE\n    testing.go:1617: race detected during execution of test\n", true},
		{"synctest deadlock after an assertion", "    x_test.go:12: close: 2 calls still running\npanic: deadlock: main bubble goroutine has exited but blocked goroutines remain [recovered, repanicked]\n", true},
		{"panic", "panic: runtime error: index out of range [recovered, repanicked]\n", false},
		{"fatal error", "fatal error: concurrent map writes\n", false},
		{"binary timeout", "panic: test timed out after 2m0s\n", false},
	} {
		why := Discount(gotest.TestResult{Status: gotest.Fail, Output: c.output, Elapsed: time.Millisecond}, time.Second)
		assert.Equal(t, c.counts, why == "", "%s: Discount says %q", c.name, why)
	}
	assert.NotEmpty(t, Discount(gotest.TestResult{Status: gotest.Fail, Output: "    x_test.go:1: late\n", Elapsed: 2 * time.Second}, time.Second), "a failure after the limit does not count")
}

func TestWriteDoesNotCountAHangAndRunsTheTestsAfterItWithoutIt(t *testing.T) {
	t.Parallel()
	hang := `package add

import "testing"

func TestSumHangsOnTheBug(t *testing.T) {
	if Sum(5, 1) != 6 {
		select {} // until the test binary's timeout
	}
}
`
	rep := writeTrack(t, labtest.Fixture(t), hang, Options{TestLimit: 200 * time.Millisecond})
	assert.False(t, rep.Mutants[0].Killed, "a hang is not a kill")
	assert.Equal(t, []string{"TestSumHangsOnTheBug hung until the test binary timed out"}, rep.Mutants[0].Discounted)
	assert.Contains(t, rep.Mutants[0].Survived, "only by crashing or hanging", "a survivor caught by a hang must not read as 'passed'")

	rep = writeTrack(t, labtest.Fixture(t), hang+`
func TestSumCountsTheFirstNumber(t *testing.T) {
	if got := Sum(5, 1); got != 6 {
		t.Errorf("Sum(5, 1) = %d, want 6", got)
	}
}
`, Options{TestLimit: 200 * time.Millisecond})
	assert.Equal(t, []string{"TestSumCountsTheFirstNumber"}, rep.Mutants[0].KilledBy, "the test the hang stopped runs again without it")
	assert.Equal(t, ": runtime error: index out of range", panicMessage("x\npanic: runtime error: index out of range [recovered, repanicked]\n"))
}

func TestWriteCountsOnlyTestsThatPassTheWayMutantsRun(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), labtest.KillsSkipsFirst+`
func TestOnlyWithCoverage(t *testing.T) {
	if testing.CoverMode() == "" {
		t.Fatal("mutant runs have no coverage")
	}
}
`, Options{})
	require.Len(t, rep.Tests, 2)
	assert.True(t, rep.Tests[0].Counts)
	assert.False(t, rep.Tests[1].Counts, "a test that tells the reference run from a mutant run would kill every mutant")
	assert.Contains(t, rep.Tests[1].Why, "run the way mutants are")
	assert.Equal(t, []string{"TestSumCountsTheFirstNumber"}, rep.Mutants[0].KilledBy)
}

func TestWriteRefusesTestsThatEmbedFiles(t *testing.T) {
	t.Parallel()
	rep := writeTrack(t, labtest.Fixture(t), `package add

import (
	_ "embed"
	"testing"
)

//go:embed add.go
var source string

func TestSourceIsPristine(t *testing.T) {
	if len(source) == 0 {
		t.Fatal("empty")
	}
}
`, Options{})
	assert.Contains(t, rep.Problem, "embeds files")
	assert.Equal(t, 0, rep.Killed)
}

// verdicts is what a report says of each mutant, without the run's
// bookkeeping.
func verdicts(rep *Report) []MutantResult {
	out := make([]MutantResult, len(rep.Mutants))
	for i, m := range rep.Mutants {
		out[i] = MutantResult{Name: m.Name, Killed: m.Killed, KilledBy: m.KilledBy, Discounted: m.Discounted, Survived: m.Survived, Problem: m.Problem}
	}
	return out
}

func TestWriteScoresTheSameWithTheMutantsBuiltOnceOrOneByOne(t *testing.T) {
	t.Parallel()
	// In this order: the hang stops the binary before the others run.
	suite := `package add

import "testing"

func TestSumHangsOnTheBug(t *testing.T) {
	if Sum(5, 1) != 6 {
		select {} // stopped once past the limit
	}
}

func TestAddOnlyWithItsOwnNumbers(t *testing.T) {
	if Add(2, 2) != 4 {
		panic("Add(2, 2) != 4")
	}
}
` + strings.TrimPrefix(labtest.KillsSkipsFirst, "package add\n\nimport \"testing\"\n")
	opts := Options{TestLimit: 200 * time.Millisecond, MutantsDir: labtest.HeldBackBank(t, "# Lesson: Add adds.\n")}
	once := writeTrack(t, labtest.Fixture(t), suite, opts)
	opts.OneByOne = true
	alone := writeTrack(t, labtest.Fixture(t), suite, opts)
	assert.Equal(t, verdicts(alone), verdicts(once))
	require.Len(t, once.Mutants, 2)
	hung := "TestSumHangsOnTheBug hung until the test binary timed out"
	assert.Equal(t, MutantResult{Name: "skips-first", Killed: true, KilledBy: []string{"TestSumCountsTheFirstNumber"}, Discounted: []string{hung}}, verdicts(once)[0],
		"the tests after the hang ran again without it")
	assert.Equal(t, MutantResult{Name: "add-subtracts", Killed: true, KilledBy: []string{"TestSumCountsTheFirstNumber"}, Discounted: []string{hung, "TestAddOnlyWithItsOwnNumbers panicked: Add(2, 2) != 4"}}, verdicts(once)[1])
}

func TestWriteBuildsTheMutantsOneByOneWhenTheirSharedBuildFails(t *testing.T) {
	t.Parallel()
	bank := labtest.HeldBackBank(t, "# Lesson: Add adds.\n")
	require.NoError(t, os.WriteFile(filepath.Join(bank, "01-add", "does-not-compile.patch"), []byte(`# Lesson: a mutant with a type error.
--- a/add.go
+++ b/add.go
@@ -4,4 +4,4 @@
 package add
 
 // Add returns a+b.
-func Add(a, b int) int { return a + b }
+func Add(a, b int) int { return a + "b" }
`), 0o644))
	rep := writeTrack(t, labtest.Fixture(t), labtest.OnlyAdd+`
func TestSumCountsTheFirstNumber(t *testing.T) {
	if got := Sum(5, 1); got != 6 {
		t.Errorf("Sum(5, 1) = %d, want 6", got)
	}
}
`, Options{MutantsDir: bank})
	byName := map[string]MutantResult{}
	for _, m := range rep.Mutants {
		byName[m.Name] = m
	}
	assert.True(t, byName["add-subtracts"].Killed, "the others still run: %+v", byName["add-subtracts"])
	assert.True(t, byName["skips-first"].Killed, "%+v", byName["skips-first"])
	assert.Contains(t, byName["does-not-compile"].Problem, "does not compile", "the broken one is named, alone")
}

func TestWriteCountsAParallelKillBesideAHangBuiltEitherWay(t *testing.T) {
	t.Parallel()
	suite := `package add

import (
	"testing"
	"time"
)

func TestAddKills(t *testing.T) {
	t.Parallel()
	time.Sleep(100 * time.Millisecond)
	if Add(2, 2) != 4 {
		t.Error("Add(2, 2) != 4")
	}
}

func TestAddHangs(t *testing.T) {
	t.Parallel()
	if Add(1, 1) != 2 {
		select {}
	}
}
`
	opts := Options{TestLimit: 300 * time.Millisecond, MutantsDir: labtest.HeldBackBank(t, "# Lesson: Add adds.\n")}
	once := writeTrack(t, labtest.Fixture(t), suite, opts)
	opts.OneByOne = true
	alone := writeTrack(t, labtest.Fixture(t), suite, opts)
	for _, rep := range []*Report{once, alone} {
		require.Len(t, rep.Mutants, 2)
		m := rep.Mutants[1]
		assert.Equal(t, "add-subtracts", m.Name)
		assert.True(t, m.Killed, "the parallel test's assertion counts though its sibling hung (one by one: %v): %+v", rep == alone, m)
		assert.Equal(t, []string{"TestAddKills"}, m.KilledBy)
	}
}

func TestATimeoutIsTheTestsItStoppedNotTheLastToPrint(t *testing.T) {
	out := "--- FAIL: TestA (0.10s)\npanic: test timed out after 3s\n\trunning tests:\n\t\tTestB (3s)\n"
	assert.Empty(t, Discount(gotest.TestResult{Name: "TestA", Status: gotest.Fail, Output: out, Elapsed: 100 * time.Millisecond}, time.Second),
		"TestA had finished; the timeout stopped TestB")
	assert.NotEmpty(t, Discount(gotest.TestResult{Name: "TestB", Status: gotest.Fail, Output: out, Elapsed: 100 * time.Millisecond}, time.Second))
}
