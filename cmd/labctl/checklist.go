package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/internal/labkit/checklist"
)

func cmdChecklist(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	noRace := fs.Bool("no-race", false, "run the tests without the race detector")
	fresh := fs.Bool("fresh", false, "ignore the test cache (-count=1)")
	only := fs.String("only", "", "comma-separated item IDs or ID prefixes to run, e.g. ADM,SEC-4 (default: every item)")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if err := needsSolutions(e, "checklist"); err != nil {
		return err
	}
	c, err := checklist.Load(e.root)
	if err != nil {
		return err
	}
	if *only != "" {
		if c, err = selectItems(c, *only); err != nil {
			return err
		}
	}
	count := 0
	if *fresh {
		count = 1
	}
	return runChecklist(ctx, e, c, checklist.GoTestRunner(e.root, !*noRace, count, nil))
}

// runChecklist runs the checklist with run, printing progress to stderr
// and one line per item to stdout; any ✗ is errRed.
func runChecklist(ctx context.Context, e *env, c *checklist.Checklist, run checklist.Runner) error {
	started := time.Now()
	verdicts, err := checklist.Run(ctx, c, run, func(i, n int, r checklist.PackageRun) {
		tags := ""
		if r.Tags != "" {
			tags = " -tags " + r.Tags
		}
		fmt.Fprintf(e.stderr, "checklist: [%2d/%d] compiling and testing %s%s (%d tests)…\n", i+1, n, r.Package, tags, len(r.Tests))
	})
	if err != nil {
		return err
	}
	var kept int
	for _, v := range verdicts {
		fmt.Fprintln(e.stdout, v.Line())
		if v.OK() {
			kept++
		}
	}
	fmt.Fprintf(e.stdout, "\nchecklist: %d/%d items kept (%s)\n", kept, len(verdicts), time.Since(started).Round(time.Second))
	if kept < len(verdicts) {
		fmt.Fprintln(e.stdout, "a skipped or missing test is ✗: run a package's tests for the details, e.g. go test -race -run '^TestX$' ./solutions/…")
		return errRed
	}
	return nil
}

// selectItems keeps the items whose ID is, or starts with, one of the
// comma-separated selectors ("ADM" keeps ADM-1…; "SEC-4" keeps SEC-4).
func selectItems(c *checklist.Checklist, sel string) (*checklist.Checklist, error) {
	out := &checklist.Checklist{}
	for _, it := range c.Items {
		for _, s := range strings.Split(sel, ",") {
			s = strings.ToUpper(strings.TrimSpace(s))
			if it.ID == s || strings.HasPrefix(it.ID, s+"-") {
				out.Items = append(out.Items, it)
				break
			}
		}
	}
	if len(out.Items) == 0 {
		return nil, fmt.Errorf("%w: -only %s matches no checklist item", errUsage, sel)
	}
	return out, nil
}
