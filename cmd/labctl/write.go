package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/write"
)

// cmdWrite is the test-writing track: the learner's tests against the
// reference, then against each mutant; the last line is the score.
func cmdWrite(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	path := fs.Bool("path", false, "lay the reference out and print the file you edit for this lab, then exit")
	self := fs.Bool("self-check", false, "maintainers: score the reference's own tests through the same harness (must kill every mutant)")
	mutants := fs.String("mutants", "", "instructors: `dir` of held-back mutants; DIR/NN-topic/*.patch are scored with the shipped ones")
	show := fs.String("show", "", "print the patch of a shipped mutant your tests already kill (`name`)")
	testsFile := fs.String("tests", "", "score this test `file` instead of the ones in write/NN-topic (it must be in the lab's package)")
	fresh := fs.Bool("fresh", false, "run everything again instead of reusing remembered verdicts")
	oneByOne := fs.Bool("one-by-one", false, "build each mutant on its own instead of all in one test binary (slower; for checking the shared build)")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of the table")
	l, rest, err := trackCommand(e, fs, "write", args, catalog.TrackWrite)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: labctl write takes one lab, got %q too", errUsage, strings.Join(rest, " "))
	}
	file := filepath.ToSlash(filepath.Join(write.DirOf(l), write.File))
	c, err := catalog.Load(e.root)
	if err != nil {
		return err
	}
	kit, err := write.LoadKit(e.root, c, l)
	if err != nil {
		return err
	}
	if !*self {
		created, err := kit.Materialize(e.root)
		if err != nil {
			return err
		}
		if created {
			fmt.Fprintf(e.stderr, "write %s: created %s; the reference you test is next to it\n", l.Number, file)
		}
	}
	if *path { // after laying the reference out, so the file and what it tests are there
		fmt.Fprintln(e.stdout, file)
		return nil
	}
	rep, err := write.Run(ctx, write.Options{Root: e.root, Lab: l, SelfCheck: *self, MutantsDir: *mutants, Fresh: *fresh, OneByOne: *oneByOne, Log: e.stderr, TestsFile: *testsFile})
	if err != nil {
		return err
	}
	if *show != "" {
		return showMutant(e, l, kit, rep, *show)
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printWrite(e, rep, *self)
	if *self && rep.Killed < rep.Total {
		return errRed // the reference's own tests must kill every mutant
	}
	return nil
}

func printWrite(e *env, rep *write.Report, self bool) {
	w := e.stdout
	fmt.Fprintf(w, "lab %s (%s), test-writing track: %s\n", rep.Number, rep.Title, strings.Join(rep.Files, ", "))
	switch {
	case rep.BuildError != "":
		fmt.Fprintf(w, "\nyour tests do not build:\n%s\n", gotest.Indent(rep.BuildError, 2))
	case rep.Problem != "":
		fmt.Fprintf(w, "\n%s\n", rep.Problem)
	}
	if len(rep.Tests) > 0 {
		fmt.Fprintln(w, "\non the correct code:")
		for _, t := range rep.Tests {
			if t.Counts {
				fmt.Fprintf(w, "  ✓ %s (%.2fs)\n", t.Name, t.Seconds)
				continue
			}
			fmt.Fprintf(w, "  ✗ %s %s: it counts for nothing\n", t.Name, t.Why)
			if t.Message != "" {
				fmt.Fprintf(w, "%s\n", gotest.Indent(t.Message, 6))
			}
		}
	}
	fmt.Fprintln(w)
	t := table(w)
	fmt.Fprintln(t, "mutant\tverdict")
	for _, m := range rep.Mutants {
		name := m.Name
		if m.HeldBack {
			name += " (held back)"
		}
		switch {
		case m.Problem != "":
			fmt.Fprintf(t, "%s\tbroken mutant: %s\n", name, strings.SplitN(m.Problem, "\n", 2)[0])
		case m.Killed:
			fmt.Fprintf(t, "%s\tkilled by %s\n", name, strings.Join(m.KilledBy, ", "))
		default:
			fmt.Fprintf(t, "%s\tsurvived: %s\n", name, m.Survived)
		}
	}
	t.Flush()
	var survivors []write.MutantResult
	for _, m := range rep.Mutants {
		if !m.Killed && m.Problem == "" && m.Nudge != "" && (len(rep.Tests) > 0 || self) {
			survivors = append(survivors, m)
		}
	}
	if len(survivors) > 0 {
		fmt.Fprintln(w, "\nwhat the survivors break (a nudge, not the patch):")
		for _, m := range survivors {
			fmt.Fprintf(w, "  %s: %s\n", m.Name, m.Nudge)
			for _, d := range m.Discounted {
				fmt.Fprintf(w, "      (not counted: %s)\n", d)
			}
		}
	}
	if rep.HeldBackTotal > 0 {
		k, n := rep.Shipped()
		fmt.Fprintf(w, "\nshipped: %d/%d, held back: %d/%d\n", k, n, rep.HeldBackKilled, rep.HeldBackTotal)
	}
	fmt.Fprintln(w, rep.Line())
}

// showMutant prints a shipped mutant's patch once the learner's tests kill
// it: reading a bug you have caught is the lesson; reading one you have
// not is the answer.
func showMutant(e *env, l catalog.Lab, kit *write.Kit, rep *write.Report, name string) error {
	for _, m := range rep.Mutants {
		if m.Name != name {
			continue
		}
		switch {
		case m.HeldBack:
			return fmt.Errorf("%w: %s is a held-back mutant; its patch stays with the instructor", errUsage, name)
		case !m.Killed:
			return fmt.Errorf("%w: your tests do not kill %s yet, so its patch stays hidden; what it breaks: %s", errUsage, name, m.Nudge)
		}
		for _, km := range kit.Mutants {
			if km.Name == name {
				fmt.Fprint(e.stdout, km.Patch)
				return nil
			}
		}
	}
	return fmt.Errorf("%w: lab %s has no mutant %q (labctl write %s lists them)", errUsage, l.Number, name, l.Number)
}
