package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExportedTemplateGradesWhatTheLearnerSolved exports the real course,
// solves lab 01 in the template from the reference, and grades it there.
// It compiles every lab in the template under -race: about 20–30 s on two
// cores with a warm module and build cache, so -short skips it.
func TestExportedTemplateGradesWhatTheLearnerSolved(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("exports a template and compiles every lab in it under -race (~20–30 s)")
	}
	root, err := labkit.FindRoot(".")
	require.NoError(t, err)
	dst := filepath.Join(t.TempDir(), "template")
	code, out, errOut := labctl(t, root, "export", dst)
	require.Equal(t, 0, code, "labctl export failed:\n%s%s", out, errOut)

	// Nothing of the answers travels.
	var leaked []string
	require.NoError(t, filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, dst))
		segs := strings.Split(rel, "/")
		if slices.Contains(segs, "solutions") || slices.Contains(segs, "mutants") || strings.HasSuffix(rel, ".patch") {
			leaked = append(leaked, rel)
		}
		return nil
	}))
	assert.Empty(t, leaked, "a learner template must not hold solutions or mutants")
	assert.Empty(t, brokenLinks(t, dst), "every relative link in the template's Markdown resolves there")

	// The module stands on its own: tidy changes nothing, and the
	// solutions' dependencies are gone.
	goIn(t, dst, "mod", "tidy", "-diff")
	mod, err := os.ReadFile(filepath.Join(dst, "go.mod"))
	require.NoError(t, err)
	assert.NotContains(t, string(mod), "openai-go", "only solutions/ import the OpenAI SDK; the template's go.mod should not require it")
	assert.NotContains(t, string(mod), "\ntool ", "the maintainers' tools stay upstream")

	// The same tests give the same autograding document.
	upstream, err := os.ReadFile(filepath.Join(root, labkit.AutogradingFile))
	require.NoError(t, err)
	exported, err := os.ReadFile(filepath.Join(dst, labkit.AutogradingFile))
	require.NoError(t, err)
	assert.Equal(t, string(upstream), string(exported), "the template's autograding.json should match the course's")

	// The learner solves lab 01 with the reference code, and adds a test
	// of their own to a shipped test file.
	sol := filepath.Join(root, "solutions/01-concurrency")
	entries, err := os.ReadDir(sol)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			b, err := os.ReadFile(filepath.Join(sol, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dst, "labs/01-concurrency", e.Name()), b, 0o644))
		}
	}
	testFile := filepath.Join(dst, "labs/01-concurrency/concurrency_test.go")
	b, err := os.ReadFile(testFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(testFile, append(b, "\nfunc TestMineAlwaysPasses(t *testing.T) {}\n"...), 0o644))

	// make lab-01's command: green, with the edited-tests banner.
	code, out, errOut = labctl(t, dst, "test", "01")
	assert.Equal(t, 0, code, "lab 01 holds the reference code and should pass:\n%s", out)
	assert.Contains(t, errOut, "lab 01: the test files were edited", "the banner compares against the archived tests")

	// One graded test the way autograding.json runs it.
	code, out, _ = labctl(t, dst, "classroom", "run", "01", "TestFanOutNeverExceedsLimit")
	assert.Equal(t, 0, code, "classroom run should pass a solved test:\n%s", out)

	// And the grade: lab 01 full marks on the pristine tests, the rest not yet.
	reports := t.TempDir()
	code, out, errOut = labctl(t, dst, "grade", "--out", reports)
	require.Equal(t, 0, code, "labctl grade failed:\n%s%s", out, errOut)
	g := readGrade(t, reports)
	cat, err := labkit.LoadCatalog(root)
	require.NoError(t, err)
	require.Len(t, g.Labs, len(cat.Labs), "every lab in the catalogue is graded")
	lab01 := g.Labs[0]
	assert.Equal(t, "01", lab01.Number)
	assert.Equal(t, lab01.Total, lab01.Passed, "lab 01 is solved: full marks (failing: %v)", failing(lab01))
	assert.Equal(t, 21, lab01.Total, "graded on the pristine tests only; the learner's own test does not count")
	assert.True(t, lab01.Edited, "the report says the tests were edited")
	for _, l := range g.Labs[1:] {
		assert.Less(t, l.Passed, l.Total, "lab %s is a stub and should not pass", l.Number)
	}

	if _, err := exec.LookPath("make"); err == nil {
		cmd := exec.Command("make", "-n", "lab-01", "grade", "progress", "clean")
		cmd.Dir = dst
		out, err := cmd.CombinedOutput()
		assert.NoError(t, err, "the template's Makefile should know its learner targets:\n%s", out)
	}
}

// brokenLinks lists the relative Markdown links under root, outside code
// fences, whose target does not exist.
func brokenLinks(t *testing.T, root string) []string {
	t.Helper()
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	var broken []string
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fenced := false
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
			}
			if fenced {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				if _, err := os.Stat(filepath.Join(filepath.Dir(p), target)); err != nil {
					rel, _ := filepath.Rel(root, p)
					broken = append(broken, rel+" -> "+m[1])
				}
			}
		}
		return nil
	}))
	return broken
}

func goIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go %s in the template:\n%s", strings.Join(args, " "), out)
}

func failing(l labkit.GradedLab) []string {
	var names []string
	for _, t := range l.Tests {
		if t.Status != labkit.Pass {
			names = append(names, t.Name+": "+t.Summary)
		}
	}
	return names
}

func readGrade(t *testing.T, dir string) labkit.Grade {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "grade.json"))
	require.NoError(t, err)
	var g labkit.Grade
	require.NoError(t, json.Unmarshal(b, &g))
	return g
}
