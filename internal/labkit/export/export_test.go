package export

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/grade"
	"github.com/production-go/gateway-lab/internal/labkit/testdata/labtest"
	"github.com/production-go/gateway-lab/internal/labkit/write"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// courseAround adds to the fixture what a real course has around its labs.
func courseAround(t *testing.T, root string) {
	t.Helper()
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
		"write/testdata/cold/01.go.txt":  "package add\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, rel)), 0o755))
		labtest.Write(t, root, rel, content)
	}
}

func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	}))
	slices.Sort(files)
	return files
}

func TestExportWritesTheLabsTemplateWithoutAReferenceOrAMutant(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	courseAround(t, root)
	dst := filepath.Join(t.TempDir(), "template")
	rep, err := Run(t.Context(), Options{Root: root, Dir: dst, SkipTidy: true})
	require.NoError(t, err)
	assert.Equal(t, catalog.TrackLabs, rep.Track, "the labs template is the default")
	assert.Equal(t, []string{"01-add"}, rep.Labs)
	assert.Equal(t, 1, rep.Tests)
	assert.Positive(t, rep.Needles, "the template was searched for the references' code")
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
		catalog.PristineArchive,
	}, filesUnder(t, dst), "the labs template holds the labs, docs, labctl, the helpers and the pristine tests — no solutions, mutants, test-writing kit, scripts or tool tests")

	readme, err := os.ReadFile(filepath.Join(dst, "README.md"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(readme), "> **Learner edition: the labs template**"), "the README says which template this is first")
	assert.Contains(t, string(readme), "any lab's reference or mutant, in any form")
	assert.True(t, strings.HasSuffix(string(readme), "# The course\n"))
	lesson, err := os.ReadFile(filepath.Join(dst, "labs/01-add/README.md"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(lesson), "> **Learner edition: the labs.**"), "a lab's lesson says that solutions/, mutants and make run are not in the template")

	// In the template the lab is built, its pristine tests come from the
	// archive, an edited test shows, and the test-writing track is not here.
	c, err := catalog.Load(dst)
	require.NoError(t, err)
	require.Len(t, c.BuiltLabs(), 1, "a lab with a stub and archived tests counts as built")
	assert.False(t, c.Holds(catalog.TrackWrite), "no kit: no test-writing track")
	_, err = c.SelectWrite([]string{"01"})
	require.ErrorIs(t, err, catalog.ErrOtherTrack)
	assert.ErrorContains(t, err, "labctl export -track write", "says where the track is")
	l := c.BuiltLabs()[0]
	want, err := catalog.ReadTestSources(filepath.Join(root, "solutions/01-add"))
	require.NoError(t, err)
	got, err := catalog.PristineTests(dst, l)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	d, err := catalog.CompareTests(dst, l)
	require.NoError(t, err)
	assert.True(t, d.Empty(), "fresh template: tests unedited, got %s", d)
	labtest.Write(t, dst, "labs/01-add/add_test.go", "package add\n")
	d, err = catalog.CompareTests(dst, l)
	require.NoError(t, err)
	assert.Equal(t, []string{"add_test.go"}, d.Differ, "the edited-tests banner needs the archive to compare against")
}

