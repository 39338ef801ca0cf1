package grade

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/testdata/labtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGradeRestoresTestsAndWritesOneEntryPerTest(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	// Half solved: Add works, Sum does not.
	b, err := os.ReadFile(filepath.Join(root, "labs/01-add/add.go"))
	require.NoError(t, err)
	labtest.Write(t, root, "labs/01-add/add.go", strings.Replace(string(b), "func Add(a, b int) int { return 0 }", "func Add(a, b int) int { return a + b }", 1))
	// The learner "fixes" the Sum test so it passes, and adds a test of their own.
	labtest.Write(t, root, "labs/01-add/add_test.go", "package add\n\nimport \"testing\"\n\nfunc TestAddAddsTwoNumbers(t *testing.T) {}\n\nfunc TestSumAddsEveryNumber(t *testing.T) {}\n")
	labtest.Write(t, root, "labs/01-add/mine_test.go", "package add\n\nimport \"testing\"\n\nfunc TestMine(t *testing.T) {}\n")
	// The instructor holds back one more test.
	held := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(held, "01-add"), 0o755))
	labtest.Write(t, held, "01-add/heldback_test.go", "package add\n\nimport \"testing\"\n\nfunc TestAddIsCommutative(t *testing.T) {\n\tif Add(1, 2) != Add(2, 1) {\n\t\tt.Fatal(\"not commutative\")\n\t}\n}\n")

	g, err := Run(t.Context(), Options{Root: root, TestsDir: held, SkipWrite: true})
	require.NoError(t, err)
	require.Len(t, g.Labs, 1)
	l := g.Labs[0]
	assert.True(t, l.Edited, "the edited tests should be reported")
	assert.Nil(t, l.Write, "the test-writing track was left out")
	names := map[string]GradedTest{}
	for _, tt := range l.Tests {
		names[tt.Name] = tt
	}
	assert.Len(t, names, 3, "one entry per pristine or held-back test, none for the learner's own: %v", names)
	assert.Equal(t, gotest.Pass, names["TestAddAddsTwoNumbers"].Status)
	assert.Equal(t, gotest.Fail, names["TestSumAddsEveryNumber"].Status, "the pristine test is restored, so the learner's edit earns nothing")
	assert.Contains(t, names["TestSumAddsEveryNumber"].Message, "want 10")
	assert.Equal(t, gotest.Pass, names["TestAddIsCommutative"].Status)
	assert.True(t, names["TestAddIsCommutative"].HeldBack)
	assert.Equal(t, 2, g.Passed)
	assert.Equal(t, 3, g.Total)

	out := t.TempDir()
	require.NoError(t, g.WriteReports(out))
	var js Report
	raw, err := os.ReadFile(filepath.Join(out, "grade.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &js))
	assert.Len(t, js.Labs[0].Tests, 3)

	var suites junitSuites
	raw, err = os.ReadFile(filepath.Join(out, "junit.xml"))
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(raw, &suites), "junit.xml must be valid XML")
	require.Len(t, suites.Suites, 1)
	assert.Equal(t, 3, suites.Tests)
	assert.Equal(t, 1, suites.Failures)
	assert.Len(t, suites.Suites[0].Cases, 3)

	md, err := os.ReadFile(filepath.Join(out, "grade.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "2/3 tests")
	assert.Contains(t, string(md), "tests were edited")
	assert.Contains(t, string(md), "- lab 01 add: 1/2 checklist items (✓ ADD-1, ✗ ADD-2)")

	require.NotNil(t, l.Checklist, "the fixture's checklist names lab 01's tests")
	assert.Equal(t, "add: 1/2 checklist items", l.ChecklistLine(), "ADD-2 needs TestSumAddsEveryNumber, which fails with the pristine test restored")
	assert.Equal(t, []string{"TestAddAddsTwoNumbers", "TestSumAddsEveryNumber"}, l.Checklist.Items[1].Tests)

	// The learner's tree is untouched: grading overlays, it does not copy.
	mine, err := os.ReadFile(filepath.Join(root, "labs/01-add/mine_test.go"))
	require.NoError(t, err)
	assert.Contains(t, string(mine), "TestMine")
}

func TestGradeScoresALabThatDoesNotCompile(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	labtest.Write(t, root, "labs/01-add/add.go", "package add\n\nfunc Add(a, b int) int { return a + }\n")
	g, err := Run(t.Context(), Options{Root: root})
	require.NoError(t, err, "a learner's compile error is a score of zero, not a tool error")
	assert.NotEmpty(t, g.Labs[0].Build)
	assert.Equal(t, 0, g.Passed)
	assert.Equal(t, 2, g.Total)
}
