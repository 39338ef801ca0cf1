package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/export"
	"github.com/production-go/gateway-lab/internal/testkit/redismark"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture copies labkit's tiny lab repository into a temporary directory.
func fixture(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	require.NoError(t, os.CopyFS(dst, os.DirFS("../../internal/labkit/testdata/fixture")))
	return dst
}

func labctl(t *testing.T, root string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(t.Context(), append([]string{"-C", root}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestHelpListsEveryCommand(t *testing.T) {
	t.Parallel()
	code, out, _ := labctl(t, ".", "--help")
	assert.Equal(t, 0, code)
	for _, c := range commands {
		assert.Contains(t, out, c.name)
	}
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			code, out, _ := labctl(t, fixture(t), c.name, "-h")
			assert.Equal(t, 0, code, "%s -h should succeed", c.name)
			assert.Contains(t, out, "usage: labctl "+c.name)
			if c.name == "export" {
				assert.Contains(t, out, export.TemplateContents(), "export -h says what each template holds")
			}
		})
	}
}

func TestUnknownCommandAndLabAreClearErrors(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	code, _, errOut := labctl(t, root, "frobnicate")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `unknown command "frobnicate"`)

	code, _, errOut = labctl(t, root, "test", "7")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "valid labs: 01 (01-add), 02 (02-later)")

	code, _, errOut = labctl(t, root, "test", "02")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "not built yet: it arrives with issue #9")

	code, _, errOut = labctl(t, root, "test")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "needs a lab number")
}

// addTwinTest writes the same extra test file into the fixture's lab and
// solution, as a real lab's identical test files.
func addTwinTest(t *testing.T, root, name, src string) {
	t.Helper()
	for _, dir := range []string{"labs/01-add", "solutions/01-add"} {
		require.NoError(t, os.WriteFile(filepath.Join(root, dir, name), []byte(src), 0o644))
	}
}

// solve puts the reference Add and Sum into the fixture's lab.
func solve(t *testing.T, root string) {
	t.Helper()
	sol, err := os.ReadFile(filepath.Join(root, "solutions/01-add/add.go"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "labs/01-add/add.go"), sol, 0o644))
}

func TestRedLabShowsFirstFailureAndItsHint(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	code, out, _ := labctl(t, root, "test", "01")
	assert.Equal(t, 1, code, "a red lab exits 1")
	assert.Contains(t, out, "✗ TestAddAddsTwoNumbers")
	assert.Contains(t, out, "lab 01: 0/2 passing — edit add.go in labs/01-add/")
	assert.Contains(t, out, "first failing test: TestAddAddsTwoNumbers")
	assert.Contains(t, out, "Add(2, 3) = 0, want 5")
	assert.Contains(t, out, "hint 1/2 — 1. Use the plus sign")
	assert.Contains(t, out, "Which operator adds two ints in Go?", "a red run shows the hint's nudge")
	assert.NotContains(t, out, "return a + b", "and not the answer")
	assert.NotContains(t, out, "Return the sum", "nor the approach")
}

func TestMakeHintRevealsTheApproachThenTheNearSolution(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	_, out, _ := labctl(t, root, "test", "01")
	require.Contains(t, out, "hint 1/2")
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "hint 1/2 — 1. Use the plus sign (approach, 2 of 3)", "the step the red run pointed at, one level more")
	assert.Contains(t, out, "Return the sum of both arguments.")
	assert.NotContains(t, out, "Which operator", "the approach alone: the nudge was shown already")
	assert.NotContains(t, out, "return a + b")
	assert.Contains(t, out, "more of this hint (near-solution): make hint LAB=01")
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "(near-solution, 3 of 3)")
	assert.Contains(t, out, "return a + b")
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "hint 2/2 — 2. Loop (nudge, 1 of 3)")

	solve(t, root)
	_, out, _ = labctl(t, root, "grade", "-out", "r")
	assert.Contains(t, out, "hints: 1 of 2 near-solutions opened", "grading says how many answers were read")
	md, err := os.ReadFile(filepath.Join(root, "r", "grade.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "near-solutions opened: 1 of 2")
}

func TestUnitFailureComesBeforeTheRealRedisTest(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	// Declared first (its file sorts first) and run first, as in lab 07.
	addTwinTest(t, root, "a_integration_test.go", "package add\n\nimport \"testing\"\n\n"+
		"func TestIntegrationAddOnRealRedis(t *testing.T) {\n\tif Add(1, 1) != 2 {\n\t\tt.Fatal(\"Add(1, 1) != 2 on real Redis\")\n\t}\n}\n")
	code, out, _ := labctl(t, root, "test", "01")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "first failing test: TestAddAddsTwoNumbers", "a unit test names the behaviour; the integration test fails whenever anything does")
	assert.Contains(t, out, "hint 1/2 — 1. Use the plus sign", "the hint matches the failure shown")
	unit := strings.Index(out, "✗ TestSumAddsEveryNumber")
	integration := strings.Index(out, "✗ TestIntegrationAddOnRealRedis")
	require.True(t, unit >= 0 && integration >= 0, out)
	assert.Less(t, unit, integration, "the real-Redis test's line comes last")
}

