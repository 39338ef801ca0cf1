package verify

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/testdata/labtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func verifyFixture(t *testing.T, root string) LabReport {
	t.Helper()
	return verifyWith(t, Options{Root: root, Fresh: true})
}

// verifyFast checks what needs no solution or mutant run.
func verifyFast(t *testing.T, root string) LabReport {
	t.Helper()
	return verifyWith(t, Options{Root: root, Fresh: true, Fast: true})
}

// checkOnly runs only the file checks (twins, hints) on the fixture's lab.
func checkOnly(t *testing.T, root string) LabReport {
	t.Helper()
	r := LabReport{Lab: labtest.FixtureLab(t, root)}
	v := &verifier{Options: Options{Root: root}}
	require.NoError(t, v.checkFiles(&r))
	return r
}

// mutantsOnly runs only the kill matrix of the fixture's lab.
func mutantsOnly(t *testing.T, root string) LabReport {
	t.Helper()
	reports := []LabReport{{Lab: labtest.FixtureLab(t, root)}}
	v := &verifier{Options: Options{Root: root, Fresh: true}}
	require.NoError(t, v.checkMutants(t.Context(), reports))
	return reports[0]
}

func verifyWith(t *testing.T, opts Options) LabReport {
	t.Helper()
	reports, err := Run(t.Context(), opts)
	require.NoError(t, err)
	require.Len(t, reports, 1, "the fixture has one built lab")
	return reports[0]
}

func problems(r LabReport) string { return strings.Join(r.Problems, "\n") }

func TestVerifyAcceptsAConformingLab(t *testing.T) {
	t.Parallel()
	r := verifyFixture(t, labtest.Fixture(t))
	assert.True(t, r.OK(), problems(r))
	assert.Equal(t, []string{"TestAddAddsTwoNumbers", "TestSumAddsEveryNumber"}, r.Tests)
	assert.Equal(t, 2, r.StubsRed)
	assert.Equal(t, 2, r.Green)
	require.Len(t, r.Mutants, 1)
	assert.True(t, r.Mutants[0].Killed)
	assert.Equal(t, []string{"TestSumAddsEveryNumber"}, r.Mutants[0].KilledBy)
}

func TestVerifyJudgesMutantsAlikeBuiltOnceOrOneByOne(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	// A second mutant, so the shared build holds two: Add subtracts.
	labtest.Write(t, root, "solutions/01-add/testdata/mutants/add-subtracts.patch", `# Lesson: Add adds.
--- a/add.go
+++ b/add.go
@@ -4,4 +4,4 @@
 package add
 
 // Add returns a+b.
-func Add(a, b int) int { return a + b }
+func Add(a, b int) int { return a - b }
`)
	reports := []LabReport{{Lab: labtest.FixtureLab(t, root)}, {Lab: labtest.FixtureLab(t, root)}}
	for i, oneByOne := range []bool{false, true} {
		v := &verifier{Options: Options{Root: root, Fresh: true, OneByOne: oneByOne}}
		require.NoError(t, v.checkMutants(t.Context(), reports[i:i+1]))
		if !oneByOne {
			b := v.schemas["01-add"].build
			require.NotNil(t, b, "both mutants fold into one build")
			for _, name := range []string{"add-subtracts", "skips-first"} {
				_, folded := b.ID(name)
				assert.True(t, folded, "%s is in the shared build", name)
			}
			assert.True(t, b.Built(true), "and it built, with -race")
		}
	}
	require.Len(t, reports[0].Mutants, 2)
	assert.Equal(t, reports[1].Mutants, reports[0].Mutants)
	assert.Equal(t, []string{"TestAddAddsTwoNumbers", "TestSumAddsEveryNumber"}, reports[0].Mutants[0].KilledBy, "add-subtracts")
	assert.Equal(t, []string{"TestSumAddsEveryNumber"}, reports[0].Mutants[1].KilledBy, "skips-first")
}

