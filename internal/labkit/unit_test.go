package labkit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseHintsSplitsSectionsTestsAndLevels(t *testing.T) {
	hints, err := ParseHints("# Lab hints\n\npreamble\n\n## 1. First\nTests: TestA, TestB\n\n### Nudge\nWhere?\n\n### Approach\nThe idea.\n\n### Near-solution\nCode:\n\n```go\n### not a heading inside code\nx := 1\n```\n\n" +
		"## 2. Second\n\n### Nudge\nLook.\nTests: not a list here\n### approach\nWords.\n### Near-solution\n```go\ny()\n```\n")
	require.NoError(t, err)
	require.Len(t, hints, 2)
	assert.Equal(t, "1. First", hints[0].Title)
	assert.Equal(t, []string{"TestA", "TestB"}, hints[0].Tests)
	assert.Equal(t, "Where?", hints[0].Nudge)
	assert.Equal(t, "The idea.", hints[0].Approach)
	assert.Equal(t, "Code:\n\n```go\n### not a heading inside code\nx := 1\n```", hints[0].Solution, "a heading inside a code block is code")
	assert.Empty(t, hints[1].Tests, "a Tests: line inside a level is its text")
	assert.Equal(t, "Look.\nTests: not a list here", hints[1].Nudge)
	assert.Equal(t, "Words.", hints[1].Approach, "level headings match whatever their case")
	assert.Equal(t, 1, HintFor(hints, "TestB")+1)
	assert.Equal(t, -1, HintFor(hints, "TestZ"))

	_, err = ParseHints("no sections at all")
	assert.ErrorIs(t, err, ErrNoHints)
	for name, text := range map[string]string{
		"no near-solution":    "## 1. A\n### Nudge\nn\n### Approach\na\n",
		"out of order":        "## 1. A\n### Approach\na\n### Nudge\nn\n### Near-solution\ns\n",
		"text before a level": "## 1. A\nSome prose.\n### Nudge\nn\n### Approach\na\n### Near-solution\ns\n",
		"a level twice":       "## 1. A\n### Nudge\nn\n### Nudge\nm\n### Approach\na\n### Near-solution\ns\n",
	} {
		_, err := ParseHints(text)
		assert.ErrorIs(t, err, ErrHintLevels, name)
	}
}

func TestHintProblemsKeepsWordsAndCodeApart(t *testing.T) {
	good := Hint{Title: "2. The first-token limit", Nudge: "Which context does `Open` read its stream under, and what happens to the stream if you cancel it?",
		Approach: "The limit cannot be a timeout you cancel after the first chunk: cancel the stream's context with a cause from a timer you stop when the first chunk arrives. See `context.Cause` and `ctx.Err()` in `relay.go`.",
		Solution: "```go\nctx, cancel := context.WithCancelCause(ctx)\n```"}
	assert.Empty(t, HintProblems(good))
	for name, c := range map[string]struct {
		edit func(*Hint)
		want string
	}{
		"empty nudge":             {func(h *Hint) { h.Nudge = "" }, "the nudge is empty"},
		"long nudge":              {func(h *Hint) { h.Nudge = strings.Repeat("word ", 60) }, "a question or a place to look"},
		"code in a nudge":         {func(h *Hint) { h.Nudge = "Wrap each call in `context.WithTimeoutCause(ctx, Idle, ErrIdle)`." }, "the nudge holds code"},
		"a block in the approach": {func(h *Hint) { h.Approach = "Like this:\n\n```go\nx := 1\n```" }, "the approach holds a code block"},
		"indented code":           {func(h *Hint) { h.Approach = "Like this:\n\n    x := 1\n" }, "the approach holds a code block"},
		"a formula":               {func(h *Hint) { h.Approach = "The refund is reserved - used, at least 0: max(0, reserved-used)." }, "the approach holds a formula or a call"},
		"an equation":             {func(h *Hint) { h.Approach = "Tokens = rate × elapsed." }, "formula"},
		"code in the title":       {func(h *Hint) { h.Title = "3. `cancel(ErrIdle)`" }, "the title holds code"},
		"nudge inside approach":   {func(h *Hint) { h.Approach = "Look here. " + h.Nudge + " Then more." }, "the nudge is part of the approach"},
		"no code to near":         {func(h *Hint) { h.Solution = "Just do it." }, "the near-solution holds no code block"},
		"empty approach":          {func(h *Hint) { h.Approach = "" }, "the approach is empty"},
	} {
		h := good
		c.edit(&h)
		assert.Contains(t, strings.Join(HintProblems(h), "\n"), c.want, name)
	}
}

