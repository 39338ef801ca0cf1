package interview

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The tests below hold the real material in docs/interview to what its
// index promises: every answer held back, every rubric in three columns,
// every estimate recomputing to the figures its prose quotes, every code
// pointer resolving, and the topics an interviewer in this field asks.

// repoRoot is two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(r, "go.mod"))
	require.NoError(t, err, "no go.mod at %s", r)
	return r
}

func material(t *testing.T) []Question {
	t.Helper()
	qs, err := Load(repoRoot(t))
	require.NoError(t, err, "every question's answer sits in a <details> block (see the package doc)")
	return qs
}

// materialFiles are the round files and the index.
func materialFiles(t *testing.T) map[string]string {
	t.Helper()
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, Dir, "*.md"))
	require.NoError(t, err)
	files = append(files, filepath.Join(root, "docs", "interview-prep.md"))
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, f)
		out[filepath.ToSlash(rel)] = string(b)
	}
	return out
}

func TestEachRoundHasEnoughQuestionsToRunAMockInterview(t *testing.T) {
	qs := material(t)
	least := map[Round]int{Lightning: 25, DeepDive: 15, Debugging: 8, Design: 5}
	for r, n := range least {
		assert.GreaterOrEqual(t, len(Of(qs, r)), n, "the %s round", r)
	}
	titles := map[string]string{}
	for _, q := range qs {
		if prev, dup := titles[q.Title]; dup {
			t.Errorf("%s and %s ask the same question %q", prev, q.Where(), q.Title)
		}
		titles[q.Title] = q.Where()
		assert.NotEmpty(t, strings.TrimSpace(q.Parts[0].Body), "%s: an empty answer", q.Where())
	}
}

// rubricHeader is a table header naming the three levels in order.
var rubricHeader = regexp.MustCompile(`(?mi)^\|[^|\n]*\|\s*mid\s*\|\s*senior\s*\|\s*staff\s*\|\s*$`)

func TestEveryDesignPromptHasItsPartsAndAThreeColumnRubric(t *testing.T) {
	parts := []string{"Clarifying questions", "Estimate", "Design", "Failure modes", "Rubric"}
	for _, q := range Of(material(t), Design) {
		var got []string
		for _, p := range q.Parts {
			got = append(got, p.Summary)
		}
		assert.Equal(t, parts, got, "%s: a design prompt's parts, in the order a candidate reaches them", q.Where())
		if p, ok := q.Part("Estimate"); ok {
			assert.Contains(t, p.Body, "```estimate", "%s: the estimate has a table the tests recompute", q.Where())
		}
		rubric, _ := q.Part("Rubric")
		assert.Regexp(t, rubricHeader, rubric.Body, "%s: the rubric's columns are mid, senior, staff", q.Where())
	}
}

func TestEveryDeepDiveAndDebuggingQuestionHasARubricAndDeepDivesCiteASource(t *testing.T) {
	for _, q := range material(t) {
		if q.Round == Lightning {
			continue
		}
		rubric, ok := q.Part("Rubric")
		if assert.True(t, ok, "%s: no rubric", q.Where()) {
			assert.Regexp(t, rubricHeader, rubric.Body, "%s: the rubric's columns are mid, senior, staff", q.Where())
			assert.GreaterOrEqual(t, strings.Count(rubric.Body, "\n|"), 4, "%s: a rubric has at least three rows", q.Where())
		}
		if q.Round == DeepDive {
			answer, ok := q.Part("Answer")
			if assert.True(t, ok, "%s: no answer", q.Where()) {
				assert.Contains(t, answer.Body, "**Source.**", "%s: a deep dive cites its primary source", q.Where())
				for _, lead := range []string{"**The idea.**", "**The number.**", "**The trade-off.**"} {
					assert.Contains(t, answer.Body, lead, "%s: the answer leads with the idea, the number and the trade-off", q.Where())
				}
			}
			_, ok = q.Part("Follow-ups")
			assert.True(t, ok, "%s: a deep dive has follow-ups", q.Where())
		}
	}
}

