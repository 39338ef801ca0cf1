package interview

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Dir is where the rounds live, relative to the repository root.
const Dir = "docs/interview"

// Round is one kind of interview round.
type Round string

// The rounds, in the order an interview loop usually runs them.
const (
	Lightning Round = "lightning"
	DeepDive  Round = "deep-dive"
	Debugging Round = "debugging"
	Design    Round = "design"
)

// Rounds lists every round.
var Rounds = []Round{Lightning, DeepDive, Debugging, Design}

// ParseRound reads a round's name.
func ParseRound(s string) (Round, error) {
	for _, r := range Rounds {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("no round %q (the rounds: %s)", s, roundNames())
}

func roundNames() string {
	var names []string
	for _, r := range Rounds {
		names = append(names, string(r))
	}
	return strings.Join(names, ", ")
}

// Part is one held-back block: its summary and its Markdown body.
type Part struct {
	Summary string
	Body    string
	Line    int // of the <details> line
}

// Question is one level-3 heading of a round's file with what follows it.
type Question struct {
	Round  Round
	File   string // slash-separated, relative to the repository root
	Line   int    // of the heading
	Title  string
	Prompt string // the visible text between the heading and the first block
	Parts  []Part
}

// Where is the question's file and line, for a reader to open.
func (q Question) Where() string { return fmt.Sprintf("%s:%d", q.File, q.Line) }

// Part finds the first part whose summary starts with prefix (any case).
func (q Question) Part(prefix string) (Part, bool) {
	for _, p := range q.Parts {
		if strings.HasPrefix(strings.ToLower(p.Summary), strings.ToLower(prefix)) {
			return p, true
		}
	}
	return Part{}, false
}

// Text is everything the question holds, visible and held back.
func (q Question) Text() string {
	var b strings.Builder
	b.WriteString(q.Title + "\n" + q.Prompt + "\n")
	for _, p := range q.Parts {
		b.WriteString(p.Summary + "\n" + p.Body + "\n")
	}
	return b.String()
}

var (
	roundLine   = regexp.MustCompile(`^<!--\s*round:\s*([a-z-]+)\s*-->$`)
	summaryLine = regexp.MustCompile(`^<summary>(.*)</summary>$`)
)

// Load reads every round file in root's Dir, in file name order.
func Load(root string) ([]Question, error) {
	files, err := filepath.Glob(filepath.Join(root, Dir, "*.md"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no interview material in %s: run labctl inside the course repository", filepath.Join(root, Dir))
	}
	sort.Strings(files)
	var all []Question
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		qs, err := Parse(Dir+"/"+filepath.Base(f), src)
		if err != nil {
			return nil, err
		}
		all = append(all, qs...)
	}
	return all, nil
}

// Of keeps the questions of one round.
func Of(qs []Question, r Round) []Question {
	var out []Question
	for _, q := range qs {
		if q.Round == r {
			out = append(out, q)
		}
	}
	return out
}

// reader is Parse's state: the file, the line it is on, the question and
// the block it is in.
type reader struct {
	file    string
	round   Round
	n       int
	out     []Question
	q       *Question
	part    *Part
	body    strings.Builder
	fence   string // the open fence's marker, "" outside one
	pending bool   // a <details> line seen, its <summary> not yet
}

// Parse reads one round's file. Every level-3 heading must have at least
// one <details> block, and every block a one-line <summary>.
func Parse(file string, src []byte) ([]Question, error) {
	p := &reader{file: file}
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		p.n++
		if err := p.line(sc.Text()); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, p.n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := p.end(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p.out, nil
}

func (p *reader) line(s string) error {
	trimmed := strings.TrimSpace(s)
	if p.inFence(trimmed) {
		return p.text(s)
	}
	switch {
	case p.pending:
		return p.summary(trimmed)
	case strings.HasPrefix(trimmed, "<details"):
		return p.open(trimmed)
	case trimmed == "</details>":
		return p.close()
	case strings.HasPrefix(s, "#"):
		return p.heading(s)
	case p.q == nil:
		return p.preamble(trimmed)
	}
	return p.text(s)
}

// inFence tracks fenced code blocks: nothing inside one is structure.
// It reports whether the line belongs to a fence (its markers included).
func (p *reader) inFence(trimmed string) bool {
	if p.fence != "" {
		if strings.HasPrefix(trimmed, p.fence) && strings.Trim(trimmed, p.fence[:1]) == "" {
			p.fence = ""
		}
		return true
	}
	for _, marker := range []string{"```", "~~~"} {
		if strings.HasPrefix(trimmed, marker) {
			p.fence = marker
			return true
		}
	}
	return false
}

func (p *reader) preamble(trimmed string) error {
	m := roundLine.FindStringSubmatch(trimmed)
	if m == nil {
		return nil
	}
	if p.round != "" {
		return errors.New("a second round line")
	}
	r, err := ParseRound(m[1])
	p.round = r
	return err
}

func (p *reader) heading(s string) error {
	level := len(s) - len(strings.TrimLeft(s, "#"))
	if p.part != nil {
		if level <= 3 {
			return errors.New("a heading of level 3 or above inside a <details> block: close the block first")
		}
		return p.text(s)
	}
	if level > 3 {
		return p.text(s)
	}
	if err := p.finish(); err != nil {
		return err
	}
	if level < 3 {
		return nil // a section of the round, not a question
	}
	if p.round == "" {
		return errors.New(`a question before the file's round line ("<!-- round: design -->")`)
	}
	p.q = &Question{Round: p.round, File: p.file, Line: p.n, Title: strings.TrimSpace(s[level:])}
	return nil
}

func (p *reader) open(trimmed string) error {
	switch {
	case p.part != nil:
		return errors.New("a <details> block inside another: nest none")
	case p.q == nil:
		return errors.New("a <details> block outside a question (under no ### heading)")
	}
	p.part = &Part{Line: p.n}
	p.body.Reset()
	rest := strings.TrimSpace(strings.TrimPrefix(trimmed, "<details>"))
	if rest == "" {
		p.pending = true
		return nil
	}
	return p.summary(rest)
}

func (p *reader) summary(trimmed string) error {
	if trimmed == "" {
		return nil // blank lines before the summary
	}
	p.pending = false
	m := summaryLine.FindStringSubmatch(trimmed)
	if m == nil || strings.TrimSpace(m[1]) == "" {
		return errors.New("a <details> block must start with a one-line <summary>…</summary>")
	}
	p.part.Summary = strings.TrimSpace(m[1])
	return nil
}

func (p *reader) close() error {
	if p.part == nil {
		return errors.New("</details> without a <details>")
	}
	p.part.Body = strings.Trim(p.body.String(), "\n")
	p.q.Parts = append(p.q.Parts, *p.part)
	p.part = nil
	return nil
}

// text adds a line to the open block's body or, before the question's
// first block, to its prompt. Text between two blocks, or after the last,
// would sit in plain sight once the reader opened a block, and no round
// would show it: it is an error unless blank.
func (p *reader) text(s string) error {
	switch {
	case p.part != nil:
		p.body.WriteString(s + "\n")
	case p.q != nil && len(p.q.Parts) == 0:
		p.q.Prompt += s + "\n"
	case p.q != nil && strings.TrimSpace(s) != "":
		return fmt.Errorf("%q: visible text after a held-back block: move it into a block, above the first one, or under a ## heading", p.q.Title)
	}
	return nil
}

// finish closes the current question.
func (p *reader) finish() error {
	q := p.q
	p.q = nil
	if q == nil {
		return nil
	}
	if len(q.Parts) == 0 {
		return fmt.Errorf("%q (line %d) has no held-back answer: add a <details> block", q.Title, q.Line)
	}
	q.Prompt = strings.Trim(q.Prompt, "\n")
	p.out = append(p.out, *q)
	return nil
}

func (p *reader) end() error {
	switch {
	case p.fence != "":
		return errors.New("a code fence opened and never closed")
	case p.part != nil || p.pending:
		return fmt.Errorf("the <details> block opened on line %d is never closed", p.part.Line)
	case p.round == "":
		return errors.New(`no round line ("<!-- round: design -->")`)
	}
	if err := p.finish(); err != nil {
		return err
	}
	if len(p.out) == 0 {
		return errors.New("no questions")
	}
	return nil
}
