package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit"
)

func cmdExport(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	skipTidy := fs.Bool("skip-tidy", false, "keep go.mod and go.sum as they are (no go mod tidy)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: labctl export DIR (a new or empty directory outside this repository)", errUsage)
	}
	rep, err := labkit.Export(ctx, labkit.ExportOptions{Root: e.root, Dir: pos[0], SkipTidy: *skipTidy, Log: e.stderr})
	if err != nil {
		return err
	}
	from := "this checkout"
	if rep.Commit != "" {
		from = "commit " + rep.Commit[:min(12, len(rep.Commit))]
	}
	fmt.Fprintf(e.stdout, "wrote the learner template of %s to %s: %d files\n", from, rep.Dir, rep.Files)
	fmt.Fprintf(e.stdout, "  pristine tests: %d files of %d labs in %s\n", rep.Tests, len(rep.Labs), labkit.PristineArchive)
	fmt.Fprintf(e.stdout, "  left out: solutions/ and their mutants, the apps, scripts/, maintainer CI; Makefile targets %s\n", strings.Join(rep.Dropped, " "))
	fmt.Fprintf(e.stdout, "\nnext: cd %s && git init -b main && git add -A && git commit -m 'Learner template' && make lab-01\n", rep.Dir)
	return nil
}
