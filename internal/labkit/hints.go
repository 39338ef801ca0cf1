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

// HintState remembers, per lab, how many hints a learner has seen, so that
// `labctl hint NN` reveals them one at a time. It lives in .labctl/ (ignored by git).
type HintState struct {
	path string
	Seen map[string]int `json:"seen"`
}

// LoadHintState reads the hint progress under root; a missing file is an empty state.
func LoadHintState(root string) (*HintState, error) {
	s := &HintState{path: filepath.Join(root, ".labctl", "hints.json"), Seen: map[string]int{}}
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
	if s.Seen == nil {
		s.Seen = map[string]int{}
	}
	return s, nil
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