func TestPatchAppliesWithDriftAndRejectsMismatch(t *testing.T) {
	patch := "# comment line, ignored\n\n--- a/f.go\n+++ b/f.go\n@@ -2,3 +2,3 @@\n b\n-c\n+C\n d\n"
	files, err := ParsePatch(patch)
	require.NoError(t, err)
	require.Len(t, files, 1)
	assert.Equal(t, "f.go", files[0].Path)

	out, err := files[0].Apply("a\nb\nc\nd\ne\n")
	require.NoError(t, err)
	assert.Equal(t, "a\nb\nC\nd\ne\n", out)

	out, err = files[0].Apply("new\nlines\na\nb\nc\nd\n")
	require.NoError(t, err, "a hunk whose context moved down should still apply")
	assert.Equal(t, "new\nlines\na\nb\nC\nd\n", out)

	_, err = files[0].Apply("a\nb\nX\nd\n")
	assert.ErrorIs(t, err, ErrPatch, "context that does not match must be an error, never a silent no-op")

	_, err = ParsePatch("just words")
	assert.ErrorIs(t, err, ErrPatch)
}

func TestTestFuncsFindsOnlyTopLevelTests(t *testing.T) {
	src := []byte(`package p
import "testing"
func TestMain(m *testing.M) {}
func TestOne(t *testing.T) {}
func Testlower(t *testing.T) {}
func helper(t *testing.T) {}
func BenchmarkX(b *testing.B) {}
func TestTwo(t *testing.T) {}
`)
	got, err := TestFuncs(map[string][]byte{"p_test.go": src})
	require.NoError(t, err)
	assert.Equal(t, []string{"TestOne", "TestTwo"}, got)
}

