package grade

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/testdata/labtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommittedAutogradingMatchesTheCatalogue(t *testing.T) {
	t.Parallel()
	root, err := catalog.FindRoot(".")
	require.NoError(t, err)
	committed, err := os.ReadFile(filepath.Join(root, AutogradingFile))
	require.NoError(t, err, "%s is missing: run go run ./cmd/labctl classroom", AutogradingFile)
	doc, err := GenerateAutograding(ClassroomOptions{Root: root})
	require.NoError(t, err)
	want, err := doc.Marshal()
	require.NoError(t, err)
	require.Equal(t, string(want), string(committed), "%s is stale: run go run ./cmd/labctl classroom and commit it", AutogradingFile)

	// And it says what it should, read against the labs themselves rather
	// than the generator: every exercise test of every built lab exactly
	// once (a file behind a build tag, lab 07's prove_test.go, holds none),
	// its command running that one test, at least a point each.
	c, err := catalog.Load(root)
	require.NoError(t, err)
	var wantRuns []string
	for _, l := range c.BuiltLabs() {
		sources, err := catalog.ReadTestSources(filepath.Join(root, l.LabDir()))
		require.NoError(t, err)
		tests, err := catalog.ExerciseTestFuncs(sources)
		require.NoError(t, err)
		for _, name := range tests {
			wantRuns = append(wantRuns, "go run ./cmd/labctl classroom run "+l.Number+" "+name)
		}
	}
	var runs []string
	for _, tc := range doc.Tests {
		runs = append(runs, tc.Run)
		assert.Positive(t, tc.Points, "%s earns nothing", tc.Name)
		assert.Empty(t, tc.Output, "%s: the exit status decides, not the output", tc.Name)
	}
	assert.ElementsMatch(t, wantRuns, runs, "one graded command per lab test")
	assert.Equal(t, len(wantRuns), doc.Total(), "one point per test by default, as labctl grade counts")
}

func TestGenerateAutogradingSpreadsLabPointsOverTheTests(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	doc, err := GenerateAutograding(ClassroomOptions{Root: root})
	require.NoError(t, err)
	require.Len(t, doc.Tests, 2)
	assert.Equal(t, AutogradingTest{
		Name: "01-add/TestAddAddsTwoNumbers", Run: "go run ./cmd/labctl classroom run 01 TestAddAddsTwoNumbers",
		Comparison: "included", Timeout: 10, Points: 1,
	}, doc.Tests[0])
	assert.Equal(t, "01-add/TestSumAddsEveryNumber", doc.Tests[1].Name)

	doc, err = GenerateAutograding(ClassroomOptions{Root: root, LabPoints: 5, Timeout: 3})
	require.NoError(t, err)
	assert.Equal(t, []int{3, 2}, []int{doc.Tests[0].Points, doc.Tests[1].Points}, "5 points over 2 tests: the first takes the remainder")
	assert.Equal(t, 5, doc.Total())
	assert.Equal(t, 3, doc.Tests[1].Timeout)

	_, err = GenerateAutograding(ClassroomOptions{Root: root, LabPoints: 1})
	require.ErrorIs(t, err, catalog.ErrBadOption, "a lab worth fewer points than it has tests would grade some tests at zero")
}

func TestGradeOneRunsOnlyThatTestAgainstThePristineFiles(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	labtest.SolveAdd(t, root)
	// The learner "fixes" the Sum test so it passes.
	labtest.Write(t, root, "labs/01-add/add_test.go", "package add\n\nimport \"testing\"\n\nfunc TestAddAddsTwoNumbers(t *testing.T) {}\n\nfunc TestSumAddsEveryNumber(t *testing.T) {}\n")
	l := labtest.FixtureLab(t, root)
	opts := Options{Root: root}

	gl, err := RunOne(t.Context(), opts, l, "TestAddAddsTwoNumbers")
	require.NoError(t, err)
	require.Len(t, gl.Tests, 1, "exactly the named test is graded")
	assert.Equal(t, gotest.Pass, gl.Tests[0].Status)

	gl, err = RunOne(t.Context(), opts, l, "TestSumAddsEveryNumber")
	require.NoError(t, err)
	require.Len(t, gl.Tests, 1)
	assert.Equal(t, gotest.Fail, gl.Tests[0].Status, "the pristine test is restored, so the learner's edit earns nothing")
	assert.True(t, gl.Edited)

	_, err = RunOne(t.Context(), opts, l, "TestAdd")
	require.ErrorIs(t, err, ErrUnknownTest, "a prefix of a test name is not a test: -run would pass it vacuously")
}
