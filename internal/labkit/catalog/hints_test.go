package catalog

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseHintsSplitsSectionsTestsAndLevels(t *testing.T) {
	hints, err := parseHints("# Lab hints\n\npreamble\n\n## 1. First\nTests: TestA, TestB\n\n### Nudge\nWhere?\n\n### Approach\nThe idea.\n\n### Near-solution\nCode:\n\n```go\n### not a heading inside code\nx := 1\n```\n\n" +
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

	_, err = parseHints("no sections at all")
	assert.ErrorIs(t, err, ErrNoHints)
	for name, text := range map[string]string{
		"no near-solution":    "## 1. A\n### Nudge\nn\n### Approach\na\n",
		"out of order":        "## 1. A\n### Approach\na\n### Nudge\nn\n### Near-solution\ns\n",
		"text before a level": "## 1. A\nSome prose.\n### Nudge\nn\n### Approach\na\n### Near-solution\ns\n",
		"a level twice":       "## 1. A\n### Nudge\nn\n### Nudge\nm\n### Approach\na\n### Near-solution\ns\n",
	} {
		_, err := parseHints(text)
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

// TestEveryLabsHintsKeepTheRules reads the course's own HINTS.md files:
// each parses into hints of three hand-written levels, and each keeps the
// rules HintProblems states (labctl verify says the same, lab by lab).
func TestEveryLabsHintsKeepTheRules(t *testing.T) {
	c, err := Load("../../..")
	require.NoError(t, err)
	for _, l := range c.BuiltLabs() {
		hints, err := LoadHints("../../..", l)
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