func TestVerifyReusesVerdictsUntilTheirInputsChange(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	verify := func(opts Options) (LabReport, string) {
		t.Helper()
		var log strings.Builder
		opts.Root, opts.Log = root, &log
		reports, err := Run(t.Context(), opts)
		require.NoError(t, err)
		return reports[0], log.String()
	}
	r, log := verify(Options{})
	require.True(t, r.OK(), problems(r))
	require.Len(t, r.Mutants, 1)
	assert.False(t, r.Mutants[0].Cached, "the first run has nothing cached")
	assert.NotContains(t, log, "cached")
	assert.Contains(t, log, "verify: [1/1] lab 01 skips-first: killed by TestSumAddsEveryNumber", "each mutant gets a progress line")

	r, log = verify(Options{})
	require.True(t, r.OK(), problems(r))
	assert.True(t, r.Mutants[0].Cached, "nothing changed: the mutant's verdict is reused")
	assert.Equal(t, []string{"TestSumAddsEveryNumber"}, r.Mutants[0].KilledBy, "a cached verdict says who killed the mutant")
	assert.Contains(t, log, "verify: stubs: every lab's verdict is cached")
	assert.Contains(t, log, "verify: black-box: every lab's verdict is cached")
	assert.Equal(t, 2, r.StubsRed, "a cached stub verdict still counts its red tests")

	r, log = verify(Options{Fresh: true, Fast: true})
	assert.NotContains(t, log, "cached", "-fresh runs everything again")

	b, err := os.ReadFile(filepath.Join(root, "labs/01-add/add.go"))
	require.NoError(t, err)
	labtest.Write(t, root, "labs/01-add/add.go", strings.Replace(string(b), "func Add(a, b int) int { return 0 }", "func Add(a, b int) int { return a + b }", 1))
	r, _ = verify(Options{Fast: true})
	assert.Contains(t, problems(r), "stub: TestAddAddsTwoNumbers is pass on the stub", "the stub changed: its cached verdict no longer applies")
	labtest.Write(t, root, "labs/01-add/add.go", string(b))

	b, err = os.ReadFile(filepath.Join(root, "solutions/01-add/add.go"))
	require.NoError(t, err)
	labtest.Write(t, root, "solutions/01-add/add.go", string(b)+"\n// an edit to the solution\n")
	r, _ = verify(Options{})
	assert.False(t, r.Mutants[0].Cached, "the solution changed: the mutant runs again")
}

func TestVerifyRejectsAnEditedLabTest(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	p := filepath.Join(root, "labs/01-add/add_test.go")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	labtest.Write(t, root, "labs/01-add/add_test.go", strings.Replace(string(b), "want 5", "want five", 1))
	r := checkOnly(t, root)
	assert.False(t, r.Identical)
	assert.Contains(t, problems(r), "must be byte-identical: differ: add_test.go")
}

func TestVerifyRejectsAStubThatPassesATest(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	b, err := os.ReadFile(filepath.Join(root, "labs/01-add/add.go"))
	require.NoError(t, err)
	labtest.Write(t, root, "labs/01-add/add.go", strings.Replace(string(b), "func Add(a, b int) int { return 0 }", "func Add(a, b int) int { return a + b }", 1))
	r := verifyFast(t, root)
	assert.Equal(t, 1, r.StubsRed)
	assert.Contains(t, problems(r), "stub: TestAddAddsTwoNumbers is pass on the stub")
}

func TestVerifyRejectsASurvivingMutant(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	labtest.Write(t, root, "solutions/01-add/testdata/mutants/harmless.patch", "# Changes a comment only: no test can catch it.\n\n--- a/add.go\n+++ b/add.go\n@@ -3,3 +3,3 @@\n \n-// Add returns a+b.\n+// Add returns the sum of a and b.\n func Add(a, b int) int { return a + b }\n")
	r := mutantsOnly(t, root)
	assert.Contains(t, problems(r), "mutant harmless survived")
	assert.Equal(t, 1, r.Killed(), "the good mutant is still killed")
}