func TestRealRedisSkipReadsTheSameInTestProgressAndGrade(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	solve(t, root)
	reason := "no Redis server: REDIS_URL unset; no redis-server on PATH"
	skip := redismark.SkipMessage(reason, "REDIS_URL", "REDIS_INTEGRATION_REQUIRED")
	addTwinTest(t, root, "integration_test.go", fmt.Sprintf("package add\n\nimport \"testing\"\n\n"+
		"func TestIntegrationNeedsRedis(t *testing.T) { t.Skip(%q) }\n", skip))
	line := "TestIntegrationNeedsRedis skipped: " + strings.TrimPrefix(skip, redismark.Skipped)

	code, out, _ := labctl(t, root, "test", "01")
	assert.Equal(t, 0, code, "nothing failed: %s", out)
	assert.Contains(t, out, "lab 01: 2/3 pass")
	assert.Contains(t, out, line, "make lab-NN says which test skipped and why")

	_, out, _ = labctl(t, root, "progress")
	assert.Regexp(t, `01\s+Adding numbers\s+2/3\s+in progress, 1 skipped \(no Redis\)`, out)
	assert.Contains(t, out, "lab 01: "+line, "make progress says it in the same words")

	code, out, errOut := labctl(t, root, "grade", "-out", "r")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "grade: 2/3 tests")
	assert.Contains(t, out, "lab 01: "+line, "make grade says it in the same words")
	md, err := os.ReadFile(filepath.Join(root, "r", "grade.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "`TestIntegrationNeedsRedis`: skipped: "+reason)
}

func TestFirstFailureShowsOneAssertionAndCountsTheRest(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	addTwinTest(t, root, "many_test.go", "package add\n\nimport \"testing\"\n\n"+
		"func TestAddManyCases(t *testing.T) {\n\tfor i := range 12 {\n\t\tif got := Add(i, 1); got != i+1 {\n\t\t\tt.Errorf(\"Add(%d, 1) = %d, want %d\", i, got, i+1)\n\t\t}\n\t}\n}\n")
	_, out, _ := labctl(t, root, "test", "01", "-run", "TestAddManyCases")
	assert.Contains(t, out, "first failing test: TestAddManyCases\n    many_test.go:8: Add(0, 1) = 0, want 1\n")
	assert.NotContains(t, out, "Add(1, 1) = 0", "only the first assertion is shown")
	assert.Contains(t, out, "(11 more in this test: go test -run '^TestAddManyCases$' ./labs/01-add)")
}

func TestHintShownWithAFailureCountsAsItsNudge(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	_, out, _ := labctl(t, root, "test", "01")
	require.Contains(t, out, "hint 1/2")
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "(approach, 2 of 3)", "make hint goes on from the nudge make lab-01 showed, not back to it")
}

func TestCompilingNoticeWhenTheFirstTestIsSlowToStart(t *testing.T) {
	defer func(d time.Duration) { compileNotice = d }(compileNotice)
	compileNotice = time.Nanosecond // every build is slower than that
	_, out, _ := labctl(t, fixture(t), "test", "01")
	assert.Contains(t, out, "compiling lab 01… (the very first run also downloads and builds the dependencies: a minute or two)")
}

func TestWatchQuitsOnQWithoutEnter(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	in, keys := io.Pipe()
	var out, errb bytes.Buffer
	done := make(chan int)
	go func() { done <- run(t.Context(), []string{"-C", root, "watch", "01"}, in, &out, &errb) }()
	go func() {
		_, _ = keys.Write([]byte("\n")) // Enter: one run by hand
		_, _ = keys.Write([]byte("q"))  // q alone quits
	}()
	select {
	case code := <-done:
		assert.Equal(t, 0, code, errb.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("watch did not quit on q")
	}
	assert.Equal(t, 2, strings.Count(out.String(), "lab 01 — Adding numbers"), "the first run, then one for Enter")
	_, err := keys.Write([]byte("x"))
	assert.ErrorIs(t, err, io.ErrClosedPipe, "watch ended its reader: nothing reads the keys any more")
}

func TestGreenLabAndProgressShowDone(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	solve(t, root)

	code, out, _ := labctl(t, root, "test", "01")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "all 2 tests pass")

	code, out, _ = labctl(t, root, "progress")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `01\s+Adding numbers\s+2/2\s+✓ done`, out)
	assert.Regexp(t, `02\s+Not built yet\s+-\s+not built yet \(issue #9\)`, out)
}

func TestProgressShowsNotStartedAndNext(t *testing.T) {
	t.Parallel()
	code, out, _ := labctl(t, fixture(t), "list")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `01\s+Adding numbers\s+0/2\s+not started`, out)
	assert.Contains(t, out, "next: make lab-01")
}

