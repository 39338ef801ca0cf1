package interview

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// All mixes every round in one draw.
const All Round = "all"

// budgets is how long each round gives one question by default: what a
// loop of interviews usually allows, the follow-ups included.
var budgets = map[Round]time.Duration{
	Lightning: time.Minute,
	DeepDive:  15 * time.Minute,
	Debugging: 10 * time.Minute,
	Design:    40 * time.Minute,
}

// counts is how many questions a round draws by default.
var counts = map[Round]int{Lightning: 5, DeepDive: 2, Debugging: 2, Design: 1, All: 4}

// Budget is the default time for one question of the round.
func Budget(r Round) time.Duration { return budgets[r] }

// Count is the default number of questions a round draws.
func Count(r Round) int { return counts[r] }

// Draw picks n questions of the round (of every round for All) in an
// order the seed fixes: the same seed draws the same questions.
func Draw(qs []Question, r Round, n int, seed uint64) []Question {
	pool := qs
	if r != All {
		pool = Of(qs, r)
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	out := make([]Question, 0, min(n, len(pool)))
	for _, i := range rng.Perm(len(pool)) {
		if len(out) == n {
			break
		}
		out = append(out, pool[i])
	}
	return out
}

// Input is where the reader's answers come from, a line at a time. Next
// returns io.EOF once the input has ended.
type Input interface {
	Next(ctx context.Context) (string, error)
}

// Config is one mock round.
type Config struct {
	Round  Round
	Budget time.Duration // per question; 0: each question's round default
	Seed   uint64        // printed, so that a draw can be repeated
	Now    func() time.Time
	Out    io.Writer
	In     Input
}

// Result is how one question went.
type Result struct {
	Question Question
	Took     time.Duration
	Budget   time.Duration
}

// errStop ends a round early: the reader typed q.
var errStop = errors.New("stopped")

// Run asks the questions one at a time: it shows a question and its time
// budget, waits for Enter, says how long the reader took and shows what
// was held back (the answer, the rubric). It returns what was asked; at
// the end of input it carries on without waiting, so a round reads the
// same from a script.
func Run(ctx context.Context, qs []Question, cfg Config) ([]Result, error) {
	w := cfg.Out
	fmt.Fprintf(w, "Mock interview, %s round: %d question(s). Seed %d (--seed %d draws the same again).\n",
		cfg.Round, len(qs), cfg.Seed, cfg.Seed)
	fmt.Fprintln(w, "Answer out loud or on paper before you look: say the idea, the number and the trade-off.")
	var results []Result
	for i, q := range qs {
		if i > 0 {
			fmt.Fprintf(w, "\nEnter for question %d of %d, q then Enter to stop: ", i+1, len(qs))
			if err := wait(ctx, cfg.In); err != nil {
				return results, ended(err)
			}
		}
		r, err := ask(ctx, cfg, q, i, len(qs))
		if err != nil {
			return results, ended(err)
		}
		results = append(results, r)
	}
	Summarise(w, results)
	return results, nil
}

// ended is nil for a reader who stopped, the error otherwise.
func ended(err error) error {
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// ask shows one question, times the reader and shows what was held back.
func ask(ctx context.Context, cfg Config, q Question, i, n int) (Result, error) {
	w := cfg.Out
	budget := cfg.Budget
	if budget == 0 {
		budget = Budget(q.Round)
	}
	fmt.Fprintf(w, "\n%s\nQuestion %d of %d · %s · %s\n\n### %s\n", rule, i+1, n, q.Round, q.Where(), q.Title)
	if q.Prompt != "" {
		fmt.Fprintf(w, "\n%s\n", q.Prompt)
	}
	fmt.Fprintf(w, "\nYour time: %s, from now. Press Enter when you have answered (q then Enter stops): ", budget)
	start := cfg.Now()
	if err := wait(ctx, cfg.In); err != nil {
		return Result{}, err
	}
	took := cfg.Now().Sub(start).Round(time.Second)
	fmt.Fprintf(w, "\n%s\n", verdict(took, budget))
	for _, p := range q.Parts {
		fmt.Fprintf(w, "\n── %s ──\n\n%s\n", p.Summary, p.Body)
	}
	return Result{Question: q, Took: took, Budget: budget}, nil
}

const rule = "════════════════════════════════════════════════════════════════════════"

// verdict says how the reader's time compares with the budget.
func verdict(took, budget time.Duration) string {
	if took > budget {
		return fmt.Sprintf("You took %s of %s: over by %s. In the room, say the headline first and offer the detail.", took, budget, took-budget)
	}
	return fmt.Sprintf("You took %s of %s.", took, budget)
}

// wait blocks for a line: nil on Enter or at the end of input, errStop on q.
func wait(ctx context.Context, in Input) error {
	line, err := in.Next(ctx)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return err
	case strings.EqualFold(strings.TrimSpace(line), "q"):
		return errStop
	}
	return nil
}

// Summarise prints one line per question asked: the time taken against
// the budget.
func Summarise(w io.Writer, results []Result) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s\nThe round: %d question(s)\n", rule, len(results))
	var over int
	for _, r := range results {
		mark := "within"
		if r.Took > r.Budget {
			mark, over = "over", over+1
		}
		fmt.Fprintf(w, "  %-6s %8s of %-6s %s\n", mark, r.Took, r.Budget, r.Question.Title)
	}
	fmt.Fprintf(w, "%d of %d within time. ", len(results)-over, len(results))
	if slices.ContainsFunc(results, func(r Result) bool { _, ok := r.Question.Part("Rubric"); return ok }) {
		fmt.Fprintln(w, "Grade yourself on each rubric's columns: what did you leave out that the next column has?")
		return
	}
	fmt.Fprintln(w, "Did each answer say the idea, a number and the trade-off?")
}

// LineReader reads lines on a goroutine of its own, so that a cancelled
// context (Ctrl-C) ends a wait even while a read blocks on a terminal.
type LineReader struct {
	lines chan string
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	file  bool
}

// Lines starts reading r. Close it when done.
func Lines(r io.Reader) *LineReader {
	l := &LineReader{lines: make(chan string), stop: make(chan struct{}), done: make(chan struct{})}
	_, l.file = r.(*os.File)
	go l.read(r)
	return l
}

func (l *LineReader) read(r io.Reader) {
	defer close(l.done)
	defer close(l.lines)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		select {
		case l.lines <- sc.Text():
		case <-l.stop:
			return
		}
	}
}

// Next is the next line, io.EOF at the end of input, or the context's
// error once it is done.
func (l *LineReader) Next(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err // a line may be ready too: a cancelled wait wins
	}
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case s, ok := <-l.lines:
		if !ok {
			return "", io.EOF
		}
		return s, nil
	}
}

// Close stops the reading goroutine and waits for it, unless it reads a
// file: a read from a terminal returns only with a key, and the process
// ends first.
func (l *LineReader) Close() {
	l.once.Do(func() { close(l.stop) })
	if !l.file {
		<-l.done
	}
}