func TestExportWritesTheTestWritingTemplateWithoutAnExerciseTest(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	courseAround(t, root)
	dst := filepath.Join(t.TempDir(), "template")
	rep, err := Run(t.Context(), Options{Root: root, Dir: dst, Track: catalog.TrackWrite, SkipTidy: true})
	require.NoError(t, err)
	assert.Equal(t, catalog.TrackWrite, rep.Track)
	assert.Equal(t, 1, rep.Mutants)
	assert.Equal(t, []string{
		".github/workflows/grade.yml",
		"README.md",
		"checklist/PRODUCTION_READINESS.md",
		"cmd/labctl/main.go",
		"docs/guide.md",
		"go.mod",
		"internal/kit/kit.go",
		"labs/01-add/README.md",
		"labs/catalog.json",
		"write/01-add/write_test.go",
		catalog.KitArchive,
	}, filesUnder(t, dst), "the test-writing template holds the lessons, the learner's starter file and the kit — no stubs, hints, exercise tests, pristine archive or cold suites")
	kit, err := os.ReadFile(filepath.Join(dst, catalog.KitArchive))
	require.NoError(t, err)
	entries, err := catalog.ReadKitArchive(bytes.NewReader(kit))
	require.NoError(t, err)
	assert.Equal(t, []string{"mutants/skips-first.patch", "ref/add.go"}, slices.Sorted(maps.Keys(entries["01-add"])),
		"the kit holds the reference and the shipped mutants, never the reference's tests")
	readme, err := os.ReadFile(filepath.Join(dst, "README.md"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(readme), "> **Learner edition: the test-writing template**"))

	c, err := catalog.Load(dst)
	require.NoError(t, err)
	assert.True(t, c.Holds(catalog.TrackWrite))
	assert.False(t, c.Holds(catalog.TrackLabs), "no stubs, no pristine tests: no labs track")
	_, err = c.Select([]string{"01"})
	require.ErrorIs(t, err, catalog.ErrOtherTrack, "make lab-01 says this template holds the other track")
	labs, err := c.SelectWrite(nil)
	require.NoError(t, err)
	assert.Equal(t, "01", labs[0].Number)

	// The learner's tests score there, and a grade grades the track it holds.
	labtest.Write(t, dst, "write/01-add/write_test.go", labtest.KillsSkipsFirst)
	g, err := grade.Run(t.Context(), grade.Options{Root: dst})
	require.NoError(t, err)
	assert.Equal(t, []catalog.Track{catalog.TrackWrite}, g.Tracks)
	assert.Equal(t, 0, g.Total, "no exercise test is graded where there is none")
	require.Len(t, g.Labs, 1)
	require.NotNil(t, g.Labs[0].Write)
	assert.Equal(t, 1, g.Labs[0].Write.Killed)
	md := g.Markdown()
	assert.True(t, strings.HasPrefix(md, "## Test-writing track: 1/1 mutants killed"), "the summary is the track graded:\n%s", md)
	assert.NotContains(t, md, "Lab grade")
}

func TestExportRefusesATemplateThatHoldsAnAnswer(t *testing.T) {
	t.Parallel()
	// A lesson quotes the reference's Sum, reformatted and re-commented,
	// and a doc holds a mutant's patch in base64.
	root := labtest.Fixture(t)
	courseAround(t, root)
	labtest.Write(t, root, "labs/01-add/HINTS.md", "## 1. Sum\nTests: TestAddAddsTwoNumbers, TestSumAddsEveryNumber\n\n### Nudge\nLook.\n\n### Approach\nWords.\n\n### Near-solution\n```go\nfunc Sum(xs ...int) int {\n\t// start at zero\n\ttotal := 0\n\tfor _, x := range xs { total = Add(total, x) }\n\treturn total\n}\n```\n")
	_, err := Run(t.Context(), Options{Root: root, Dir: filepath.Join(t.TempDir(), "t"), SkipTidy: true})
	require.ErrorIs(t, err, ErrAnswerInTemplate)
	assert.ErrorContains(t, err, "labs/01-add/HINTS.md: holds solutions/01-add/add.go: the body of Sum")

	root = labtest.Fixture(t)
	courseAround(t, root)
	patch, err := os.ReadFile(filepath.Join(root, "solutions/01-add/testdata/mutants/skips-first.patch"))
	require.NoError(t, err)
	labtest.Write(t, root, "docs/guide.md", "# Guide\n\n"+base64.StdEncoding.EncodeToString(patch)+"\n")
	_, err = Run(t.Context(), Options{Root: root, Dir: filepath.Join(t.TempDir(), "t"), SkipTidy: true})
	require.ErrorIs(t, err, ErrAnswerInTemplate)
	assert.ErrorContains(t, err, "docs/guide.md → base64: holds solutions/01-add/testdata/mutants/skips-first.patch")

	// The test-writing template refuses an exercise test, here in a doc.
	root = labtest.Fixture(t)
	courseAround(t, root)
	test, err := os.ReadFile(filepath.Join(root, "solutions/01-add/add_test.go"))
	require.NoError(t, err)
	labtest.Write(t, root, "docs/guide.md", "# Guide\n\n```go\n"+string(test)+"```\n")
	_, err = Run(t.Context(), Options{Root: root, Dir: filepath.Join(t.TempDir(), "t"), Track: catalog.TrackWrite, SkipTidy: true})
	require.ErrorIs(t, err, ErrAnswerInTemplate)
	assert.ErrorContains(t, err, "docs/guide.md: holds solutions/01-add/add_test.go: the body of TestSumAddsEveryNumber")
}

