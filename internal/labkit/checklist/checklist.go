// Package checklist reads the production-readiness checklist
// (checklist/PRODUCTION_READINESS.md), runs the tests each item names as its
// proof, and says which items hold (labctl checklist); a grade scores each
// lab's share of it (ScoreLab).
package checklist

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/testkit/redismark"
)

// checklistFile is the production-readiness checklist, relative to the root.
const checklistFile = "checklist/PRODUCTION_READINESS.md"

// ErrMalformed is wrapped by every error in the checklist's format.
var ErrMalformed = errors.New("bad checklist")

// Proof is one package's share of an item's proof: the tests in
// that package that must pass, and the build tags they need.
type Proof struct {
	Package string   // relative to the root, e.g. solutions/02-admission
	Tags    string   // -tags value, "" for none
	Tests   []string // top-level test names
}

// Item is one promise of the checklist.
type Item struct {
	ID      string // CONC-1, ADM-3, …: stable, never reused
	Promise string // the line a report prints
	Why     string
	Proofs  []Proof
	Line    int // where the item starts in the file
}

// TestCount is how many tests prove the item.
func (it Item) TestCount() int {
	var n int
	for _, p := range it.Proofs {
		n += len(p.Tests)
	}
	return n
}

// Checklist is the parsed checklist, items in file order.
type Checklist struct {
	Items []Item
}

var (
	itemLine   = regexp.MustCompile(`^- \*\*([A-Z]+-[0-9]+)\*\* (.+)$`)
	itemStart  = regexp.MustCompile(`^- \*\*`)
	codeSpan   = regexp.MustCompile("`([^`]*)`")
	pkgToken   = regexp.MustCompile(`^[a-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$`)
	tagsToken  = regexp.MustCompile(`^-tags ([A-Za-z0-9_,]+)$`)
	testToken  = regexp.MustCompile(`^(Test|Fuzz)[A-Z0-9_][A-Za-z0-9_]*$`)
	fieldStart = regexp.MustCompile(`^  (Why|Proof): ?(.*)$`)
)

// Load reads and parses the checklist under root.
func Load(root string) (*Checklist, error) {
	data, err := os.ReadFile(filepath.Join(root, checklistFile))
	if err != nil {
		return nil, fmt.Errorf("read checklist: %w", err)
	}
	return Parse(data)
}

