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

// HintState remembers, per lab, which hints a learner has been shown — by
// `labctl hint` or alongside a failure by `labctl test` — so that `labctl
// hint NN` next shows one they have not seen. It lives in .labctl/ (ignored
// by git).
type HintState struct {
	path  string
	Shown map[string][]int `json:"shown"` // lab number → hint numbers (1-based), sorted
	// Seen is the older format: lab number → hints 1..n were seen.
	Seen map[string]int `json:"seen,omitempty"`
}

// LoadHintState reads the hint progress under root; a missing file is an empty state.
func LoadHintState(root string) (*HintState, error) {
	s := &HintState{path: filepath.Join(root, ".labctl", "hints.json"), Shown: map[string][]int{}}
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
	if s.Shown == nil {
		s.Shown = map[string][]int{}
	}
	for lab, n := range s.Seen {
		for k := 1; k <= n; k++ {
			s.MarkShown(lab, k)
		}
	}
	s.Seen = nil
	return s, nil
}

// MarkShown records that hint k of lab was shown.
func (s *HintState) MarkShown(lab string, k int) {
	if i, found := slices.BinarySearch(s.Shown[lab], k); !found {
		s.Shown[lab] = slices.Insert(s.Shown[lab], i, k)
	}
}

// Next returns the first of hints 1..n of lab not shown yet; false when all were.
func (s *HintState) Next(lab string, n int) (int, bool) {
	for k := 1; k <= n; k++ {
		if !slices.Contains(s.Shown[lab], k) {
			return k, true
		}
	}
	return 0, false
}

// Reset forgets which hints of lab were shown.
func (s *HintState) Reset(lab string) { delete(s.Shown, lab) }

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
