package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Hint is one section of a lab's HINTS.md: a "## " heading, an optional
// "Tests: TestA, TestB" line naming the tests it helps with, and its three
// levels, each written by hand under a heading of its own:
//
//	## 2. The first-token limit
//	Tests: TestASilentUpstreamIsReplaced
//
//	### Nudge
//	A question, or a place to look: never code, never the answer.
//
//	### Approach
//	The idea in words: no code, no formula.
//
//	### Near-solution
//	Code, close to an answer but not the reference's.
//
// A red run shows the title and the nudge; `labctl hint` reveals the
// approach, then the near-solution, one level a call.
type Hint struct {
	Title    string
	Tests    []string
	Nudge    string
	Approach string
	Solution string // the near-solution
}

// The levels of a hint, from 1.
const (
	LevelNudge    = 1
	LevelApproach = 2
	LevelSolution = 3
)

// levelNames name the levels, from 1, as HINTS.md's level headings do.
var levelNames = []string{"", "nudge", "approach", "near-solution"}

// Levels returns the text shown at each level, from the nudge up.
func (h Hint) Levels() []Level {
	return []Level{{LevelNudge, h.Nudge}, {LevelApproach, h.Approach}, {LevelSolution, h.Solution}}
}

// Level is one level of a hint: which (LevelNudge…LevelSolution) and its text.
type Level struct {
	N    int
	Text string
}

// Name is "nudge", "approach" or "near-solution".
func (l Level) Name() string { return levelNames[l.N] }

// ErrNoHints is returned when a hints file has no "## " sections.
var ErrNoHints = errors.New("no hints: expected sections starting with \"## \"")

// ErrHintLevels is wrapped when a hint lacks one of its three levels, has
// them out of order, or has text outside them.
var ErrHintLevels = errors.New(`a hint needs "### Nudge", "### Approach" and "### Near-solution", in that order`)

// parseHints splits a HINTS.md into its sections, in order, each with its
// three levels.
func parseHints(text string) ([]Hint, error) {
	var hints []Hint
	var cur *Hint
	level := 0 // the level being read in cur, 0 before the first
	var body strings.Builder
	var errs []error
	flushLevel := func() {
		if cur == nil {
			return
		}
		t := strings.TrimSpace(body.String())
		switch level {
		case 0:
			if t != "" {
				errs = append(errs, fmt.Errorf("hint %q: text before its nudge: %w", cur.Title, ErrHintLevels))
			}
		case LevelNudge:
			cur.Nudge = t
		case LevelApproach:
			cur.Approach = t
		case LevelSolution:
			cur.Solution = t
		}
		body.Reset()
	}
	flush := func() {
		flushLevel()
		if cur != nil {
			if level != LevelSolution {
				errs = append(errs, fmt.Errorf("hint %q: %w", cur.Title, ErrHintLevels))
			}
			hints = append(hints, *cur)
		}
	}
	fenced := false
	for line := range strings.Lines(text) {
		trimmed := strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(strings.TrimSpace(trimmed), "```") {
			fenced = !fenced
		}
		if !fenced {
			if title, ok := strings.CutPrefix(trimmed, "## "); ok {
				flush()
				cur, level = &Hint{Title: strings.TrimSpace(title)}, 0
				continue
			}
			if name, ok := strings.CutPrefix(trimmed, "### "); ok && cur != nil {
				n := slices.Index(levelNames, strings.ToLower(strings.TrimSpace(name)))
				if n != level+1 {
					errs = append(errs, fmt.Errorf("hint %q: %q where level %d belongs: %w", cur.Title, trimmed, level+1, ErrHintLevels))
					continue
				}
				flushLevel()
				level = n
				continue
			}
		}
		if cur == nil {
			continue // the preamble before the first hint
		}
		if list, ok := strings.CutPrefix(trimmed, "Tests:"); ok && level == 0 && len(cur.Tests) == 0 && strings.TrimSpace(body.String()) == "" {
			for _, t := range strings.Split(list, ",") {
				if t = strings.TrimSpace(t); t != "" {
					cur.Tests = append(cur.Tests, t)
				}
			}
			continue
		}
		body.WriteString(line)
	}
	flush()
	if len(hints) == 0 {
		return nil, ErrNoHints
	}
	return hints, errors.Join(errs...)
}

