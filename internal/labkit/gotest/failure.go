package gotest

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/production-go/gateway-lab/internal/testkit/redismark"
)

// A test's output is a sequence of reports: each t.Error, t.Log or testify
// assertion prints one, starting with "file_test.go:NN:" and continuing on
// more deeply indented lines. A learner needs the first failing one, short;
// an instructor's summary needs one line of it.

// reportStart matches the first line of a report: "    file_test.go:75: text".
var reportStart = regexp.MustCompile(`^(\s*)([\w.\-]+\.go:\d+):\s?(.*)$`)

// report is one t.Error/t.Log/assertion block of a test's output.
type report struct {
	subtest string   // "TestX/case" when a subtest printed it
	where   string   // "file_test.go:75"
	lines   []string // the text, dedented; lines[0] is what followed "file:line:"
	indent  int      // indentation of the where line
}

// isLog reports whether the block is one the helpers print on the way, not
// a failure: the real-Redis line and the seed replay line.
func (r report) isLog() bool {
	first := strings.Join(r.lines, " ")
	return strings.HasPrefix(first, redismark.Real) || strings.HasPrefix(first, "random seed ")
}

// isSeed reports whether the block is testkit's seed replay line.
func (r report) isSeed() bool {
	return len(r.lines) > 0 && strings.HasPrefix(r.lines[0], "random seed ")
}

// parseReports splits a test's output into its reports. Lines that belong to
// no report (a panic, a deadlock message) each form one report without a
// where; a goroutine dump ends the parse with a note instead of the stacks.
func parseReports(output string) []report {
	var out []report
	var cur *report
	subtest := ""
	flush := func() {
		if cur != nil {
			out = append(out, *cur)
			cur = nil
		}
	}
	for line := range strings.Lines(output) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			continue
		}
		// A report's own lines are indented deeper than its first line and
		// than any frame line around it, so read them before the frames:
		// testify's diff has lines that start with "--- " too.
		if m := reportStart.FindStringSubmatch(line); m != nil {
			flush()
			cur = &report{subtest: subtest, where: m[2], lines: []string{m[3]}, indent: len(m[1])}
			continue
		}
		if cur != nil && indentOf(line) > cur.indent {
			cur.lines = append(cur.lines, dedent(line, cur.indent+4))
			continue
		}
		flush()
		switch {
		case isFrame(trimmed, "=== RUN", "=== NAME", "=== CONT"):
			if f := strings.Fields(trimmed); len(f) > 2 {
				subtest = f[2]
			}
			continue
		case isFrame(trimmed, "=== PAUSE", "--- FAIL:", "--- PASS:", "--- SKIP:"):
			continue
		case strings.HasPrefix(trimmed, "goroutine ") && strings.HasSuffix(trimmed, ":"):
			out = append(out, report{subtest: subtest, lines: []string{"(goroutine stacks omitted: go test -v on the package shows them)"}})
			return out
		}
		r := report{subtest: subtest, lines: []string{trimmed}}
		if strings.Contains(trimmed, "main bubble goroutine has exited but blocked goroutines remain") {
			r.lines = append(r.lines, "a goroutine started by your code was still running when the test's function returned:",
				"every goroutine needs an owner that waits for it to finish.")
		}
		out = append(out, r)
	}
	flush()
	return out
}

// isFrame reports whether a trimmed line is one of go test's own frame lines.
func isFrame(trimmed string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(trimmed, p) {
			return true
		}
	}
	return false
}

func indentOf(line string) int { return len(line) - len(strings.TrimLeft(line, " \t")) }

// dedent removes up to n leading spaces (go test indents continuation lines
// with spaces; testify's fields then start with a tab, which stays).
func dedent(line string, n int) string {
	for i := 0; i < n && strings.HasPrefix(line, " "); i++ {
		line = line[1:]
	}
	return line
}

// testifyField reads one line of a testify block: "\tLabel:   \tvalue" or a
// continuation "\t         \tvalue". label is "" for a continuation.
func testifyField(line string) (label, value string, ok bool) {
	rest, ok := strings.CutPrefix(line, "\t")
	if !ok {
		return "", "", false
	}
	head, value, ok := strings.Cut(rest, "\t")
	if !ok {
		return "", "", false
	}
	head = strings.TrimSpace(head)
	if head != "" && !strings.HasSuffix(head, ":") {
		return "", "", false
	}
	return strings.TrimSuffix(head, ":"), strings.TrimLeft(value, "\t"), true
}