func TestVerifyRejectsAMutantThatDoesNotCompile(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	labtest.Write(t, root, "solutions/01-add/testdata/mutants/broken.patch", "--- a/add.go\n+++ b/add.go\n@@ -5,1 +5,1 @@\n-func Add(a, b int) int { return a + b }\n+func Add(a, b int) int { return a + }\n")
	r := mutantsOnly(t, root)
	assert.Contains(t, problems(r), "mutant broken: does not compile", "a build failure is not a kill")
}

func TestVerifyRejectsTestsThatUseUnexportedNames(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	for _, dir := range []string{"labs/01-add", "solutions/01-add"} {
		b, err := os.ReadFile(filepath.Join(root, dir, "add.go"))
		require.NoError(t, err)
		labtest.Write(t, root, dir+"/add.go", string(b)+"\nfunc double(x int) int { return 2 * x }\n")
		labtest.Write(t, root, dir+"/peek_test.go", "package add\n\nimport \"testing\"\n\nfunc TestPeeksInside(t *testing.T) {\n\tif double(2) != 4 {\n\t\tt.Fatal(\"double\")\n\t}\n\tt.Fatal(\"always red\")\n}\n")
	}
	r := verifyFast(t, root)
	assert.False(t, r.APIClean)
	assert.Contains(t, problems(r), "peek_test.go:6: uses unexported double")
}

func TestVerifyChecksHintsNameRealTests(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	labtest.Write(t, root, "labs/01-add/HINTS.md", labtest.HintSection("1. Typo", "TestAddAddsTwoNumbrs"))
	r := checkOnly(t, root)
	assert.Contains(t, problems(r), "names TestAddAddsTwoNumbrs, which is not a test")
}

func TestVerifyStubsRefUsesPristineStubsFromGit(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root := labtest.Fixture(t)
	git := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	git("init", "-q")
	git("add", "-A")
	git("commit", "-qm", "pristine")
	// The learner solves the lab: the working tree's stub now passes.
	solved, err := os.ReadFile(filepath.Join(root, "solutions/01-add/add.go"))
	require.NoError(t, err)
	labtest.Write(t, root, "labs/01-add/add.go", string(solved))
	reports, err := Run(t.Context(), Options{Root: root, Fresh: true, Fast: true, StubsRef: "HEAD"})
	require.NoError(t, err)
	assert.True(t, reports[0].OK(), "with --stubs-ref a solved fork still verifies: %s", problems(reports[0]))
	assert.Equal(t, 2, reports[0].StubsRed)
}

func TestVerifyChecksEveryTestHasAHint(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	labtest.Write(t, root, "labs/01-add/HINTS.md", labtest.HintSection("1. Use the plus sign", "TestAddAddsTwoNumbers"))
	r := checkOnly(t, root)
	assert.Contains(t, problems(r), "no hint names TestSumAddsEveryNumber", "make lab-NN would show an unrelated hint when this test fails first")
}

func TestVerifyRejectsAReferenceThatExportsMoreThanItsStub(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	b, err := os.ReadFile(filepath.Join(root, "solutions/01-add/add.go"))
	require.NoError(t, err)
	labtest.Write(t, root, "solutions/01-add/add.go", string(b)+"\n// Twice is a product extension.\nfunc Twice(a int) int { return Add(a, a) }\n")
	r := checkOnly(t, root)
	assert.Contains(t, problems(r), "solutions/01-add exports func Twice(int) (int), which the stub does not")

	root = labtest.Fixture(t)
	b, err = os.ReadFile(filepath.Join(root, "solutions/01-add/add.go"))
	require.NoError(t, err)
	labtest.Write(t, root, "solutions/01-add/add.go", strings.Replace(string(b), "func Add(a, b int) int", "func Add(a, b int64) int", 1))
	r = checkOnly(t, root)
	assert.Contains(t, problems(r), "the stub exports func Add(int, int) (int), which solutions/01-add does not", "a signature that differs is a different API")
	assert.Contains(t, problems(r), "solutions/01-add exports func Add(int64, int64) (int)")
}