func TestEditedTestsWarnLoudly(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	p := filepath.Join(root, "labs/01-add/add_test.go")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, append(b, []byte("\n// edited\n")...), 0o644))
	_, _, errOut := labctl(t, root, "test", "01")
	assert.Contains(t, errOut, "the test files were edited")
	assert.Contains(t, errOut, "git checkout -- labs/01-add/'*_test.go'")
}

func TestHintsAreProgressive(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	_, out, _ := labctl(t, root, "hint", "01")
	assert.Contains(t, out, "hint 1/2 — 1. Use the plus sign (nudge, 1 of 3)")
	assert.Contains(t, out, "more of this hint (approach): make hint LAB=01")
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "(approach, 2 of 3)")
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "(near-solution, 3 of 3)")
	assert.Contains(t, out, "next hint: make hint LAB=01")
	for range 3 {
		_, out, _ = labctl(t, root, "hint", "01")
		assert.Contains(t, out, "hint 2/2 — 2. Loop")
	}
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "you have seen all 2 hints")
	_, out, _ = labctl(t, root, "hint", "01", "1")
	assert.Contains(t, out, "hint 1/2")
	code, _, errOut := labctl(t, root, "hint", "01", "9")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "lab 01 has hints 1 to 2")
	_, out, _ = labctl(t, root, "hint", "01", "-reset")
	assert.Contains(t, out, "hints reset")
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "hint 1/2")
}

func TestVerifyReportsProblemsAndExitsNonZero(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "solutions/01-add/testdata/mutants/harmless.patch"),
		[]byte("--- a/add.go\n+++ b/add.go\n@@ -3,3 +3,3 @@\n \n-// Add returns a+b.\n+// Add returns the sum.\n func Add(a, b int) int { return a + b }\n"), 0o644))
	code, out, _ := labctl(t, root, "verify")
	assert.Equal(t, 1, code)
	assert.Regexp(t, `harmless\s+SURVIVED`, out)
	assert.Contains(t, out, "mutant harmless survived")
}

func TestGradeWritesReportsAndExitsZeroOnALowScore(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	code, out, errOut := labctl(t, root, "grade", "-out", "r")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "grade: 0/2 tests")
	assert.Contains(t, out, "  add: 0/2 checklist items", "grade says which checklist items the lab keeps")
	for _, f := range []string{"grade.json", "junit.xml", "grade.md"} {
		assert.FileExists(t, filepath.Join(root, "r", f))
	}
	code, _, errOut = labctl(t, root, "grade", "-tests", "/does/not/exist")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "is not a directory")
}

// TestMakeTargetsReachLabctl guards the Makefile's learner targets: a pattern
// rule on .PHONY targets is silently skipped by make ("Nothing to be done").
func TestMakeTargetsReachLabctl(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	for _, target := range []string{"lab-01", "lab-08"} {
		t.Run(target, func(t *testing.T) {
			out, err := exec.Command("make", "-C", "../..", "-n", target).CombinedOutput()
			require.NoError(t, err, string(out))
			assert.Contains(t, string(out), "labctl test "+strings.TrimPrefix(target, "lab-"), "make %s must run labctl", target)
		})
	}
	out, err := exec.Command("make", "-C", "../..", "-n", "run").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "./solutions/production_app")
}

func TestMakeHelpListsTheLabTargets(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	out, err := exec.Command("make", "-C", "../..", "--no-print-directory").CombinedOutput()
	require.NoError(t, err, string(out))
	c, err := catalog.Load("../..")
	require.NoError(t, err)
	for _, l := range c.Labs {
		assert.Regexp(t, `make lab-`+l.Number+`\s+`+regexp.QuoteMeta(l.Title), string(out), "make alone lists every lab target")
	}
	assert.Contains(t, string(out), "make progress")
	assert.NotContains(t, string(out), "$(", "no unexpanded make syntax in the help")
}

func TestLintRejectsATrackedBinary(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	script, err := filepath.Abs("../../scripts/check-no-binaries.sh")
	require.NoError(t, err)
	repo := t.TempDir()
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	git("init", "-q")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "main.go"), []byte("package main\n"), 0o644))
	git("add", "main.go")
	out, err := exec.Command(script, repo).CombinedOutput()
	require.NoError(t, err, "source only: clean\n%s", out)

	// A built tool, named like a source directory would be.
	require.NoError(t, os.WriteFile(filepath.Join(repo, "labctl"), []byte("\x7fELF\x02\x01\x01\x00 rest of a binary"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(repo, "tool.exe"), []byte("MZ\x90\x00 rest"), 0o755))
	git("add", "labctl", "tool.exe")
	out, err = exec.Command(script, repo).CombinedOutput()
	assert.Error(t, err, "a tracked binary must fail lint")
	assert.Contains(t, string(out), "tracked binary (ELF): labctl")
	assert.Contains(t, string(out), "tracked binary (PE): tool.exe")
}
