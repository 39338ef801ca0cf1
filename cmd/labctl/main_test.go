package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
	code, out, _ := labctl(t, ".", "--help")
	assert.Equal(t, 0, code)
	for _, c := range commands {
		assert.Contains(t, out, c.name)
	}
	for _, c := range commands {
		code, out, _ := labctl(t, fixture(t), c.name, "-h")
		assert.Equal(t, 0, code, "%s -h should succeed", c.name)
		assert.Contains(t, out, "usage: labctl "+c.name)
	}
}

func TestUnknownCommandAndLabAreClearErrors(t *testing.T) {
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

func TestRedLabShowsFirstFailureAndItsHint(t *testing.T) {
	root := fixture(t)
	code, out, _ := labctl(t, root, "test", "01", "-no-race")
	assert.Equal(t, 1, code, "a red lab exits 1")
	assert.Contains(t, out, "✗ TestAddAddsTwoNumbers")
	assert.Contains(t, out, "lab 01: 0/2 passing")
	assert.Contains(t, out, "first failing test: TestAddAddsTwoNumbers")
	assert.Contains(t, out, "Add(2, 3) = 0, want 5")
	assert.Contains(t, out, "hint 1/2 — 1. Use the plus sign")
}

func TestGreenLabAndProgressShowDone(t *testing.T) {
	root := fixture(t)
	sol, err := os.ReadFile(filepath.Join(root, "solutions/01-add/add.go"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(root, "labs/01-add/add.go"), sol, 0o644))

	code, out, _ := labctl(t, root, "test", "01", "-no-race")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "all 2 tests pass")

	code, out, _ = labctl(t, root, "progress")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `01\s+Adding numbers\s+2/2\s+✓ done`, out)
	assert.Regexp(t, `02\s+Not built yet\s+-\s+not built yet \(issue #9\)`, out)
}

func TestProgressShowsNotStartedAndNext(t *testing.T) {
	code, out, _ := labctl(t, fixture(t), "list")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `01\s+Adding numbers\s+0/2\s+not started`, out)
	assert.Contains(t, out, "next: make lab-01")
}

func TestEditedTestsWarnLoudly(t *testing.T) {
	root := fixture(t)
	p := filepath.Join(root, "labs/01-add/add_test.go")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, append(b, []byte("\n// edited\n")...), 0o644))
	_, _, errOut := labctl(t, root, "test", "01", "-no-race")
	assert.Contains(t, errOut, "the test files were edited")
	assert.Contains(t, errOut, "git checkout -- labs/01-add/'*_test.go'")
}

func TestHintsAreProgressive(t *testing.T) {
	root := fixture(t)
	_, out, _ := labctl(t, root, "hint", "01")
	assert.Contains(t, out, "hint 1/2 — 1. Use the plus sign")
	assert.Contains(t, out, "next hint: make hint LAB=01")
	_, out, _ = labctl(t, root, "hint", "01")
	assert.Contains(t, out, "hint 2/2 — 2. Loop")
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
	root := fixture(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "solutions/01-add/testdata/mutants/harmless.patch"),
		[]byte("--- a/add.go\n+++ b/add.go\n@@ -3,3 +3,3 @@\n \n-// Add returns a+b.\n+// Add returns the sum.\n func Add(a, b int) int { return a + b }\n"), 0o644))
	code, out, _ := labctl(t, root, "verify", "-no-race")
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "harmless                                     SURVIVED")
	assert.Contains(t, out, "mutant harmless survived")
}

func TestGradeWritesReportsAndExitsZeroOnALowScore(t *testing.T) {
	root := fixture(t)
	code, out, errOut := labctl(t, root, "grade", "-no-race", "-out", "r")
	assert.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "grade: 0/2 tests")
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
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	for _, target := range []string{"lab-01", "lab-08"} {
		out, err := exec.Command("make", "-C", "../..", "-n", target).CombinedOutput()
		require.NoError(t, err, string(out))
		assert.Contains(t, string(out), "labctl test "+strings.TrimPrefix(target, "lab-"), "make %s must run labctl", target)
	}
	out, err := exec.Command("make", "-C", "../..", "-n", "run").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "./solutions/production_app")
}