func TestExportRefusesABadDestinationOrEditedTests(t *testing.T) {
	t.Parallel()
	root := labtest.Fixture(t)
	full := t.TempDir()
	labtest.Write(t, full, "something", "x")
	_, err := Run(t.Context(), Options{Root: root, Dir: full, SkipTidy: true})
	require.ErrorIs(t, err, catalog.ErrBadOption, "a non-empty destination is refused")
	_, err = Run(t.Context(), Options{Root: root, Dir: filepath.Join(root, "template"), SkipTidy: true})
	require.ErrorIs(t, err, catalog.ErrBadOption, "a destination inside the repository is refused")

	labtest.Write(t, root, "labs/01-add/add_test.go", "package add\n")
	_, err = Run(t.Context(), Options{Root: root, Dir: filepath.Join(t.TempDir(), "t"), SkipTidy: true})
	require.ErrorContains(t, err, "differ", "a template must ship the tests it grades with")
}

func TestGradeInATemplateTakesThePristineTestsFromTheArchiveOrARef(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	dst := filepath.Join(t.TempDir(), "template")
	_, err := Run(t.Context(), Options{Root: labtest.Fixture(t), Dir: dst, SkipTidy: true})
	require.NoError(t, err)
	gitIn(t, dst, "init", "-q")
	gitIn(t, dst, "add", "-A")
	gitIn(t, dst, "commit", "-qm", "template")
	labtest.SolveAdd(t, dst)

	g, err := grade.Run(t.Context(), grade.Options{Root: dst})
	require.NoError(t, err)
	assert.Equal(t, []gotest.Status{gotest.Pass, gotest.Fail}, statuses(g), "Add solved, Sum not")

	// The learner rewrites the archive so the Sum test is empty. The
	// working tree now vouches for it; the template's commit does not.
	var buf bytes.Buffer
	require.NoError(t, catalog.WritePristineArchive(&buf, map[string]map[string][]byte{"01-add": {
		"add_test.go": []byte("package add\n\nimport \"testing\"\n\nfunc TestAddAddsTwoNumbers(t *testing.T) {}\n\nfunc TestSumAddsEveryNumber(t *testing.T) {}\n"),
	}}))
	labtest.Write(t, dst, catalog.PristineArchive, buf.String())
	g, err = grade.Run(t.Context(), grade.Options{Root: dst})
	require.NoError(t, err)
	assert.Equal(t, []gotest.Status{gotest.Pass, gotest.Pass}, statuses(g), "a doctored archive fools a grade of the working tree: that is why --pristine-ref exists")
	g, err = grade.Run(t.Context(), grade.Options{Root: dst, PristineRef: "HEAD"})
	require.NoError(t, err)
	assert.Equal(t, []gotest.Status{gotest.Pass, gotest.Fail}, statuses(g), "--pristine-ref reads the archive as the template's commit has it")
}

