package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/export"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/grade"
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
	root, err := catalog.FindRoot(".")
	require.NoError(t, err)
	dst := exportTrack(t, root, catalog.TrackLabs)

	// Nothing of the answers travels.
	var leaked []string
	require.NoError(t, filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, dst))
		segs := strings.Split(rel, "/")
		if slices.Contains(segs, "solutions") || slices.Contains(segs, "mutants") || strings.HasSuffix(rel, ".patch") || strings.HasSuffix(rel, catalog.KitArchive) {
			leaked = append(leaked, rel)
		}
		return nil
	}))
	assert.Empty(t, leaked, "a learner template must not hold solutions, mutants or the test-writing kit")

	// The module stands on its own: tidy changes nothing, and the
	// solutions' dependencies are gone.
	goIn(t, dst, "mod", "tidy", "-diff")
	mod, err := os.ReadFile(filepath.Join(dst, "go.mod"))
	require.NoError(t, err)
	assert.NotContains(t, string(mod), "openai-go", "only solutions/ import the OpenAI SDK; the template's go.mod should not require it")
	assert.NotContains(t, string(mod), "\ntool ", "the maintainers' tools stay upstream")

	// The same tests give the same autograding document.
	upstream, err := os.ReadFile(filepath.Join(root, grade.AutogradingFile))
	require.NoError(t, err)
	exported, err := os.ReadFile(filepath.Join(dst, grade.AutogradingFile))
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
	code, out, errOut := labctl(t, dst, "test", "01")
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
	cat, err := catalog.Load(root)
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
	assert.Equal(t, []catalog.Track{catalog.TrackLabs}, g.Tracks, "the labs template grades the labs track alone")
	for _, cmd := range []string{"verify", "checklist", "write"} {
		code, _, errOut := labctl(t, dst, cmd, "01")
		assert.Equal(t, 2, code, "labctl %s has nothing to work on in the labs template", cmd)
		assert.Contains(t, errOut, "not in this template", "and says so")
	}

	// The guide's examples of the reports are this run's.
	md, err := os.ReadFile(filepath.Join(reports, "grade.md"))
	require.NoError(t, err)
	example := guideBlock(t, root, "<!-- grade.md of the labs template with lab 01 solved -->")
	table := strings.SplitAfterN(string(md), "\n\n", 3) // the heading, the table, the rest
	assert.True(t, strings.HasPrefix(example, table[0]+table[1]), "docs/instructor-guide.md's grade.md example opens with this run's heading and table:\n%s%s", table[0], table[1])
	for _, line := range strings.Split(example, "\n") {
		if line != "" && line != "…" {
			assert.Contains(t, string(md), line+"\n", "the guide's grade.md example shows a line of this run's")
		}
	}
	junit, err := os.ReadFile(filepath.Join(reports, "junit.xml"))
	require.NoError(t, err)
	times := regexp.MustCompile(`time="[0-9.]+"`)
	for _, line := range strings.Split(guideBlock(t, root, "<!-- junit.xml of the labs template with lab 01 solved -->"), "\n") {
		if line != "" {
			assert.Contains(t, times.ReplaceAllString(string(junit), `time=""`), times.ReplaceAllString(line, `time=""`)+"\n", "the guide's junit.xml example shows a line of this run's")
		}
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

func failing(l grade.GradedLab) []string {
	var names []string
	for _, t := range l.Tests {
		if t.Status != gotest.Pass {
			names = append(names, t.Name+": "+t.Summary)
		}
	}
	return names
}

func readGrade(t *testing.T, dir string) grade.Report {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "grade.json"))
	require.NoError(t, err)
	var g grade.Report
	require.NoError(t, json.Unmarshal(b, &g))
	return g
}

// exportTrack exports the course's template of one track with labctl, as
// an instructor would, and holds it to what the track promises: no file
// the spec does not name, every part the spec names present, no answer of
// the track in any file (archives unpacked, encodings undone), and every
// relative link in its Markdown resolving there.
func exportTrack(t *testing.T, root string, track catalog.Track) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "template")
	code, out, errOut := labctl(t, root, "export", "-track", string(track), dst)
	require.Equal(t, 0, code, "labctl export -track %s failed:\n%s%s", track, out, errOut)
	assert.Contains(t, out, "none found", "export says it searched for answers")
	// What the guide shows an export print is what one prints, the commit
	// and the directory aside.
	commit := regexp.MustCompile(`commit [0-9a-f]{12}`)
	norm := func(s, dir string) string {
		return commit.ReplaceAllString(strings.ReplaceAll(s, dir, "DIR"), "commit C")
	}
	shown := guideBlock(t, root, "<!-- output of labctl export -track "+string(track)+" -->")
	dirShown := regexp.MustCompile(` to (\S+):`).FindStringSubmatch(shown)
	require.NotNil(t, dirShown, "the guide's export output names its directory")
	assert.Equal(t, norm(shown, dirShown[1]), strings.TrimRight(norm(out, dst), "\n"), "docs/instructor-guide.md shows what labctl export -track %s prints: scripts/guide-examples.sh rewrites it", track)

	var files []string
	require.NoError(t, filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dst, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return err
	}))
	// Its README opens with what it holds, in the words export -h and the
	// instructor guide use, and the commit it came from.
	readme, err := os.ReadFile(filepath.Join(dst, "README.md"))
	require.NoError(t, err)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(readme), export.TemplateNotice(track, strings.TrimSpace(string(head)))), "the template's README opens with the notice of what it holds")
	uncovered, unused := export.CheckTemplateContents(track, files)
	assert.Empty(t, uncovered, "every file of the %s template is one the spec (and so the README, the guide and export -h) names", track)
	assert.Empty(t, unused, "every part the spec names is in the %s template", track)

	c, err := catalog.Load(root)
	require.NoError(t, err)
	answers := export.ImplementationAnswers
	if track == catalog.TrackWrite {
		answers = export.WriteAnswers
	}
	needles, err := answers(root, c)
	require.NoError(t, err)
	require.NotEmpty(t, needles)
	leaks, err := export.FindLeaks(dst, needles)
	require.NoError(t, err)
	assert.Empty(t, leaks, "the %s template holds none of its track's answers", track)
	assert.Empty(t, brokenLinks(t, dst), "every relative link in the template's Markdown resolves there")
	return dst
}

