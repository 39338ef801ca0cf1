package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/labkit/grade"
)

// cmdClassroom writes (or checks) the autograding configuration, and runs
// one graded test: the command every entry of that configuration runs.
func cmdClassroom(ctx context.Context, e *env, args []string) error {
	fs := flags(e)
	out := fs.String("o", grade.AutogradingFile, "`file` to write, relative to the repository root")
	check := fs.Bool("check", false, "write nothing; fail if the file differs from what the catalogue and the tests give")
	labPoints := fs.Int("lab-points", 0, "`points` each lab is worth, spread over its tests (0: one point per test, as labctl grade counts)")
	timeout := fs.Int("timeout", 10, "each command's limit in `minutes` (the first one compiles the race-enabled dependencies)")
	tests := fs.String("tests", "", "with run: `dir` of held-back tests, as for labctl grade --tests")
	noRace := fs.Bool("no-race", false, "with run: without the race detector")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if c, err := catalog.Load(e.root); err != nil {
		return err
	} else if !c.Holds(catalog.TrackLabs) {
		return fmt.Errorf("%w: this is the test-writing template; autograding.json grades the labs' exercise tests, one command each, and belongs to the labs template (grade this one with labctl grade)", catalog.ErrOtherTrack)
	}
	if len(pos) > 0 && pos[0] == "run" {
		return classroomRun(ctx, e, pos[1:], *tests, *noRace)
	}
	if len(pos) > 0 {
		return fmt.Errorf("%w: labctl classroom takes no arguments, or: run NN TestName", errUsage)
	}
	doc, err := grade.GenerateAutograding(grade.ClassroomOptions{Root: e.root, LabPoints: *labPoints, Timeout: *timeout})
	if err != nil {
		return err
	}
	want, err := doc.Marshal()
	if err != nil {
		return err
	}
	path := *out
	if !filepath.IsAbs(path) {
		path = filepath.Join(e.root, path)
	}
	if *check {
		got, err := os.ReadFile(path)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if !bytes.Equal(got, want) {
			fmt.Fprintf(e.stdout, "%s does not match the lab catalogue and tests (%d graded tests, %d points): run labctl classroom and commit it\n", *out, len(doc.Tests), doc.Total())
			return errRed
		}
		fmt.Fprintf(e.stdout, "%s matches: %d graded tests, %d points\n", *out, len(doc.Tests), doc.Total())
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(path, want, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "wrote %s: %d graded tests, %d points; each runs: go run ./cmd/labctl classroom run NN TestName\n", *out, len(doc.Tests), doc.Total())
	return nil
}

// classroomRun grades exactly one test; exit 0 only when it passed.
func classroomRun(ctx context.Context, e *env, args []string, testsDir string, noRace bool) error {
	if len(args) != 2 {
		return fmt.Errorf("%w: labctl classroom run NN TestName", errUsage)
	}
	c, err := catalog.Load(e.root)
	if err != nil {
		return err
	}
	labs, err := c.Select(args[:1])
	if err != nil {
		return err
	}
	l, test := labs[0], args[1]
	if testsDir != "" && !filepath.IsAbs(testsDir) {
		testsDir = filepath.Join(e.root, testsDir)
	}
	gl, err := grade.RunOne(ctx, grade.Options{Root: e.root, TestsDir: testsDir, NoRace: noRace}, l, test)
	if errors.Is(err, grade.ErrUnknownTest) {
		return usageError{err} // exit 2: the configuration names a test that is not there
	}
	if err != nil {
		return err
	}
	if gl.Edited {
		fmt.Fprintf(e.stdout, "lab %s: the test files were edited; graded with the pristine ones\n", l.Number)
	}
	if gl.Build != "" {
		fmt.Fprintf(e.stdout, "✗ lab %s %s: the lab does not compile\n%s\n", l.Number, test, gl.Build)
		return errRed
	}
	t := gl.Tests[0]
	if t.Status == gotest.Pass {
		fmt.Fprintf(e.stdout, "✓ lab %s %s (%.2fs)\n", l.Number, test, t.Seconds)
		return nil
	}
	fmt.Fprintf(e.stdout, "✗ lab %s %s: %s\n", l.Number, test, t.Status)
	if t.Message != "" {
		fmt.Fprintln(e.stdout, gotest.Indent(t.Message, 4))
	}
	return errRed
}

// usageError is an error that exits 2 like a bad command line, with its own message.
type usageError struct{ err error }

func (u usageError) Error() string   { return u.err.Error() }
func (u usageError) Unwrap() []error { return []error{errUsage, u.err} }