// Parse reads the checklist's items. An item is a list entry
//
//   - **ADM-3** Queue wait is measured as its own number
//     Why: a slow queue looks like a slow provider unless its wait is a number of its own.
//     Proof: `solutions/02-admission` `TestA`, `TestB`;
//     `solutions/08-gateway` `TestC`
//
// whose Proof names a package (a path with a slash), optionally `-tags x`,
// then that package's tests; a continuation line is indented two spaces.
// Everything else in the file is prose. Any malformed item is an error:
// a checklist that silently drops a line would print ✓ for less.
func Parse(data []byte) (*Checklist, error) {
	p := &checklistParser{seen: map[string]int{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		p.line(n, strings.TrimRight(sc.Text(), " \t"))
	}
	p.finish()
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(p.errs) > 0 {
		return nil, fmt.Errorf("%w: %s\n%w", ErrMalformed, checklistFile, errors.Join(p.errs...))
	}
	if len(p.items) == 0 {
		return nil, fmt.Errorf("%w: %s has no items (- **ID** promise)", ErrMalformed, checklistFile)
	}
	return &Checklist{Items: p.items}, nil
}

// checklistParser is Parse's state between lines: the items read
// so far, the one being read and which of its fields a continuation line
// extends, and every error found (all are reported, not just the first).
type checklistParser struct {
	items   []Item
	seen    map[string]int // ID → the line that used it
	errs    []error
	inFence bool
	cur     *Item
	field   string // "why" or "proof": where a continuation line goes
	proof   strings.Builder
}

// line reads line n: a code fence, an item's first line, one of its
// fields or their continuation, or prose (which ends the item).
func (p *checklistParser) line(n int, line string) {
	if strings.HasPrefix(line, "```") {
		p.finish()
		p.inFence = !p.inFence
		return
	}
	if p.inFence {
		return
	}
	if m := itemLine.FindStringSubmatch(line); m != nil {
		p.start(n, m[1], m[2])
		return
	}
	if itemStart.MatchString(line) {
		p.finish()
		p.errs = append(p.errs, fmt.Errorf("line %d: an item starts with - **ID** where ID is like ADM-3: %q", n, line))
		return
	}
	if p.cur == nil {
		return
	}
	if m := fieldStart.FindStringSubmatch(line); m != nil {
		p.startField(m[1], m[2])
		return
	}
	if strings.HasPrefix(line, "  ") && strings.TrimSpace(line) != "" {
		p.continueField(n, line)
		return
	}
	p.finish()
}

// start begins item id on line n, after finishing the one before.
func (p *checklistParser) start(n int, id, promise string) {
	p.finish()
	if prev, dup := p.seen[id]; dup {
		p.errs = append(p.errs, fmt.Errorf("line %d: %s is already used on line %d", n, id, prev))
	}
	p.seen[id] = n
	p.cur = &Item{ID: id, Promise: strings.TrimSuffix(strings.TrimSpace(promise), "."), Line: n}
}

// startField reads a "Why:" or "Proof:" line.
func (p *checklistParser) startField(name, text string) {
	p.field = strings.ToLower(name)
	if p.field == "why" {
		p.cur.Why = strings.TrimSpace(text)
	} else {
		p.proof.WriteString(text + " ")
	}
}

// continueField adds an indented line to the field above it.
func (p *checklistParser) continueField(n int, line string) {
	switch p.field {
	case "why":
		p.cur.Why += " " + strings.TrimSpace(line)
	case "proof":
		p.proof.WriteString(strings.TrimSpace(line) + " ")
	default:
		p.errs = append(p.errs, fmt.Errorf("line %d: %s: a line under an item must start with Why or Proof (and a colon)", n, p.cur.ID))
	}
}

// finish checks the item being read, if any, and adds it to the list.
func (p *checklistParser) finish() {
	if p.cur == nil {
		return
	}
	if err := p.cur.parseProof(p.proof.String()); err != nil {
		p.errs = append(p.errs, fmt.Errorf("line %d: %s: %w", p.cur.Line, p.cur.ID, err))
	}
	if p.cur.Why == "" {
		p.errs = append(p.errs, fmt.Errorf("line %d: %s has no Why: line", p.cur.Line, p.cur.ID))
	}
	p.items = append(p.items, *p.cur)
	p.cur, p.field = nil, ""
	p.proof.Reset()
}

// parseProof reads the code spans of a Proof: a package, its optional
// tags, its tests; then the next package. Prose between spans is ignored.
func (it *Item) parseProof(text string) error {
	if strings.TrimSpace(text) == "" {
		return errors.New("no Proof: line")
	}
	var cur *Proof
	for _, m := range codeSpan.FindAllStringSubmatch(text, -1) {
		tok := m[1]
		switch {
		case tagsToken.MatchString(tok):
			if cur == nil || len(cur.Tests) > 0 {
				return fmt.Errorf("`%s` must follow a package, before its tests", tok)
			}
			cur.Tags = tagsToken.FindStringSubmatch(tok)[1]
		case pkgToken.MatchString(tok):
			if cur != nil && len(cur.Tests) == 0 {
				return fmt.Errorf("package %s names no test", cur.Package)
			}
			it.Proofs = append(it.Proofs, Proof{Package: strings.TrimPrefix(tok, "./")})
			cur = &it.Proofs[len(it.Proofs)-1]
		case testToken.MatchString(tok):
			if cur == nil {
				return fmt.Errorf("test %s comes before any package", tok)
			}
			if slices.Contains(cur.Tests, tok) {
				return fmt.Errorf("test %s is named twice", tok)
			}
			cur.Tests = append(cur.Tests, tok)
		default:
			return fmt.Errorf("`%s` in a Proof is neither a package, `-tags x`, nor a test name", tok)
		}
	}
	if cur == nil {
		return errors.New("the Proof names no package")
	}
	if len(cur.Tests) == 0 {
		return fmt.Errorf("package %s names no test", cur.Package)
	}
	return nil
}

// PackageRun is one `go test` of one package for the checklist.
type PackageRun struct {
	Package string
	Tags    string
	Tests   []string
}

// Runner runs one package's tests and returns its result. The
// real one is GoTestRunner; tests pass a fake.
type Runner func(ctx context.Context, r PackageRun) (*gotest.PackageResult, error)

// Runs groups the checklist's tests into one run per package and tag set,
// in file order.
func (c *Checklist) Runs() []PackageRun {
	var runs []PackageRun
	index := map[[2]string]int{}
	for _, it := range c.Items {
		for _, p := range it.Proofs {
			k := [2]string{p.Package, p.Tags}
			i, ok := index[k]
			if !ok {
				i = len(runs)
				index[k] = i
				runs = append(runs, PackageRun{Package: p.Package, Tags: p.Tags})
			}
			for _, t := range p.Tests {
				if !slices.Contains(runs[i].Tests, t) {
					runs[i].Tests = append(runs[i].Tests, t)
				}
			}
		}
	}
	return runs
}

// runRegexp is the -run pattern selecting exactly these top-level tests.
func runRegexp(tests []string) string {
	q := make([]string, len(tests))
	for i, t := range tests {
		q[i] = regexp.QuoteMeta(t)
	}
	return "^(" + strings.Join(q, "|") + ")$"
}

// GoTestRunner runs a package's checklist tests with `go test -json`.
func GoTestRunner(root string, race bool, count int, onEvent func(gotest.Event)) Runner {
	return func(ctx context.Context, r PackageRun) (*gotest.PackageResult, error) {
		run, err := gotest.RunTests(ctx, gotest.RunOptions{
			Dir: root, Packages: []string{"./" + r.Package}, Race: race, Count: count,
			Run: runRegexp(r.Tests), Tags: r.Tags, Timeout: 10 * time.Minute, OnEvent: onEvent,
		})
		if err != nil {
			return nil, err
		}
		p := run.Package(r.Package)
		if p == nil {
			return nil, fmt.Errorf("go test reported nothing for %s: %s", r.Package, strings.TrimSpace(run.Stderr))
		}
		return p, nil
	}
}

// ItemVerdict is the checklist's verdict on one item.
type ItemVerdict struct {
	Item     Item
	Problems []string // "TestX failed", "TestY missing", "TestZ skipped: …"; empty when kept
}

// OK reports whether every test that proves the item passed.
func (v ItemVerdict) OK() bool { return len(v.Problems) == 0 }

// Line is the report's line for the item:
//
//	✓ ADM-3 Queue wait is measured as its own number (2 tests)
//	✗ ADM-3 Queue wait is measured as its own number (TestX failed | TestY missing)
func (v ItemVerdict) Line() string {
	promise := strings.ReplaceAll(v.Item.Promise, "`", "")
	if v.OK() {
		n := v.Item.TestCount()
		s := "s"
		if n == 1 {
			s = ""
		}
		return fmt.Sprintf("✓ %s %s (%d test%s)", v.Item.ID, promise, n, s)
	}
	return fmt.Sprintf("✗ %s %s (%s)", v.Item.ID, promise, strings.Join(v.Problems, " | "))
}

// Run runs every package the checklist names, one at a time,
// calling progress before each, and judges every item. An error means the
// run itself could not go on (the context ended); a package that cannot
// be tested turns its items ✗ with the reason.
func Run(ctx context.Context, c *Checklist, run Runner, progress func(i, n int, r PackageRun)) ([]ItemVerdict, error) {
	runs := c.Runs()
	results := map[[2]string]*gotest.PackageResult{}
	failures := map[[2]string]error{}
	for i, r := range runs {
		if progress != nil {
			progress(i, len(runs), r)
		}
		p, err := run(ctx, r)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		k := [2]string{r.Package, r.Tags}
		results[k], failures[k] = p, err
	}
	verdicts := make([]ItemVerdict, len(c.Items))
	for i, it := range c.Items {
		v := ItemVerdict{Item: it}
		for _, pr := range it.Proofs {
			k := [2]string{pr.Package, pr.Tags}
			v.Problems = append(v.Problems, proofProblems(pr, results[k], failures[k])...)
		}
		verdicts[i] = v
	}
	return verdicts, nil
}

// proofProblems says what keeps one package's share of a proof from
// holding. Only a pass counts: a skip, a missing test, a test that never
// ran and a package that failed around passing tests are all problems.
func proofProblems(pr Proof, p *gotest.PackageResult, runErr error) []string {
	if runErr != nil || p == nil {
		reason := "no result"
		if runErr != nil {
			reason = gotest.FirstLine(runErr.Error())
		}
		return []string{fmt.Sprintf("%s: %s", pr.Package, reason)}
	}
	if p.BuildFailed {
		return []string{pr.Package + " does not build"}
	}
	var problems []string
	for _, t := range pr.Tests {
		res := p.Test(t)
		switch res.Status {
		case gotest.Pass:
		case gotest.Fail:
			problems = append(problems, t+" failed")
		case gotest.Skip:
			problems = append(problems, t+" skipped: "+skipReason(res.Output))
		default:
			if p.Status == gotest.Fail {
				problems = append(problems, t+" did not run (the package failed before it)")
			} else {
				problems = append(problems, t+" missing")
			}
		}
	}
	// A package that failed with every test in it passing failed around
	// them (TestMain, goleak, a panic after the last test): what it proved
	// does not hold. When one of its tests failed, that test says why.
	anyFailed := false
	for _, r := range p.Tests {
		anyFailed = anyFailed || r.Status == gotest.Fail || r.Status == gotest.NotRun
	}
	if !anyFailed && p.Status == gotest.Fail {
		problems = append(problems, pr.Package+" failed outside its tests (TestMain, goleak): "+gotest.Collapse(gotest.LastLines(p.Output, 3)))
	}
	return problems
}

// skipReason is why a test skipped, in a few words.
func skipReason(output string) string {
	if r, ok := redismark.SkipReason(output); ok {
		r, _, _ = strings.Cut(r, " (install")
		return "no Redis (" + strings.TrimPrefix(r, "no Redis server: ") + ")"
	}
	for _, line := range strings.Split(output, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- SKIP") {
			continue
		}
		if _, msg, ok := strings.Cut(line, ": "); ok && strings.Contains(line, "_test.go:") {
			return msg
		}
		return line
	}
	return "no reason given"
}

