package labkit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommittedAutogradingMatchesTheCatalogue(t *testing.T) {
	t.Parallel()
	root, err := FindRoot(".")
	require.NoError(t, err)
	committed, err := os.ReadFile(filepath.Join(root, AutogradingFile))
	require.NoError(t, err, "%s is missing: run go run ./cmd/labctl classroom", AutogradingFile)
	doc, err := GenerateAutograding(ClassroomOptions{Root: root})
	require.NoError(t, err)
	want, err := doc.Marshal()
	require.NoError(t, err)
	require.Equal(t, string(want), string(committed), "%s is stale: run go run ./cmd/labctl classroom and commit it", AutogradingFile)

	// And it says what it should, read against the labs themselves rather
	// than the generator: every test of every built lab exactly once, its
	// command running that one test, at least a point each.
	c, err := LoadCatalog(root)
	require.NoError(t, err)
	var wantRuns []string
	for _, l := range c.BuiltLabs() {
		sources, err := ReadTestSources(filepath.Join(root, l.LabDir()))
		require.NoError(t, err)
		tests, err := TestFuncs(sources)
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
	root := fixture(t)
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
	require.ErrorIs(t, err, ErrBadOption, "a lab worth fewer points than it has tests would grade some tests at zero")
}

func TestGradeOneRunsOnlyThatTestAgainstThePristineFiles(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	solveAdd(t, root)
	// The learner "fixes" the Sum test so it passes.
	write(t, root, "labs/01-add/add_test.go", "package add\n\nimport \"testing\"\n\nfunc TestAddAddsTwoNumbers(t *testing.T) {}\n\nfunc TestSumAddsEveryNumber(t *testing.T) {}\n")
	l := fixtureLab(t, root)
	opts := GradeOptions{Root: root}

	gl, err := GradeOne(t.Context(), opts, l, "TestAddAddsTwoNumbers")
	require.NoError(t, err)
	require.Len(t, gl.Tests, 1, "exactly the named test is graded")
	assert.Equal(t, Pass, gl.Tests[0].Status)

	gl, err = GradeOne(t.Context(), opts, l, "TestSumAddsEveryNumber")
	require.NoError(t, err)
	require.Len(t, gl.Tests, 1)
	assert.Equal(t, Fail, gl.Tests[0].Status, "the pristine test is restored, so the learner's edit earns nothing")
	assert.True(t, gl.Edited)

	_, err = GradeOne(t.Context(), opts, l, "TestAdd")
	require.ErrorIs(t, err, ErrUnknownTest, "a prefix of a test name is not a test: -run would pass it vacuously")
}

func TestPristineArchiveIsReproducibleAndRoundTrips(t *testing.T) {
	t.Parallel()
	labs := map[string]map[string][]byte{
		"01-add": {"add_test.go": []byte("package add\n"), "main_test.go": []byte("package add // main\n")},
		"02-sub": {"sub_test.go": []byte("package sub\n")},
	}
	var a, b bytes.Buffer
	require.NoError(t, WritePristineArchive(&a, labs))
	require.NoError(t, WritePristineArchive(&b, labs))
	assert.Equal(t, a.Bytes(), b.Bytes(), "the same tests must give the same bytes, or every export shows a change")
	got, err := ReadPristineArchive(&a)
	require.NoError(t, err)
	assert.Equal(t, labs, got)
}

func TestPristineArchiveRejectsAnythingButLabTestFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		entry tar.Header
	}{
		{"parent directory", tar.Header{Name: "../add_test.go"}},
		{"nested", tar.Header{Name: "01-add/sub/add_test.go"}},
		{"absolute", tar.Header{Name: "/01-add/add_test.go"}},
		{"no lab directory", tar.Header{Name: "add_test.go"}},
		{"not a test file", tar.Header{Name: "01-add/add.go"}},
		{"a symlink", tar.Header{Name: "01-add/add_test.go", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			zw := gzip.NewWriter(&buf)
			tw := tar.NewWriter(zw)
			hdr := tc.entry
			if hdr.Typeflag == 0 {
				hdr.Typeflag = tar.TypeReg
			}
			hdr.Mode = 0o644
			require.NoError(t, tw.WriteHeader(&hdr))
			require.NoError(t, tw.Close())
			require.NoError(t, zw.Close())
			_, err := ReadPristineArchive(&buf)
			require.Error(t, err, "entry %q must be refused", hdr.Name)
		})
	}
}

