package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The mock round against the course's own material. Standard input is
// empty, so every wait ends at once: the round reads like a script.

func TestInterviewRunsATimedRoundFromTheMaterial(t *testing.T) {
	t.Parallel()
	code, out, errOut := labctl(t, "../..", "interview", "--round", "design", "--n", "1", "--seed", "3")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "Mock interview, design round: 1 question(s). Seed 3")
	assert.Contains(t, out, "Question 1 of 1 · design · docs/interview/design.md:")
	assert.Contains(t, out, "Your time: 40m0s, from now.")
	assert.Contains(t, out, "You took ")
	for _, part := range []string{"Clarifying questions", "Estimate", "Design", "Failure modes", "Rubric"} {
		assert.Contains(t, out, "── "+part+" ──", "the design prompt's folded parts are shown after the answer")
	}
	assert.Contains(t, out, "| | mid | senior | staff |")
	asked := strings.Index(out, "Your time:")
	shown := strings.Index(out, "── Rubric ──")
	assert.Less(t, asked, shown, "the rubric comes after the reader's turn")
	assert.NotContains(t, out, "<details>", "the Markdown's folding is not printed")
}

var askedTitle = regexp.MustCompile(`(?m)^### (.+)$`)

func TestInterviewDrawsTheSameQuestionsForTheSameSeed(t *testing.T) {
	t.Parallel()
	titles := func(seed string) []string {
		code, out, errOut := labctl(t, "../..", "interview", "--round", "lightning", "--n", "4", "--seed", seed, "--time", "30s")
		require.Equal(t, 0, code, errOut)
		assert.Contains(t, out, "Your time: 30s")
		var got []string
		for _, m := range askedTitle.FindAllStringSubmatch(out, -1) {
			got = append(got, m[1])
		}
		return got
	}
	first := titles("11")
	require.Len(t, first, 4)
	assert.Equal(t, first, titles("11"))
}

func TestInterviewListsARoundWithoutItsAnswers(t *testing.T) {
	t.Parallel()
	code, out, errOut := labctl(t, "../..", "interview", "--round", "deep-dive", "--list")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "docs/interview/deep-dive-fleet.md:")
	assert.Contains(t, out, "docs/interview/deep-dive-gateway.md:")
	assert.Contains(t, out, "Set an SLO for the gateway and alert on it")
	assert.NotContains(t, out, "**The idea.**", "a list shows no answer")
	assert.NotContains(t, out, "lightning")
}

func TestInterviewRefusesABadCommandLineAndSaysWhereTheMaterialIs(t *testing.T) {
	t.Parallel()
	code, _, errOut := labctl(t, "../..", "interview", "--round", "trivia")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `no round "trivia"`)

	code, _, errOut = labctl(t, "../..", "interview", "design")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "takes flags only")

	code, _, errOut = labctl(t, fixture(t), "interview")
	assert.Equal(t, 1, code, "a checkout without the material")
	assert.Contains(t, errOut, "no interview material")
}