// LabScore is what the checklist says about one lab: the items whose
// proof includes tests of that lab's package.
type LabScore struct {
	Kept  int       `json:"kept"`
	Total int       `json:"total"`
	Items []LabItem `json:"items"`
}

// LabItem is one checklist item as far as one lab proves it.
type LabItem struct {
	ID      string   `json:"id"`
	Promise string   `json:"promise"`
	Kept    bool     `json:"kept"`
	Tests   []string `json:"tests"`
}

// ForLab lists the items a lab's tests help prove, with the lab's tests
// for each (the proof in solutions/NN-x or labs/NN-x).
func (c *Checklist) ForLab(dir string) []LabItem {
	var out []LabItem
	for _, it := range c.Items {
		var tests []string
		for _, p := range it.Proofs {
			if p.Package == "solutions/"+dir || p.Package == "labs/"+dir {
				tests = append(tests, p.Tests...)
			}
		}
		if len(tests) > 0 {
			out = append(out, LabItem{ID: it.ID, Promise: it.Promise, Tests: tests})
		}
	}
	return out
}

// ScoreLab marks the lab's items kept when every one of the lab's
// tests for it passed; nil when no item names the lab.
func ScoreLab(c *Checklist, dir string, passed func(test string) bool) *LabScore {
	items := c.ForLab(dir)
	if len(items) == 0 {
		return nil
	}
	lc := &LabScore{Total: len(items)}
	for i := range items {
		items[i].Kept = !slices.ContainsFunc(items[i].Tests, func(t string) bool { return !passed(t) })
		if items[i].Kept {
			lc.Kept++
		}
	}
	lc.Items = items
	return lc
}

// compactIDs writes checklist IDs the way the course map's checklist
// column does: in the order given, a run of three or more consecutive
// numbers of one prefix as "ADM-1…9", the rest one by one.
func compactIDs(ids []string) string {
	type id struct {
		prefix string
		n      int
		raw    string
	}
	var parsed []id
	for _, s := range ids {
		prefix, num, ok := strings.Cut(s, "-")
		n, err := strconv.Atoi(num)
		if !ok || err != nil {
			n = -1
		}
		parsed = append(parsed, id{prefix, n, s})
	}
	var out []string
	for i := 0; i < len(parsed); {
		j := i + 1
		for j < len(parsed) && parsed[i].n >= 0 && parsed[j].prefix == parsed[i].prefix && parsed[j].n == parsed[j-1].n+1 {
			j++
		}
		if j-i >= 3 {
			out = append(out, fmt.Sprintf("%s…%d", parsed[i].raw, parsed[j-1].n))
		} else {
			for k := i; k < j; k++ {
				out = append(out, parsed[k].raw)
			}
		}
		i = j
	}
	return strings.Join(out, ", ")
}