// LoadHints reads and parses a lab's hints file.
func LoadHints(root string, l Lab) ([]Hint, error) {
	b, err := os.ReadFile(filepath.Join(root, l.LabDir(), l.Hints))
	if err != nil {
		return nil, fmt.Errorf("lab %s hints: %w", l.Number, err)
	}
	h, err := parseHints(string(b))
	if err != nil {
		return nil, fmt.Errorf("lab %s %s: %w", l.Number, l.Hints, err)
	}
	return h, nil
}

// HintFor returns the index of the first hint that names test, or -1.
func HintFor(hints []Hint, test string) int {
	for i, h := range hints {
		if slices.Contains(h.Tests, test) {
			return i
		}
	}
	return -1
}

// HintState remembers, per lab, how far each hint has been revealed — by
// `labctl hint`, or to its nudge alongside a failure by `labctl test` — so
// that `labctl hint NN` next shows one level more, and `labctl grade` can
// say how many near-solutions were opened. It lives in .labctl/hints.json,
// which git tracks (the rest of .labctl/ it ignores), so a grade in CI sees
// it too.
type HintState struct {
	path string
	// Revealed is lab number → hint number (1-based) → the highest level
	// shown (LevelNudge…LevelSolution).
	Revealed map[string]map[int]int `json:"revealed"`
	// Current is lab number → the hint the last red run pointed at.
	Current map[string]int `json:"current,omitempty"`
	// Shown and Seen are older formats: hints shown whole.
	Shown map[string][]int `json:"shown,omitempty"`
	Seen  map[string]int   `json:"seen,omitempty"`
}

// hintStateFile is where the hint progress lives, relative to the root.
const hintStateFile = ".labctl/hints.json"

// LoadHintState reads the hint progress under root; a missing file is an empty state.
func LoadHintState(root string) (*HintState, error) {
	s := &HintState{path: filepath.Join(root, hintStateFile), Revealed: map[string]map[int]int{}, Current: map[string]int{}}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(b, s); err != nil {
		return nil, fmt.Errorf("%s: %w (delete it to start the hints over)", s.path, err)
	}
	if s.Revealed == nil {
		s.Revealed = map[string]map[int]int{}
	}
	if s.Current == nil {
		s.Current = map[string]int{}
	}
	for lab, n := range s.Seen {
		for k := 1; k <= n; k++ {
			s.Reveal(lab, k, LevelSolution)
		}
	}
	for lab, ks := range s.Shown {
		for _, k := range ks {
			s.Reveal(lab, k, LevelSolution)
		}
	}
	s.Seen, s.Shown = nil, nil
	return s, nil
}

// Reveal records that hint k of lab was shown up to level (never lowering it).
func (s *HintState) Reveal(lab string, k, level int) {
	if s.Revealed[lab] == nil {
		s.Revealed[lab] = map[int]int{}
	}
	s.Revealed[lab][k] = max(s.Revealed[lab][k], level)
}

// Level is how far hint k of lab has been revealed: 0 for not at all.
func (s *HintState) Level(lab string, k int) int { return s.Revealed[lab][k] }

// Done reports whether hint k of lab has been shown to its last level.
func (s *HintState) Done(lab string, k int, h Hint) bool {
	levels := h.Levels()
	return s.Level(lab, k) >= levels[len(levels)-1].N
}

