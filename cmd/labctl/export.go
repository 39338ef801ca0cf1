package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/export"
)

// exportDetails is what `labctl export -h` says after its flags: what each
// template holds, from the same description the export follows.
func exportDetails() string {
	return "There are two templates, one per track, because each track's answers are the other's\n" +
		"material (docs/instructor-guide.md, \"Two templates\").\n\n" + export.TemplateContents()
}

func cmdExport(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	skipTidy := fs.Bool("skip-tidy", false, "keep go.mod and go.sum as they are (no go mod tidy)")
	track := fs.String("track", string(catalog.TrackLabs), "the `track` the template holds: labs (the stubs and exercise tests) or write (the references to write tests for)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: labctl export [-track labs|write] DIR (a new or empty directory outside this repository)", errUsage)
	}
	rep, err := export.Run(ctx, export.Options{Root: e.root, Dir: pos[0], Track: catalog.Track(*track), SkipTidy: *skipTidy, Log: e.stderr})
	if errors.Is(err, export.ErrAnswerInTemplate) {
		return fmt.Errorf("%w\nthe course leaks an answer into its template: change the file named, or the answer, and export again", err)
	}
	if err != nil {
		return err
	}
	from := "this checkout"
	if rep.Commit != "" {
		from = "commit " + rep.Commit[:min(12, len(rep.Commit))]
	}
	fmt.Fprintf(e.stdout, "wrote %s of %s to %s: %d files\n", export.TemplateName(rep.Track), from, rep.Dir, rep.Files)
	switch rep.Track {
	case catalog.TrackLabs:
		fmt.Fprintf(e.stdout, "  pristine tests: %d files of %d labs in %s\n", rep.Tests, len(rep.Labs), catalog.PristineArchive)
	case catalog.TrackWrite:
		fmt.Fprintf(e.stdout, "  the kit: %d labs' references and %d shipped mutants in %s\n", len(rep.Labs), rep.Mutants, catalog.KitArchive)
	}
	fmt.Fprintf(e.stdout, "  searched for %d answers of the %s track (archives unpacked, encodings undone): none found\n", rep.Needles, rep.Track)
	fmt.Fprintf(e.stdout, "  Makefile targets left out: %s\n", strings.Join(rep.Dropped, " "))
	start := "make lab-01"
	if rep.Track == catalog.TrackWrite {
		start = "make write-01"
	}
	fmt.Fprintf(e.stdout, "\nnext: cd %s && git init -b main && git add -A && git commit -m 'Learner template' && %s\n", rep.Dir, start)
	return nil
}
