package interview

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// script is an Input that answers from a list of lines, moving a fake
// clock on by the time each answer took; then io.EOF.
type script struct {
	lines []string
	took  []time.Duration
	now   time.Time
}

func (s *script) Next(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if len(s.lines) == 0 {
		return "", io.EOF
	}
	line := s.lines[0]
	s.lines = s.lines[1:]
	if len(s.took) > 0 {
		s.now = s.now.Add(s.took[0])
		s.took = s.took[1:]
	}
	return line, nil
}

func (s *script) clock() time.Time { return s.now }

func questions(t *testing.T) []Question {
	t.Helper()
	var src strings.Builder
	src.WriteString("<!-- round: debugging -->\n")
	for i := range 6 {
		fmt.Fprintf(&src, "### Symptom %d\n\nUsers see %d.\n\n<details><summary>Hypotheses</summary>\n\nCause %d.\n</details>\n\n<details><summary>Rubric</summary>\n\n| | mid | senior | staff |\n</details>\n\n", i, i, i)
	}
	qs, err := Parse("docs/interview/debugging.md", []byte(src.String()))
	require.NoError(t, err)
	return qs
}

func TestARoundShowsTheQuestionThenTheTimeTakenThenWhatWasHeldBack(t *testing.T) {
	qs := questions(t)[:2]
	in := &script{lines: []string{"", "", ""}, took: []time.Duration{3 * time.Minute, 0, 12 * time.Minute}}
	var out bytes.Buffer
	res, err := Run(t.Context(), qs, Config{Round: Debugging, Seed: 7, Now: in.clock, Out: &out, In: in})
	require.NoError(t, err)
	require.Len(t, res, 2)
	assert.Equal(t, 3*time.Minute, res[0].Took)
	assert.Equal(t, 10*time.Minute, res[0].Budget, "the round's default budget")
	assert.Equal(t, 12*time.Minute, res[1].Took)
	text := out.String()
	assert.Contains(t, text, "--seed 7 draws the same again")
	assert.Contains(t, text, "Question 1 of 2 · debugging · docs/interview/debugging.md:2")
	assert.Contains(t, text, "Your time: 10m0s")
	assert.Contains(t, text, "You took 3m0s of 10m0s.")
	assert.Contains(t, text, "You took 12m0s of 10m0s: over by 2m0s.")
	assert.Contains(t, text, "── Rubric ──")
	assert.Contains(t, text, "1 of 2 within time")
	question := strings.Index(text, "Users see 0.")
	took := strings.Index(text, "You took 3m0s")
	answer := strings.Index(text, "Cause 0.")
	assert.True(t, question < took && took < answer, "the question, then the time, then the answer")
}

func TestARoundStopsOnQAndCarriesOnAtTheEndOfInput(t *testing.T) {
	qs := questions(t)[:3]
	in := &script{lines: []string{"", "q"}}
	var out bytes.Buffer
	res, err := Run(t.Context(), qs, Config{Round: Debugging, Budget: time.Minute, Now: in.clock, Out: &out, In: in})
	require.NoError(t, err, "stopping is not an error")
	assert.Len(t, res, 1, "q before the second question stops the round")
	assert.NotContains(t, out.String(), "Users see 1.")

	in = &script{}
	out.Reset()
	res, err = Run(t.Context(), qs, Config{Round: Debugging, Now: in.clock, Out: &out, In: in})
	require.NoError(t, err)
	assert.Len(t, res, 3, "no input: every question and its answer, without waiting")
	assert.Contains(t, out.String(), "Cause 2.")
	assert.Contains(t, out.String(), "3 of 3 within time. Grade yourself on each rubric's columns")

	out.Reset()
	quick := Question{Round: Lightning, Title: "quick", Parts: []Part{{Summary: "Answer", Body: "yes"}}}
	_, err = Run(t.Context(), []Question{quick}, Config{Round: Lightning, Now: in.clock, Out: &out, In: &script{}})
	require.NoError(t, err)
	assert.Contains(t, out.String(), "Did each answer say the idea, a number and the trade-off?", "no rubric to grade against")
}

func TestARoundEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	in := &script{lines: []string{""}}
	_, err := Run(ctx, questions(t), Config{Round: Debugging, Now: in.clock, Out: io.Discard, In: in})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestTheSameSeedDrawsTheSameQuestions(t *testing.T) {
	qs := questions(t)
	lightning := Question{Round: Lightning, Title: "quick"}
	qs = append(qs, lightning)
	a := Draw(qs, Debugging, 3, 42)
	b := Draw(qs, Debugging, 3, 42)
	require.Len(t, a, 3)
	assert.Equal(t, a, b)
	assert.NotContains(t, a, lightning, "only the round asked for")
	var differs bool
	for seed := uint64(1); seed < 20 && !differs; seed++ {
		differs = Draw(qs, Debugging, 3, seed)[0].Title != a[0].Title
	}
	assert.True(t, differs, "another seed, another draw")
	assert.Len(t, Draw(qs, Debugging, 50, 1), 6, "no more than the round has")
	assert.Len(t, Draw(qs, All, 50, 1), 7, "all: every round")
	assert.Equal(t, time.Minute, Budget(Lightning))
	assert.Equal(t, 1, Count(Design))
}

func TestLinesReadsALineAtATimeAndStopsWhenClosed(t *testing.T) {
	l := Lines(strings.NewReader("first\nsecond\n"))
	s, err := l.Next(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "first", s)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = l.Next(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	l.Close() // with "second" unread: the goroutine must still end
	l.Close()

	l = Lines(strings.NewReader("only\n"))
	defer l.Close()
	_, _ = l.Next(t.Context())
	_, err = l.Next(t.Context())
	assert.ErrorIs(t, err, io.EOF)
}