var (
	fence      = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```\\s*$")
	whitespace = regexp.MustCompile(`\s+`)
)

// prose is a text without its fenced blocks, its whitespace collapsed, so
// that a figure wrapped over two lines still reads as quoted.
func prose(text string) string {
	return whitespace.ReplaceAllString(fence.ReplaceAllString(text, " "), " ")
}

func TestEveryEstimateRecomputesAndItsProseQuotesItsFigures(t *testing.T) {
	var blocks, quoted int
	for _, q := range material(t) {
		words := prose(q.Text())
		for _, p := range q.Parts {
			es, err := Estimates(p.Body)
			if !assert.NoError(t, err, "%s, in its %q block (line numbers count from the block's first line)", q.Where(), p.Summary) {
				continue
			}
			for _, e := range es {
				blocks++
				for _, f := range e.Figures {
					if f.Shown == "" {
						continue
					}
					quoted++
					assert.True(t, strings.Contains(words, whitespace.ReplaceAllString(f.Shown, " ")),
						"%s: %s is shown as %q, and the prose must quote it so", q.Where(), f.Name, f.Shown)
				}
			}
		}
	}
	assert.GreaterOrEqual(t, blocks, 18, "estimate blocks")
	assert.GreaterOrEqual(t, quoted, 80, "figures quoted in prose")
}

func TestTheMultiRegionGatewayEstimateTurnsTokensIntoWhatAnInterviewerAsksFor(t *testing.T) {
	var found bool
	for _, q := range Of(material(t), Design) {
		if !strings.Contains(q.Title, "multi-region") {
			continue
		}
		found = true
		es, err := Estimates(q.Text())
		require.NoError(t, err)
		names := map[string]float64{}
		for _, e := range es {
			for _, f := range e.Figures {
				names[f.Name] = f.Value
			}
		}
		for _, want := range []string{"tokens_per_s", "tpm", "rpm", "deployments", "egress_mbit_s", "fds", "replicas", "scripts", "dollars_day", "fleet_day"} {
			assert.Contains(t, names, want, "%s: the estimate has %s", q.Where(), want)
		}
		assert.InDelta(t, 108e6, names["tpm"], 1, "1.8 M tokens a second is 108 M TPM")
	}
	assert.True(t, found, "a design prompt for a multi-region LLM gateway")
}

func TestEveryCodePointerResolves(t *testing.T) {
	root := repoRoot(t)
	var n, runs int
	for file, text := range materialFiles(t) {
		for _, p := range Pointers(text) {
			n++
			if p.Run != "" {
				runs++
			}
			assert.NoError(t, p.Resolve(root), "%s points at something that is not there", file)
		}
	}
	assert.GreaterOrEqual(t, n, 150, "code pointers found")
	assert.GreaterOrEqual(t, runs, 60, "go test commands found")
}

var bareTestName = regexp.MustCompile("`(Test[A-Z][A-Za-z0-9_]*)`")

// A test's name is evidence to run, not a line to say in an interview: it
// appears only inside a go test command.
func TestTheMaterialNamesTestsOnlyInsideCommandsToRun(t *testing.T) {
	for file, text := range materialFiles(t) {
		for _, m := range bareTestName.FindAllStringSubmatch(text, -1) {
			t.Errorf("%s names %s on its own: put it in a `go test -run` command a reader can run", file, m[1])
		}
	}
}

// topics are what the material must reach: the missing topics as
// deep dives, and its design prompts.
var topics = []struct {
	round Round
	words []string // each must appear in one question's title or prompt (any case)
}{
	{DeepDive, []string{"two choices"}},
	{DeepDive, []string{"recovered", "still down"}},
	{DeepDive, []string{"slo", "alert"}},
	{DeepDive, []string{"deadline", "hops"}},
	{DeepDive, []string{"shed", "who goes first"}},
	{DeepDive, []string{"tied requests"}},
	{DeepDive, []string{"tpm", "rpm"}},
	{DeepDive, []string{"kv cache"}},
	{DeepDive, []string{"reads", "slowly"}},
	{DeepDive, []string{"three regions"}},
	{DeepDive, []string{"cost"}},
	{Design, []string{"llm gateway", "multi-region"}},
	{Design, []string{"token-budget", "thousands of tenants"}},
	{Design, []string{"streaming relay", "brown-outs"}},
	{Design, []string{"bill"}},
	{Design, []string{"rate limiter"}},
}

func TestTheMaterialReachesEveryTopicAnInterviewerAsks(t *testing.T) {
	qs := material(t)
	for _, topic := range topics {
		found := false
		for _, q := range Of(qs, topic.round) {
			text := strings.ToLower(q.Title + " " + q.Prompt)
			all := true
			for _, w := range topic.words {
				all = all && strings.Contains(text, w)
			}
			found = found || all
		}
		assert.True(t, found, "no %s question about %q", topic.round, topic.words)
	}
}

func TestTheIndexLinksEveryRound(t *testing.T) {
	files := materialFiles(t)
	index := files["docs/interview-prep.md"]
	require.NotEmpty(t, index)
	for file := range files {
		if name, ok := strings.CutPrefix(file, Dir+"/"); ok {
			assert.True(t, strings.Contains(index, "](interview/"+name), "the index links %s", file)
		}
	}
	assert.True(t, strings.Contains(index, "make interview"), "the index says how to run a mock round")
}

// GitHub renders Markdown inside a <details> block only when a blank line
// follows the summary, and ends a table or list cleanly only when one comes
// before </details>: without them the answer shows as raw text.
func TestEveryBlockRendersOnGitHub(t *testing.T) {
	for file, text := range materialFiles(t) {
		if !strings.HasPrefix(file, Dir+"/") {
			continue
		}
		lines := strings.Split(text, "\n")
		for i, line := range lines {
			switch strings.TrimSpace(line) {
			case "<details>":
				assert.True(t, i+2 < len(lines) && strings.HasPrefix(lines[i+1], "<summary>") && strings.TrimSpace(lines[i+2]) == "",
					"%s:%d: <details>, then <summary>…</summary> on its own line, then a blank line", file, i+1)
			case "</details>":
				assert.True(t, i > 0 && strings.TrimSpace(lines[i-1]) == "", "%s:%d: a blank line before </details>", file, i+1)
			}
		}
	}
}