func TestParseEventsCollectsTestsAndBuildFailures(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"m/a"}`,
		`{"Action":"run","Package":"m/a","Test":"TestX"}`,
		`{"Action":"output","Package":"m/a","Test":"TestX","Output":"=== RUN   TestX\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestX/sub","Output":"    x_test.go:9: boom\n"}`,
		`{"Action":"fail","Package":"m/a","Test":"TestX/sub","Elapsed":0}`,
		`{"Action":"fail","Package":"m/a","Test":"TestX","Elapsed":0.5}`,
		`{"Action":"pass","Package":"m/a","Test":"TestY","Elapsed":0}`,
		`{"Action":"fail","Package":"m/a","Elapsed":0.6}`,
		`{"ImportPath":"m/b","Action":"build-output","Output":"b.go:3: undefined: x\n"}`,
		`{"ImportPath":"m/b","Action":"build-fail"}`,
		`{"Action":"fail","Package":"m/b","Elapsed":0,"FailedBuild":"m/b"}`,
	}, "\n")
	run, err := parseEvents(strings.NewReader(stream), nil)
	require.NoError(t, err)
	a := run.Package("a")
	require.NotNil(t, a)
	assert.Equal(t, Fail, a.Test("TestX").Status)
	assert.Contains(t, a.Test("TestX").Output, "boom", "a subtest's output belongs to its top-level test")
	assert.Equal(t, Pass, a.Test("TestY").Status)
	assert.Equal(t, NotRun, a.Test("TestZ").Status)
	assert.Equal(t, []string{"TestX", "TestY"}, a.Order)
	assert.Equal(t, "boom", strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(FailureMessage(a.Test("TestX").Output)), "x_test.go:9:")))
	b := run.Package("b")
	require.NotNil(t, b)
	assert.True(t, b.BuildFailed)
	assert.Contains(t, b.Output, "undefined: x")
}

func TestFailureMessageDropsGoroutineDumps(t *testing.T) {
	msg := FailureMessage("=== RUN   TestX\npanic: deadlock: main bubble goroutine has exited but blocked goroutines remain\n\ngoroutine 7 [running]:\nmain.f()\n")
	assert.Contains(t, msg, "every goroutine needs an owner")
	assert.NotContains(t, msg, "main.f()")
}

func TestCatalogFindNamesValidLabs(t *testing.T) {
	c, err := LoadCatalog("testdata/fixture")
	require.NoError(t, err)
	for _, tc := range []struct{ description, name string }{
		{"the number", "1"},
		{"the number, two digits", "01"},
		{"the directory's name", "01-add"},
		{"the make target", "lab-01"},
		{"the directory's path", "labs/01-add/"},
	} {
		t.Run(tc.description, func(t *testing.T) {
			l, err := c.Find(tc.name)
			require.NoError(t, err, tc.name)
			assert.Equal(t, "01", l.Number)
		})
	}
	_, err = c.Find("7")
	require.True(t, errors.Is(err, ErrUnknownLab))
	assert.Contains(t, err.Error(), "01 (01-add), 02 (02-later)", "the error should list the valid labs")
	later, _ := c.Find("02")
	assert.False(t, later.Built())
	assert.Len(t, c.BuiltLabs(), 1)
}

func TestFilesToEditAreTheOnesWithTODOs(t *testing.T) {
	root := fixture(t)
	c, err := LoadCatalog(root)
	require.NoError(t, err)
	l, err := c.Find("01")
	require.NoError(t, err)
	write(t, root, "labs/01-add/script.lua", "-- TODO(lab 01): a file that is not Go is a file to edit too\n")
	write(t, root, "labs/01-add/doc.go", "// Package add has no TODO here.\npackage add\n")
	files, err := FilesToEdit(root, l)
	require.NoError(t, err)
	assert.Equal(t, []string{"add.go", "script.lua"}, files)

	write(t, root, "labs/01-add/add.go", "package add\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Sum(xs ...int) int { return 0 }\n")
	write(t, root, "labs/01-add/script.lua", "-- done\n")
	files, err = FilesToEdit(root, l)
	require.NoError(t, err)
	assert.Equal(t, []string{"add.go", "doc.go", "script.lua"}, files, "no TODO left: every source file")
}

func TestRaceRunsSkipTheExitSleepUnlessToldOtherwise(t *testing.T) {
	assert.Equal(t, "atexit_sleep_ms=0", noExitSleep(""))
	assert.Equal(t, "halt_on_error=1 atexit_sleep_ms=0", noExitSleep("halt_on_error=1"), "other options are kept")
	assert.Equal(t, "atexit_sleep_ms=500", noExitSleep("atexit_sleep_ms=500"), "a value the user chose wins")
}

func TestLabTestsFollowTheHintsOrder(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "labs", "01-x")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a_test.go"), []byte("package x\n\nimport \"testing\"\n\nfunc TestLate(t *testing.T) {}\nfunc TestIntegrationRedis(t *testing.T) {}\nfunc TestUnhinted(t *testing.T) {}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b_test.go"), []byte("package x\n\nimport \"testing\"\n\nfunc TestEarly(t *testing.T) {}\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "HINTS.md"), []byte("# Hints\n\n"+hintSection("1. First step", "TestEarly, TestIntegrationRedis")+"\n"+hintSection("2. Second step", "TestLate")), 0o644))
	l := Lab{Number: "01", Dir: "01-x", Hints: "HINTS.md"}
	tests, err := LabTests(root, l)
	require.NoError(t, err)
	assert.Equal(t, []string{"TestEarly", "TestLate", "TestUnhinted", "TestIntegrationRedis"}, tests,
		"step order, not file order; a test no hint names after the rest; the real-Redis test last whatever its hint")
}

// TestEveryLabsHintsKeepTheRules reads the course's own HINTS.md files:
// each parses into hints of three hand-written levels, and each keeps the
// rules HintProblems states (labctl verify says the same, lab by lab).
func TestEveryLabsHintsKeepTheRules(t *testing.T) {
	c, err := LoadCatalog("../..")
	require.NoError(t, err)
	for _, l := range c.BuiltLabs() {
		hints, err := LoadHints("../..", l)
		if !assert.NoError(t, err, "lab %s", l.Number) {
			continue
		}
		nudges := map[string]string{}
		for _, h := range hints {
			for _, p := range HintProblems(h) {
				t.Errorf("lab %s %s, hint %q: %s", l.Number, l.Hints, h.Title, p)
			}
			if other, ok := nudges[h.Nudge]; ok {
				t.Errorf("lab %s: hints %q and %q have the same nudge", l.Number, other, h.Title)
			}
			nudges[h.Nudge] = h.Title
		}
	}
}
