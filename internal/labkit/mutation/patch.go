// Package mutation applies a lab's mutants — its classic bugs, one unified
// diff each in solutions/NN-topic/testdata/mutants — to the reference
// (ParsePatch), and folds many of them into one package, a mutant schema,
// so that one compile and one link serve them all (SchemaBuild). verify
// requires the reference's tests to kill every mutant; write scores a
// learner's tests by the mutants they kill.
//
// It is not called mutants: a learner template copies labctl's sources but
// no path with a mutants/ directory in it (export's templateSpec.copies).
package mutation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrPatch is wrapped by every error from ParsePatch and FilePatch.Apply.
var ErrPatch = errors.New("patch does not apply")

// FilePatch is the change a unified diff makes to one file.
type FilePatch struct {
	Path  string // relative to the directory the patch is applied in, without a/ or b/
	hunks []hunk
}

type hunk struct {
	oldStart int // 1-based
	lines    []string
}

// ParsePatch reads a unified diff (as `diff -u` or `git diff` write it).
// Lines before the first "--- " header are a free-form description and are
// ignored, which is where a mutant patch says which lesson it breaks.
func ParsePatch(text string) ([]FilePatch, error) {
	text = strings.TrimRight(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	lines := strings.Split(text, "\n")
	var files []FilePatch
	for i := 0; i < len(lines); i++ {
		if !strings.HasPrefix(lines[i], "--- ") || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "+++ ") {
			continue
		}
		path := stripPrefix(strings.TrimPrefix(lines[i+1], "+++ "))
		fp := FilePatch{Path: path}
		i += 2
		for i < len(lines) && strings.HasPrefix(lines[i], "@@ ") {
			start, err := parseHunkHeader(lines[i])
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrPatch, path, err)
			}
			h := hunk{oldStart: start}
			i++
			for i < len(lines) {
				l := lines[i]
				if l == "" || l[0] == ' ' || l[0] == '+' || l[0] == '-' {
					if strings.HasPrefix(l, "--- ") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "+++ ") {
						break
					}
					if l == "" {
						l = " "
					}
					h.lines = append(h.lines, l)
					i++
					continue
				}
				if strings.HasPrefix(l, `\ `) { // "\ No newline at end of file"
					i++
					continue
				}
				break
			}
			fp.hunks = append(fp.hunks, h)
		}
		i-- // the loop's i++ revisits the line that ended this file
		if len(fp.hunks) == 0 {
			return nil, fmt.Errorf("%w: %s has no hunks", ErrPatch, path)
		}
		files = append(files, fp)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%w: no \"--- a/file\" / \"+++ b/file\" headers found", ErrPatch)
	}
	return files, nil
}

func stripPrefix(p string) string {
	p, _, _ = strings.Cut(p, "\t") // diff -u appends a timestamp after a tab
	p = strings.TrimSpace(p)
	if strings.HasPrefix(p, "a/") || strings.HasPrefix(p, "b/") {
		p = p[2:]
	}
	return p
}

func parseHunkHeader(h string) (int, error) {
	// @@ -start[,len] +start[,len] @@
	fields := strings.Fields(h)
	if len(fields) < 3 || !strings.HasPrefix(fields[1], "-") {
		return 0, fmt.Errorf("bad hunk header %q", h)
	}
	num, _, _ := strings.Cut(fields[1][1:], ",")
	n, err := strconv.Atoi(num)
	if err != nil {
		return 0, fmt.Errorf("bad hunk header %q", h)
	}
	return n, nil
}

// Apply returns content with the patch's hunks applied. Context must match
// exactly; a hunk may have drifted from its line number (the file was edited
// above it), so the nearest exact match wins.
func (fp FilePatch) Apply(content string) (string, error) {
	out, _, err := fp.apply(content)
	return out, err
}

// Touched returns, for each hunk, the lines of the original content it
// covers (context and removed lines; for a pure insertion, the lines on
// either side), 1-based and inclusive.
func (fp FilePatch) Touched(content string) ([][2]int, error) {
	_, ranges, err := fp.apply(content)
	return ranges, err
}

func (fp FilePatch) apply(content string) (string, [][2]int, error) {
	var ranges [][2]int
	trailingNL := strings.HasSuffix(content, "\n")
	lines := strings.Split(strings.TrimSuffix(content, "\n"), "\n")
	offset := 0
	for _, h := range fp.hunks {
		var old, repl []string
		for _, l := range h.lines {
			switch l[0] {
			case ' ':
				old = append(old, l[1:])
				repl = append(repl, l[1:])
			case '-':
				old = append(old, l[1:])
			case '+':
				repl = append(repl, l[1:])
			}
		}
		want := h.oldStart - 1 + offset
		if len(old) == 0 {
			want = h.oldStart + offset // pure insertion: after line oldStart
		}
		at := findBlock(lines, old, want)
		if at < 0 {
			return "", nil, fmt.Errorf("%w: %s: hunk at line %d does not match the file", ErrPatch, fp.Path, h.oldStart)
		}
		if orig := at - offset; len(old) == 0 {
			ranges = append(ranges, [2]int{orig, orig + 1})
		} else {
			ranges = append(ranges, [2]int{orig + 1, orig + len(old)})
		}
		lines = append(lines[:at], append(repl, lines[at+len(old):]...)...)
		offset += len(repl) - len(old)
	}
	out := strings.Join(lines, "\n")
	if trailingNL {
		out += "\n"
	}
	return out, ranges, nil
}

// findBlock finds block in lines, searching outward from want.
func findBlock(lines, block []string, want int) int {
	matches := func(at int) bool {
		if at < 0 || at+len(block) > len(lines) {
			return false
		}
		for i, b := range block {
			if lines[at+i] != b {
				return false
			}
		}
		return true
	}
	for d := 0; d <= len(lines); d++ {
		if matches(want - d) {
			return want - d
		}
		if d > 0 && matches(want+d) {
			return want + d
		}
	}
	return -1
}

// RequiredKillers reads "# Must be killed by: TestA, TestB" lines.
func RequiredKillers(patch string) []string {
	var out []string
	for line := range strings.Lines(patch) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "# Must be killed by:")
		if !ok {
			continue
		}
		for _, name := range strings.Split(rest, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out = append(out, name)
			}
		}
	}
	return out
}