// Next returns the hint `labctl hint` shows next: the one the last red run
// pointed at, while it has levels left; else the first with levels left;
// false when every hint was shown whole.
func (s *HintState) Next(lab string, hints []Hint) (int, bool) {
	if k := s.Current[lab]; k >= 1 && k <= len(hints) && !s.Done(lab, k, hints[k-1]) {
		return k, true
	}
	for k := 1; k <= len(hints); k++ {
		if !s.Done(lab, k, hints[k-1]) {
			return k, true
		}
	}
	return 0, false
}

// NextLevel is the level `labctl hint` shows of hint k next.
func (s *HintState) NextLevel(lab string, k int, h Hint) Level {
	shown := s.Level(lab, k)
	levels := h.Levels()
	for _, l := range levels {
		if l.N > shown {
			return l
		}
	}
	return levels[len(levels)-1]
}

// Opened counts the hints of lab whose near-solution, the code, was shown:
// every hint has one to offer, and labctl shows it only at the last level.
func (s *HintState) Opened(lab string, hints []Hint) (opened, offered int) {
	for k := range hints {
		offered++
		if s.Level(lab, k+1) >= LevelSolution {
			opened++
		}
	}
	return opened, offered
}

// Reset forgets how far lab's hints were revealed.
func (s *HintState) Reset(lab string) {
	delete(s.Revealed, lab)
	delete(s.Current, lab)
}

// Save writes the state back.
func (s *HintState) Save() error {
	if err := os.MkdirAll(filepath.Dir(s.path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(s.path, append(b, '\n'), 0o644)
}

// What a hint's levels may hold. A nudge and an approach are words: a
// code span in them may name a thing to look at (an identifier, a
// qualified name, a call with no arguments, a file), never an expression;
// and outside code spans they hold no formula. A near-solution is code.
var (
	hintSpan     = regexp.MustCompile("`[^`]*`")
	nameSpan     = regexp.MustCompile("^`[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*(\\(\\))?`$|^`[A-Za-z0-9_./-]+\\.(go|lua|md|json)`$")
	formula      = regexp.MustCompile(`[=<>≤≥×÷*+^·−]|[A-Za-z0-9_]\(`)
	indentedCode = regexp.MustCompile(`(?m)^(    |\t)\S`)
)

// maxNudge bounds a nudge: a question or a place to look, not a lesson.
const maxNudge = 240

// HintProblems lists what breaks the rules for hand-written levels: every
// level present; the title, nudge and approach free of code and formulas;
// the nudge short and not part of the approach; the near-solution holding
// code. Empty when the hint keeps them.
func HintProblems(h Hint) []string {
	var out []string
	words := func(what, text string) {
		if strings.Contains(text, "```") || indentedCode.MatchString(text) {
			out = append(out, what+" holds a code block")
		}
		for _, span := range hintSpan.FindAllString(text, -1) {
			if !nameSpan.MatchString(span) {
				out = append(out, fmt.Sprintf("%s holds code: %s (name a thing to look at, not an expression)", what, span))
			}
		}
		if m := formula.FindString(hintSpan.ReplaceAllString(text, "")); m != "" {
			out = append(out, fmt.Sprintf("%s holds a formula or a call (%q): say it in words", what, m))
		}
	}
	words("the title", h.Title)
	switch {
	case h.Nudge == "":
		out = append(out, "the nudge is empty")
	case len(h.Nudge) > maxNudge:
		out = append(out, fmt.Sprintf("the nudge is %d bytes: a question or a place to look, at most %d", len(h.Nudge), maxNudge))
	}
	words("the nudge", h.Nudge)
	if h.Approach == "" {
		out = append(out, "the approach is empty")
	}
	words("the approach", h.Approach)
	flat := func(s string) string { return strings.ToLower(strings.Join(strings.Fields(s), " ")) }
	if n := flat(h.Nudge); n != "" && strings.Contains(flat(h.Approach), strings.TrimRight(n, ".?!")) {
		out = append(out, "the nudge is part of the approach: write it on its own")
	}
	if !strings.Contains(h.Solution, "```") {
		out = append(out, "the near-solution holds no code block")
	}
	return out
}