func TestExportWritesATemplateWithoutSolutions(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	// What a real course has around its labs.
	for rel, content := range map[string]string{
		"README.md":                      "# The course\n",
		"docs/guide.md":                  "# Guide\n",
		"cmd/labctl/main.go":             "package main\n\nfunc main() {}\n",
		"cmd/labctl/main_test.go":        "package main\n",
		"cmd/benchhttp/main.go":          "package main\n\nfunc main() {}\n",
		"internal/kit/kit.go":            "package kit\n",
		"internal/kit/kit_test.go":       "package kit\n",
		"internal/kit/testdata/x.txt":    "fixture\n",
		"scripts/run.sh":                 "#!/bin/sh\n",
		".github/workflows/grade.yml":    "name: grade\n",
		".github/workflows/ci.yml":       "name: ci\n",
		"solutions/internal/helper.go":   "package internal\n",
		"labs/01-add/testdata/input.txt": "an input the lab reads\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755))
		write(t, root, rel, content)
	}
	dst := filepath.Join(t.TempDir(), "template")
	rep, err := Export(t.Context(), ExportOptions{Root: root, Dir: dst, SkipTidy: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"01-add"}, rep.Labs)
	assert.Equal(t, 1, rep.Tests)

	var files []string
	require.NoError(t, filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	}))
	slices.Sort(files)
	assert.Equal(t, []string{
		".github/classroom/autograding.json",
		".github/workflows/grade.yml",
		"README.md",
		"checklist/PRODUCTION_READINESS.md",
		"cmd/labctl/main.go",
		"docs/guide.md",
		"go.mod",
		"internal/kit/kit.go",
		"labs/01-add/HINTS.md",
		"labs/01-add/README.md",
		"labs/01-add/add.go",
		"labs/01-add/add_test.go",
		"labs/01-add/testdata/input.txt",
		"labs/catalog.json",
		PristineArchive,
		"write/01-add/write_test.go",
		WriteKitArchive,
	}, files, "a template holds the labs, docs, labctl, the helpers, the pristine tests and the test-writing track (a starter file, the packed kit) — no solutions, mutants, scripts or tool tests")
	kit, err := os.ReadFile(filepath.Join(dst, WriteKitArchive))
	require.NoError(t, err)
	entries, err := ReadWriteKitArchive(bytes.NewReader(kit))
	require.NoError(t, err)
	assert.Equal(t, []string{"mutants/skips-first.patch", "ref/add.go"}, slices.Sorted(maps.Keys(entries["01-add"])),
		"the kit holds the reference and the shipped mutants, never the reference's tests")

	readme, err := os.ReadFile(filepath.Join(dst, "README.md"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(readme), "> **Learner edition**"), "the README says what is missing first")
	assert.True(t, strings.HasSuffix(string(readme), "# The course\n"))
	lesson, err := os.ReadFile(filepath.Join(dst, "labs/01-add/README.md"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(lesson), "> **Learner edition.**"), "a lab's lesson says that solutions/, mutants and make run are not in the template")

	// In the template the lab is built, its pristine tests come from the
	// archive, and an edited test shows.
	c, err := LoadCatalog(dst)
	require.NoError(t, err)
	require.Len(t, c.BuiltLabs(), 1, "a lab with a stub and archived tests counts as built")
	l := c.BuiltLabs()[0]
	want, err := ReadTestSources(filepath.Join(root, "solutions/01-add"))
	require.NoError(t, err)
	got, err := PristineTests(dst, l)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	d, err := CompareTests(dst, l)
	require.NoError(t, err)
	assert.True(t, d.Empty(), "fresh template: tests unedited, got %s", d)
	write(t, dst, "labs/01-add/add_test.go", "package add\n")
	d, err = CompareTests(dst, l)
	require.NoError(t, err)
	assert.Equal(t, []string{"add_test.go"}, d.Differ, "the edited-tests banner needs the archive to compare against")
}

func TestExportRefusesABadDestinationOrEditedTests(t *testing.T) {
	t.Parallel()
	root := fixture(t)
	full := t.TempDir()
	write(t, full, "something", "x")
	_, err := Export(t.Context(), ExportOptions{Root: root, Dir: full, SkipTidy: true})
	require.ErrorIs(t, err, ErrBadOption, "a non-empty destination is refused")
	_, err = Export(t.Context(), ExportOptions{Root: root, Dir: filepath.Join(root, "template"), SkipTidy: true})
	require.ErrorIs(t, err, ErrBadOption, "a destination inside the repository is refused")

	write(t, root, "labs/01-add/add_test.go", "package add\n")
	_, err = Export(t.Context(), ExportOptions{Root: root, Dir: filepath.Join(t.TempDir(), "t"), SkipTidy: true})
	require.ErrorContains(t, err, "differ", "a template must ship the tests it grades with")
}