// testify reads a testify assertion block into its message and the lines of
// its Error field up to (not including) a diff. ok is false for other blocks.
func (r report) testify() (message string, errLines []string, ok bool) {
	field := ""
	for _, l := range r.lines[1:] {
		label, value, isField := testifyField(l)
		if !isField {
			continue
		}
		if label != "" {
			field = label
		}
		switch field {
		case "Error":
			if strings.TrimSpace(value) == "Diff:" {
				field = "Diff"
				continue
			}
			if v := strings.TrimSpace(value); v != "" {
				errLines = append(errLines, v)
			}
		case "Messages":
			message = strings.TrimSpace(strings.Join([]string{message, value}, " "))
		}
		ok = true
	}
	return message, errLines, ok && len(errLines) > 0
}

// text renders a report for a person: where, the author's message, then what
// the assertion expected and got; testify's trace and test-name lines dropped.
func (r report) text() string {
	head, rest := r.lines[0], r.lines[1:]
	if msg, errLines, ok := r.testify(); ok {
		head, rest = msg, errLines
	}
	var b strings.Builder
	if r.where != "" {
		b.WriteString(r.where + ":")
		if head != "" {
			b.WriteString(" ")
		}
	}
	b.WriteString(head)
	for _, l := range rest {
		b.WriteString("\n    " + strings.TrimLeft(l, "\t"))
	}
	return b.String()
}

// headline is the report in one line.
func (r report) headline() string {
	if msg, errLines, ok := r.testify(); ok {
		detail := strings.Join(errLines, " ")
		if msg == "" {
			return Collapse(detail)
		}
		return Collapse(msg + " — " + detail)
	}
	return Collapse(strings.Join(r.lines, " "))
}

// Collapse folds runs of white space and caps the line at 240 characters.
func Collapse(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 240 {
		s = string(r[:239]) + "…"
	}
	return s
}

// failures are the reports that say what went wrong (logs left out).
func failures(output string) []report {
	var out []report
	for _, r := range parseReports(output) {
		if !r.isLog() {
			out = append(out, r)
		}
	}
	return out
}

// FirstFailure is the first failing report of a test's output, short: where,
// the message, what was expected and what came. more counts the reports
// after it; a seed replay line, if the test printed one, is added at the end.
func FirstFailure(output string) (text string, more int) {
	fs := failures(output)
	if len(fs) == 0 {
		return strings.TrimSpace(FailureMessage(output)), 0
	}
	first := fs[0]
	text = first.text()
	if first.subtest != "" && strings.Contains(first.subtest, "/") {
		text = first.subtest + ":\n" + text
	}
	for _, r := range parseReports(output) {
		if r.isSeed() {
			text += "\n" + r.text()
		}
	}
	return text, len(fs) - 1
}

// Headline is a test's failure in one line, for a summary table: the first
// failing report's message and what the assertion expected and got. A
// missing Redis gives the reason it skipped.
func Headline(output string) string {
	if reason, ok := redismark.SkipReason(output); ok {
		return "skipped: " + reason
	}
	fs := failures(output)
	if len(fs) == 0 {
		return ""
	}
	h := fs[0].headline()
	if len(fs) > 1 {
		h += fmt.Sprintf(" (+%d more)", len(fs)-1)
	}
	return h
}

// FailureMessage trims a failed test's output to what a person acts on: every
// report, without the RUN/FAIL frame lines and without goroutine stacks.
func FailureMessage(output string) string {
	var parts []string
	for _, r := range parseReports(output) {
		parts = append(parts, r.text())
	}
	return strings.Join(parts, "\n")
}

// Indent prefixes every line of s but blank ones with n spaces.
func Indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for line := range strings.Lines(strings.TrimRight(s, "\n")) {
		if strings.TrimSpace(line) != "" {
			b.WriteString(pad)
		}
		b.WriteString(line)
	}
	return b.String()
}

// FirstLine returns the first line of s.
func FirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