// TestExportedWriteTemplateScoresTheLearnersTests exports the test-writing
// template, puts a suite written cold into it and scores it there, as
// make write-NN and labctl grade do; a kit the learner doctors changes
// nothing once grading reads the template's own commit.
func TestExportedWriteTemplateScoresTheLearnersTests(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("exports a template and runs lab 01's mutants in it (~30 s)")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	root, err := catalog.FindRoot(".")
	require.NoError(t, err)
	dst := exportTrack(t, root, catalog.TrackWrite)
	goIn(t, dst, "mod", "tidy", "-diff")

	code, _, errOut := labctl(t, dst, "test", "01")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "make write-01", "the labs track is not here, and labctl says which is")

	suite, err := os.ReadFile(filepath.Join(root, "write/testdata/cold/01.go.txt"))
	require.NoError(t, err)
	scores, err := os.ReadFile(filepath.Join(root, "write/testdata/cold/scores.txt"))
	require.NoError(t, err)
	want := strings.SplitN(string(scores), "\n", 2)[0] // write 01: killed N/N mutants
	require.NoError(t, os.WriteFile(filepath.Join(dst, "write/01-concurrency/write_test.go"), suite, 0o644))
	code, out, errOut := labctl(t, dst, "write", "01")
	require.Equal(t, 0, code, "labctl write 01 in the template:\n%s%s", out, errOut)
	assert.Contains(t, out, want, "the suite scores in the template what it scores in the course")

	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "template"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dst
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, b)
	}
	// The learner drops every mutant but one from the kit.
	kit, err := os.ReadFile(filepath.Join(dst, catalog.KitArchive))
	require.NoError(t, err)
	entries, err := catalog.ReadKitArchive(bytes.NewReader(kit))
	require.NoError(t, err)
	n := 0
	for name := range entries["01-concurrency"] {
		if strings.HasPrefix(name, "mutants/") {
			if n++; n > 1 {
				delete(entries["01-concurrency"], name)
			}
		}
	}
	require.NoError(t, writeKit(filepath.Join(dst, catalog.KitArchive), entries))

	reports := t.TempDir()
	code, out, errOut = labctl(t, dst, "grade", "--pristine-ref", "HEAD", "--out", reports, "01")
	require.Equal(t, 0, code, "labctl grade failed:\n%s%s", out, errOut)
	assert.NotContains(t, out, "tests (", "no count of exercise tests where there are none:\n%s", out)
	assert.Contains(t, out, "test-writing track: ", "the track graded is what the summary counts")
	g := readGrade(t, reports)
	assert.Equal(t, []catalog.Track{catalog.TrackWrite}, g.Tracks)
	require.Len(t, g.Labs, 1)
	require.NotNil(t, g.Labs[0].Write)
	assert.Equal(t, want, fmt.Sprintf("write 01: killed %d/%d mutants", g.Labs[0].Write.Killed, g.Labs[0].Write.Total), "graded with the kit the template's commit holds, not the doctored one")
}

// writeKit packs lab → name → content into a kit archive, as a learner
// who rewrites one would.
func writeKit(path string, entries map[string]map[string][]byte) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, lab := range slices.Sorted(maps.Keys(entries)) {
		for _, name := range slices.Sorted(maps.Keys(entries[lab])) {
			b := entries[lab][name]
			if err := tw.WriteHeader(&tar.Header{Name: lab + "/" + name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
				return err
			}
			if _, err := tw.Write(b); err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// guideBlock is the fenced block that follows a marker line in
// docs/instructor-guide.md, without its fences.
func guideBlock(t *testing.T, root, marker string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "docs/instructor-guide.md"))
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(b), marker+"\n```")
	require.True(t, ok, "docs/instructor-guide.md has a block after %q", marker)
	_, body, _ := strings.Cut(after, "\n") // the fence's language
	body, _, ok = strings.Cut(body, "\n```")
	require.True(t, ok, "the block after %q ends", marker)
	return body
}
