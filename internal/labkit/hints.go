package labkit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Hint is one section of a lab's HINTS.md: a "## " heading, an optional
// "Tests: TestA, TestB" line naming the tests it helps with, and a body.
type Hint struct {
	Title string
	Tests []string
	Body  string
}

// A hint is revealed a level at a time, so that a red run does not hand
// the learner the answer: the nudge (its first sentence: what to look at),
// the approach (all its prose, no code), and the near-solution (the whole
// section, code included). A section without code has two levels; one of a
// single sentence, one.
const (
	LevelNudge    = 1
	LevelApproach = 2
	LevelSolution = 3
)

// LevelNames name the levels, from 1.
var LevelNames = []string{"", "nudge", "approach", "near-solution"}

// Levels returns the text shown at each level, from the nudge up; each
// includes what the levels below it showed. Levels that would show nothing
// new are left out, so the last is always the whole body.
func (h Hint) Levels() []Level {
	prose := withoutCode(h.Body)
	nudge := firstSentence(prose)
	var out []Level
	add := func(n int, text string) {
		text = strings.TrimSpace(text)
		same := func(a, b string) bool {
			return strings.Join(strings.Fields(a), " ") == strings.Join(strings.Fields(b), " ")
		}
		if text == "" || (len(out) > 0 && same(out[len(out)-1].Text, text)) {
			return
		}
		out = append(out, Level{N: n, Text: text})
	}
	add(LevelNudge, nudge)
	add(LevelApproach, prose)
	add(LevelSolution, h.Body)
	if len(out) == 0 {
		out = append(out, Level{N: LevelSolution, Text: ""})
	}
	return out
}

// Level is one level of a hint: which (LevelNudge…LevelSolution) and its text.
type Level struct {
	N    int
	Text string
}

// Name is "nudge", "approach" or "near-solution".
func (l Level) Name() string { return LevelNames[l.N] }

// withoutCode is text with its fenced code blocks removed.
func withoutCode(text string) string {
	var b strings.Builder
	fenced := false
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(line)
		}
	}
	// Paragraphs that only introduced the code ("Like this:") end with a
	// colon; what is left reads on without the code.
	return strings.TrimSpace(b.String())
}

// firstSentence is the first sentence of text's first paragraph: up to a
// period, question or exclamation mark followed by a space or the end of
// the line, outside backquotes.
func firstSentence(text string) string {
	para, _, _ := strings.Cut(strings.TrimSpace(text), "\n\n")
	para = strings.Join(strings.Fields(para), " ")
	inCode := false
	for i, r := range para {
		switch {
		case r == '`':
			inCode = !inCode
		case !inCode && (r == '.' || r == '?' || r == '!' || r == ':') && (i+1 == len(para) || para[i+1] == ' '):
			if r == ':' {
				return para[:i] + "."
			}
			return para[:i+1]
		}
	}
	return para
}

// ErrNoHints is returned when a hints file has no "## " sections.
var ErrNoHints = errors.New("no hints: expected sections starting with \"## \"")

// ParseHints splits a HINTS.md into its sections, in order.
func ParseHints(text string) ([]Hint, error) {
	var hints []Hint
	var cur *Hint
	var body strings.Builder
	flush := func() {
		if cur != nil {
			cur.Body = strings.TrimSpace(body.String())
			hints = append(hints, *cur)
		}
		body.Reset()
	}
	for line := range strings.Lines(text) {
		trimmed := strings.TrimRight(line, "\r\n")
		if title, ok := strings.CutPrefix(trimmed, "## "); ok {
			flush()
			cur = &Hint{Title: strings.TrimSpace(title)}
			continue
		}
		if cur == nil {
			continue // the preamble before the first hint
		}
		if list, ok := strings.CutPrefix(trimmed, "Tests:"); ok && len(cur.Tests) == 0 && strings.TrimSpace(body.String()) == "" {
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
	return hints, nil
}

// LoadHints reads and parses a lab's hints file.
func LoadHints(root string, l Lab) ([]Hint, error) {
	b, err := os.ReadFile(filepath.Join(root, l.LabDir(), l.Hints))
	if err != nil {
		return nil, fmt.Errorf("lab %s hints: %w", l.Number, err)
	}
	h, err := ParseHints(string(b))
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

// HintStateFile is where the hint progress lives, relative to the root.
const HintStateFile = ".labctl/hints.json"

// LoadHintState reads the hint progress under root; a missing file is an empty state.
func LoadHintState(root string) (*HintState, error) {
	s := &HintState{path: filepath.Join(root, HintStateFile), Revealed: map[string]map[int]int{}, Current: map[string]int{}}
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

// Opened counts the hints of lab whose near-solution was shown: those that
// have one (code to show) and were revealed to it.
func (s *HintState) Opened(lab string, hints []Hint) (opened, offered int) {
	for k, h := range hints {
		levels := h.Levels()
		if levels[len(levels)-1].N != LevelSolution || len(levels) < 2 {
			continue
		}
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