func TestLearnerMakefileKeepsOnlyTheLearnersTargets(t *testing.T) {
	t.Parallel()
	root, err := catalog.FindRoot(".")
	require.NoError(t, err)
	src, err := os.ReadFile(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	labs, err := specOf(catalog.TrackLabs)
	require.NoError(t, err)
	out, dropped, err := learnerMakefile(src, labs.Targets)
	require.NoError(t, err)
	mk := string(out)
	for _, rule := range []string{"help:", "$(LABCTL): $(LABCTL_SRC)", "$(LABS): $(LABCTL)", "progress: $(LABCTL)", "hint: $(LABCTL)", "watch: $(LABCTL)", "interview: $(LABCTL)", "grade: $(LABCTL)", "clean:"} {
		assert.Contains(t, mk, "\n"+rule, "the learner's Makefile keeps %s", rule)
	}
	var outside []string
	for _, line := range strings.Split(mk, "\n") {
		if (strings.Contains(line, "solutions") || strings.Contains(line, "scripts/")) && !strings.Contains(line, "$(wildcard ") {
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
	assert.Equal(t, ".PHONY: help prove progress hint watch interview grade clean $(LABS)", phony)
	assert.Contains(t, dropped, "$(WRITES)", "the labs template leaves the test-writing track out")

	writeSpec, err := specOf(catalog.TrackWrite)
	require.NoError(t, err)
	out, dropped, err = learnerMakefile(src, writeSpec.Targets)
	require.NoError(t, err)
	mk = string(out)
	phony = mk[strings.Index(mk, ".PHONY:"):]
	phony = phony[:strings.Index(phony, "\n")]
	assert.Equal(t, ".PHONY: help progress interview grade clean $(WRITES)", phony)
	for _, target := range []string{"$(LABS)", "hint", "watch"} {
		assert.Contains(t, dropped, target, "the test-writing template has no stubs to run or hint")
	}
}

func TestLearnerMakefileRefusesALearnerTargetThatNeedsADroppedOne(t *testing.T) {
	t.Parallel()
	src := "# top\n\nGO ?= go\n\nverify:\n\t$(GO) run ./cmd/labctl verify\n\ngrade: verify ## grade\n\t$(GO) run ./cmd/labctl grade\n"
	_, _, err := learnerMakefile([]byte(src), []string{"grade"})
	require.ErrorContains(t, err, "target grade needs verify")
}

func statuses(g *grade.Report) []gotest.Status {
	var out []gotest.Status
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

// TestTheInstructorGuideSaysWhatTheCodeHas holds the numbers and the
// generated text of docs/instructor-guide.md that need no export to the
// code: what each template holds (labctl export -h's words), the count of
// graded commands, and the table of suites written cold.
func TestTheInstructorGuideSaysWhatTheCodeHas(t *testing.T) {
	const root = "../../.."
	b, err := os.ReadFile(filepath.Join(root, "docs/instructor-guide.md"))
	require.NoError(t, err)
	guide := string(b)

	const open, end = "<!-- generated by export.TemplateContents: do not edit by hand -->\n", "\n<!-- end of generated -->"
	i, j := strings.Index(guide, open), strings.Index(guide, end)
	require.True(t, i >= 0 && j > i, "the guide holds the generated block of what each template holds")
	assert.Equal(t, strings.TrimRight(TemplateContents(), "\n"), guide[i+len(open):j], "the guide says what each template holds in labctl export -h's words: paste TemplateContents() there")

	doc, err := grade.GenerateAutograding(grade.ClassroomOptions{Root: root})
	require.NoError(t, err)
	n := strconv.Itoa(len(doc.Tests))
	counts := regexp.MustCompile(`(\d+) (?:entries|commands)\b|total \((\d+)\)|<testsuites tests="(\d+)"`).FindAllStringSubmatch(guide, -1)
	require.NotEmpty(t, counts)
	for _, m := range counts {
		assert.Equal(t, n, cmp.Or(m[1], m[2], m[3]), "the guide's %q is the number of graded tests", m[0])
	}

	// The cold suites: their test counts, and the score make write-cold holds them to.
	scores, err := os.ReadFile(filepath.Join(root, write.Dir, "testdata/cold/scores.txt"))
	require.NoError(t, err)
	row := regexp.MustCompile(`^\| (\d\d) [a-z]+ \| (\d+) \| .* \| (\d+/\d+) \| [^|]+ \|$`)
	rows := 0
	for _, line := range strings.Split(guide, "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		rows++
		src, err := os.ReadFile(filepath.Join(root, write.Dir, "testdata/cold", m[1]+".go.txt"))
		require.NoError(t, err)
		tests, err := catalog.TestFuncs(map[string][]byte{"x_test.go": src})
		require.NoError(t, err)
		assert.Equal(t, strconv.Itoa(len(tests)), m[2], "the cold suite of lab %s has that many tests", m[1])
		assert.Contains(t, string(scores), "write "+m[1]+": killed "+m[3]+" mutants", "make write-cold holds lab %s's cold suite to the guide's score", m[1])
	}
	cold, _ := filepath.Glob(filepath.Join(root, write.Dir, "testdata/cold/*.go.txt"))
	assert.Equal(t, len(cold), rows, "the guide's table has a row per cold suite")
	words := []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}
	for _, m := range regexp.MustCompile(`(?i)\b([a-z]+) suites were written cold`).FindAllStringSubmatch(guide, -1) {
		assert.Equal(t, len(cold), slices.Index(words, strings.ToLower(m[1])), "the guide's %q", m[0])
	}
}
