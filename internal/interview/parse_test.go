package interview

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `# A round

<!-- round: design -->

Some words about the round, visible, under no question.

## Prompts

### Design a rate limiter

For a public API.

<details>
<summary>Clarifying questions</summary>

What is limited?

` + "```sh\n### not a heading\n</details>\n```" + `

</details>

<details><summary>Rubric</summary>

| | mid | senior | staff |
| --- | --- | --- | --- |
| design | a | b | c |

#### a level-4 heading is body text

</details>

### Design a gateway

<details>
<summary>Answer</summary>
It routes.
</details>
`

func TestParseSplitsQuestionsIntoWhatIsShownAndWhatIsHeldBack(t *testing.T) {
	qs, err := Parse("docs/interview/x.md", []byte(sample))
	require.NoError(t, err)
	require.Len(t, qs, 2)
	q := qs[0]
	assert.Equal(t, Design, q.Round)
	assert.Equal(t, "Design a rate limiter", q.Title)
	assert.Equal(t, "docs/interview/x.md:9", q.Where())
	assert.Equal(t, "For a public API.", q.Prompt, "the prompt is what sits above the first block")
	require.Len(t, q.Parts, 2)
	assert.Equal(t, "Clarifying questions", q.Parts[0].Summary)
	assert.Contains(t, q.Parts[0].Body, "### not a heading\n</details>", "a fence's contents are not structure")
	assert.Equal(t, "Rubric", q.Parts[1].Summary, "a summary on the <details> line reads too")
	assert.Contains(t, q.Parts[1].Body, "#### a level-4 heading")
	rubric, ok := q.Part("rubric")
	require.True(t, ok)
	assert.Contains(t, rubric.Body, "| mid | senior | staff |")
	_, ok = q.Part("estimate")
	assert.False(t, ok)
	assert.Equal(t, "It routes.", qs[1].Parts[0].Body)
	assert.NotContains(t, q.Prompt+qs[1].Prompt, "Some words", "text under a ## heading belongs to no question")
}

func TestParseRefusesMaterialThatWouldShowAnAnswerOrHideAQuestion(t *testing.T) {
	cases := map[string]struct{ src, want string }{
		"no round line":            {"### Q\n<details>\n<summary>A</summary>\nx\n</details>\n", "round line"},
		"an unknown round":         {"<!-- round: trivia -->\n### Q\n", `no round "trivia"`},
		"a question with no block": {"<!-- round: design -->\n### Q\nthe answer, in plain sight\n### R\n<details><summary>A</summary>\n</details>\n", "has no held-back answer"},
		"text after a block":       {"<!-- round: design -->\n### Q\n<details><summary>A</summary>\nx\n</details>\nthe rubric, in plain sight\n", "visible text after a held-back block"},
		"a block without summary":  {"<!-- round: design -->\n### Q\n<details>\nx\n</details>\n", "one-line <summary>"},
		"nested blocks":            {"<!-- round: design -->\n### Q\n<details><summary>A</summary>\n<details><summary>B</summary>\n</details>\n</details>\n", "inside another"},
		"a block never closed":     {"<!-- round: design -->\n### Q\n<details><summary>A</summary>\nx\n", "never closed"},
		"a heading inside a block": {"<!-- round: design -->\n### Q\n<details><summary>A</summary>\n### R\n</details>\n", "inside a <details> block"},
		"a fence never closed":     {"<!-- round: design -->\n### Q\n<details><summary>A</summary>\n```\n</details>\n", "never closed"},
		"a stray close":            {"<!-- round: design -->\n</details>\n", "without a <details>"},
		"a block under no heading": {"<!-- round: design -->\n<details><summary>A</summary>\n</details>\n", "outside a question"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("x.md", []byte(c.src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.True(t, strings.HasPrefix(err.Error(), "x.md"), "the error says where: %v", err)
		})
	}
}

func TestLoadReadsEveryRoundFileAndSaysWhenThereIsNone(t *testing.T) {
	root := t.TempDir()
	_, err := Load(root)
	require.Error(t, err, "a directory with no material")
	assert.Contains(t, err.Error(), "no interview material")

	writeFile(t, root, Dir+"/b.md", "<!-- round: lightning -->\n### Two\n<details><summary>A</summary>\n2\n</details>\n")
	writeFile(t, root, Dir+"/a.md", sample)
	qs, err := Load(root)
	require.NoError(t, err)
	require.Len(t, qs, 3)
	assert.Equal(t, "docs/interview/a.md", qs[0].File, "files in name order")
	assert.Len(t, Of(qs, Lightning), 1)
	assert.Len(t, Of(qs, Design), 2)

	_, err = ParseRound("trivia")
	assert.ErrorContains(t, err, "lightning, deep-dive, debugging, design")
}