func TestGradeInATemplateTakesThePristineTestsFromTheArchiveOrARef(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dst := filepath.Join(t.TempDir(), "template")
	_, err := Export(t.Context(), ExportOptions{Root: fixture(t), Dir: dst, SkipTidy: true})
	require.NoError(t, err)
	gitIn(t, dst, "init", "-q")
	gitIn(t, dst, "add", "-A")
	gitIn(t, dst, "commit", "-qm", "template")
	solveAdd(t, dst)

	g, err := RunGrade(t.Context(), GradeOptions{Root: dst})
	require.NoError(t, err)
	assert.Equal(t, []Status{Pass, Fail}, statuses(g), "Add solved, Sum not")

	// The learner rewrites the archive so the Sum test is empty. The
	// working tree now vouches for it; the template's commit does not.
	var buf bytes.Buffer
	require.NoError(t, WritePristineArchive(&buf, map[string]map[string][]byte{"01-add": {
		"add_test.go": []byte("package add\n\nimport \"testing\"\n\nfunc TestAddAddsTwoNumbers(t *testing.T) {}\n\nfunc TestSumAddsEveryNumber(t *testing.T) {}\n"),
	}}))
	write(t, dst, PristineArchive, buf.String())
	g, err = RunGrade(t.Context(), GradeOptions{Root: dst})
	require.NoError(t, err)
	assert.Equal(t, []Status{Pass, Pass}, statuses(g), "a doctored archive fools a grade of the working tree: that is why --pristine-ref exists")
	g, err = RunGrade(t.Context(), GradeOptions{Root: dst, PristineRef: "HEAD"})
	require.NoError(t, err)
	assert.Equal(t, []Status{Pass, Fail}, statuses(g), "--pristine-ref reads the archive as the template's commit has it")
}

func TestLearnerMakefileKeepsOnlyTheLearnersTargets(t *testing.T) {
	t.Parallel()
	root, err := FindRoot(".")
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	out, dropped, err := LearnerMakefile(src)
	require.NoError(t, err)
	mk := string(out)
	for _, rule := range []string{"help:", "$(LABCTL): $(LABCTL_SRC)", "$(LABS): $(LABCTL)", "progress: $(LABCTL)", "hint: $(LABCTL)", "watch: $(LABCTL)", "grade: $(LABCTL)", "clean:"} {
		assert.Contains(t, mk, "\n"+rule, "the learner's Makefile keeps %s", rule)
	}
	var outside []string
	for _, line := range strings.Split(mk, "\n") {
		if strings.Contains(line, "solutions") || strings.Contains(line, "scripts/") {
			outside = append(outside, line)
		}
	}
	assert.Empty(t, outside, "no line of a template's Makefile may need solutions/ or scripts/")
	assert.Contains(t, mk, "export GORACE", "the race detector's exit sleep stays off")
	assert.Contains(t, mk, "\nLABCTL ", "variables the kept rules use stay")
	assert.NotContains(t, mk, "FUZZTIME", "variables only dropped rules used go")
	assert.Contains(t, mk, "# ---- learners")
	assert.NotContains(t, mk, "# ---- maintainers", "a heading over nothing goes")
	for _, target := range []string{"run", "test", "verify", "ci", "lint", "integration", "stress"} {
		assert.Contains(t, dropped, target)
	}
	assert.Equal(t, slices.Compact(slices.Clone(dropped)), dropped, "each dropped target is named once, however many rules it has")
	phony := mk[strings.Index(mk, ".PHONY:"):]
	phony = phony[:strings.Index(phony, "\n")]
	assert.Equal(t, ".PHONY: help progress hint watch grade clean $(LABS) $(WRITES)", phony)
}

func TestLearnerMakefileRefusesALearnerTargetThatNeedsADroppedOne(t *testing.T) {
	t.Parallel()
	src := "# top\n\nGO ?= go\n\nverify:\n\t$(GO) run ./cmd/labctl verify\n\ngrade: verify ## grade\n\t$(GO) run ./cmd/labctl grade\n"
	_, _, err := LearnerMakefile([]byte(src))
	require.ErrorContains(t, err, "target grade needs verify")
}

// solveAdd makes the fixture's Add work and leaves Sum a stub.
func solveAdd(t *testing.T, root string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "labs/01-add/add.go"))
	require.NoError(t, err)
	write(t, root, "labs/01-add/add.go", strings.Replace(string(b), "func Add(a, b int) int { return 0 }", "func Add(a, b int) int { return a + b }", 1))
}

func statuses(g *Grade) []Status {
	var out []Status
	for _, l := range g.Labs {
		for _, tc := range l.Tests {
			out = append(out, tc.Status)
		}
	}
	return out
}

func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}
