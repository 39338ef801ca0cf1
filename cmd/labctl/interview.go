package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/internal/interview"
)

func cmdInterview(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	round := fs.String("round", string(interview.Lightning), "the round: lightning, deep-dive, debugging, design, or all (mixed)")
	n := fs.Int("n", 0, "how many questions (default: 5 lightning, 2 deep-dive or debugging, 1 design, 4 mixed)")
	seed := fs.Uint64("seed", 0, "draw the questions with this seed, to repeat a round (0: a new draw, whose seed is printed)")
	budget := fs.Duration("time", 0, "time per question (default: 1m lightning, 15m deep-dive, 10m debugging, 40m design)")
	list := fs.Bool("list", false, "list the round's questions, without their answers, and exit")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: labctl interview takes flags only, e.g. labctl interview --round design", errUsage)
	}
	r := interview.All
	if *round != string(interview.All) {
		if r, err = interview.ParseRound(*round); err != nil {
			return fmt.Errorf("%w: %v, or all", errUsage, err)
		}
	}
	qs, err := interview.Load(e.root)
	if err != nil {
		return err
	}
	if *list {
		return listQuestions(e, qs, r)
	}
	if *n <= 0 {
		*n = interview.Count(r)
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano()%1_000_000) + 1
	}
	in := interview.Lines(e.stdin)
	defer in.Close()
	results, err := interview.Run(ctx, interview.Draw(qs, r, *n, *seed), interview.Config{
		Round: r, Budget: *budget, Seed: *seed, Now: time.Now, Out: e.stdout, In: in,
	})
	if errors.Is(err, context.Canceled) { // Ctrl-C: a way to stop, not a failure
		fmt.Fprintln(e.stdout)
		interview.Summarise(e.stdout, results)
		return nil
	}
	return err
}

// listQuestions prints the round's questions, one a line, with where each
// is in the material.
func listQuestions(e *env, qs []interview.Question, r interview.Round) error {
	t := table(e.stdout)
	for _, q := range qs {
		if r == interview.All || q.Round == r {
			fmt.Fprintf(t, "%s\t%s\t%s\n", q.Round, q.Where(), q.Title)
		}
	}
	return t.Flush()
}

func interviewDetails() string {
	var rounds []string
	for _, r := range interview.Rounds {
		rounds = append(rounds, fmt.Sprintf("  %-10s %s a question, %d drawn by default", r, interview.Budget(r), interview.Count(r)))
	}
	return `A mock interview round in the terminal, drawn from ` + interview.Dir + `/*.md (the index is
docs/interview-prep.md). Each question shows with its time budget; answer it out loud or on
paper, press Enter, and labctl says how long you took, then shows the answer, the follow-ups
and the rubric (mid, senior, staff) that the Markdown keeps folded. q then Enter stops.

The rounds:
` + strings.Join(rounds, "\n") + `

Examples:
  labctl interview --round design            one system-design prompt, 40 minutes
  labctl interview --round lightning --n 10  ten one-minute questions
  labctl interview --round debugging --seed 7  the same draw as last time (the seed is printed)
  labctl interview --round deep-dive --list  what the round can ask, without the answers
  make interview ROUND=design                the same, through make (N=, SEED= too)
`
}
