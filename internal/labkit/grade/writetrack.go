package grade

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/checklist"
	"github.com/production-go/gateway-lab/internal/labkit/labfs"
	"github.com/production-go/gateway-lab/internal/labkit/mutation"
	"github.com/production-go/gateway-lab/internal/labkit/write"
)

// WriteGrade is a lab's test-writing track in a grade report: how many
// mutants the learner's tests kill, shipped and held back.
type WriteGrade struct {
	Killed         int    `json:"killed"`
	Total          int    `json:"total"`
	HeldBackKilled int    `json:"held_back_killed"`
	HeldBackTotal  int    `json:"held_back_total"`
	Tests          int    `json:"tests_that_count"`
	Note           string `json:"note,omitempty"` // no tests yet, does not build, …
	// Mutants is each mutant's fate: name, killed, held back, the nudge.
	Mutants []write.MutantResult `json:"mutants"`
	// Checklist is which items the learner's tests guard: an item is kept
	// when every mutant whose required killers are among its tests is
	// killed; items no mutant maps to are left out.
	Checklist *checklist.LabScore `json:"checklist,omitempty"`
}

// Line is "tests track: 12/29 mutants killed (held back 3/5)".
func (w *WriteGrade) Line() string {
	s := fmt.Sprintf("%d/%d mutants killed", w.Killed, w.Total)
	if w.HeldBackTotal > 0 {
		s += fmt.Sprintf(" (held back %d/%d)", w.HeldBackKilled, w.HeldBackTotal)
	}
	return s
}

// gradeWrite scores one lab's test-writing track, running nothing when the
// learner has written no test.
func gradeWrite(ctx context.Context, opts Options, c *catalog.Catalog, cl *checklist.Checklist, l catalog.Lab) (*WriteGrade, error) {
	// In a template graded with a pristine ref, the reference and the
	// shipped mutants come from the kit as that revision has it, not as the
	// learner left it (upstream, solutions/ is the kit).
	kitRef := ""
	if opts.PristineRef != "" && !labfs.IsDir(filepath.Join(opts.Root, "solutions")) {
		kitRef = opts.PristineRef
	}
	var k *write.Kit
	var err error
	if kitRef != "" {
		k, err = write.LoadKitAt(ctx, opts.Root, kitRef, c, l)
	} else {
		k, err = write.LoadKit(opts.Root, c, l)
	}
	if err != nil {
		return nil, err
	}
	held, err := write.HeldBackMutants(opts.MutantsDir, l)
	if err != nil {
		return nil, err
	}
	all := append(slices.Clone(k.Mutants), held...)
	wg := &WriteGrade{Total: len(all), HeldBackTotal: len(held)}
	if !write.HasTests(opts.Root, k) {
		wg.Note = "no tests written"
		for _, m := range all {
			wg.Mutants = append(wg.Mutants, write.MutantResult{Name: m.Name, HeldBack: m.HeldBack, Survived: "no tests written", Nudge: m.Nudge})
		}
	} else {
		// Fresh: the verdict cache lives in the submission, where anyone
		// could have written it.
		// Each mutant built on its own: a grade is the exact verdict, not
		// the shared build's (which a test counting allocations or
		// reading its call stack could tell apart; docs/instructor-guide.md).
		rep, err := write.Run(ctx, write.Options{Root: opts.Root, Lab: l, MutantsDir: opts.MutantsDir, Log: opts.Log, Fresh: true, OneByOne: true, KitRef: kitRef})
		if err != nil {
			return nil, err
		}
		wg.Killed, wg.HeldBackKilled, wg.Mutants = rep.Killed, rep.HeldBackKilled, rep.Mutants
		for _, t := range rep.Tests {
			if t.Counts {
				wg.Tests++
			}
		}
		switch {
		case rep.BuildError != "":
			wg.Note = "the tests do not build"
		case rep.Problem != "":
			wg.Note, _, _ = strings.Cut(rep.Problem, "\n")
		}
	}
	if cl != nil {
		wg.Checklist = writeChecklist(cl, l, all, wg.Mutants)
	}
	return wg, nil
}

// writeChecklist maps mutants to checklist items through the tests each
// patch says must kill it.
func writeChecklist(cl *checklist.Checklist, l catalog.Lab, all []write.Mutant, fates []write.MutantResult) *checklist.LabScore {
	items := cl.ForLab(l.Dir)
	killed := map[string]bool{}
	for _, f := range fates {
		killed[f.Name] = f.Killed
	}
	lc := &checklist.LabScore{}
	for _, it := range items {
		linked, kept := 0, true
		for _, m := range all {
			if !slices.ContainsFunc(mutation.RequiredKillers(m.Patch), func(t string) bool { return slices.Contains(it.Tests, t) }) {
				continue
			}
			linked++
			kept = kept && killed[m.Name]
		}
		if linked == 0 {
			continue
		}
		it.Kept = kept
		if kept {
			lc.Kept++
		}
		lc.Total++
		lc.Items = append(lc.Items, it)
	}
	if lc.Total == 0 {
		return nil
	}
	return lc
}
