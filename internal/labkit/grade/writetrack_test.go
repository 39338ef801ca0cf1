package grade

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/testdata/labtest"
	"github.com/production-go/gateway-lab/internal/labkit/write"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGradeReportsTheTestWritingTrackShippedAndHeldBack(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	l := labtest.FixtureLab(t, root)
	bank := labtest.HeldBackBank(t, "# Lesson: Add adds. It subtracts instead.\n# Must be killed by: TestAddAddsTwoNumbers\n")

	// Nothing written yet: scored 0 without a run.
	g, err := Run(t.Context(), Options{Root: root, MutantsDir: bank})
	require.NoError(t, err)
	require.NotNil(t, g.Labs[0].Write)
	assert.Equal(t, "no tests written", g.Labs[0].Write.Note)
	assert.Equal(t, "0/2 mutants killed (held back 0/1)", g.Labs[0].Write.Line())

	require.NoError(t, os.MkdirAll(filepath.Join(root, write.DirOf(l)), 0o755))
	labtest.Write(t, root, filepath.Join(write.DirOf(l), write.File), labtest.OnlyAdd)
	g, err = Run(t.Context(), Options{Root: root, MutantsDir: bank})
	require.NoError(t, err)
	w := g.Labs[0].Write
	require.NotNil(t, w)
	assert.Equal(t, "1/2 mutants killed (held back 1/1)", w.Line(), "TestAdd kills the held-back bug, not Sum's")
	assert.Equal(t, 1, w.Tests)
	assert.Equal(t, [2]int{1, 2}, [2]int{g.MutantsKilled, g.MutantsTotal})
	require.NotNil(t, w.Checklist, "the held-back patch names TestAddAddsTwoNumbers, which checklist items name")
	assert.Equal(t, w.Checklist.Total, w.Checklist.Kept, "every item linked to a killed mutant is kept")

	out := t.TempDir()
	require.NoError(t, g.WriteReports(out))
	var suites junitSuites
	raw, err := os.ReadFile(filepath.Join(out, "junit.xml"))
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(raw, &suites))
	require.Len(t, suites.Suites, 2, "one suite per track")
	assert.Equal(t, "write 01 01-add", suites.Suites[1].Name)
	assert.Equal(t, 1, suites.Suites[1].Failures, "the survivor is a failure")
	md, err := os.ReadFile(filepath.Join(out, "grade.md"))
	require.NoError(t, err)
	assert.Contains(t, string(md), "## Test-writing track: 1/2 mutants killed")
	assert.Contains(t, string(md), "| 01 | 1/2 | 0/1 | 1/1 | 1 |  |")
}
