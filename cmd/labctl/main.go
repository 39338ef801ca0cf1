// Command labctl is the learner's and instructor's tool behind the Makefile:
// progress, running a lab with hints, watching, verifying the lab
// conventions, grading, and the real-Redis integration gate.
//
//	labctl list                 progress table
//	labctl test 03              run lab 03, show the first failure and a hint
//	labctl hint 03 [k]          the next hint (or hint k)
//	labctl watch 03             re-run lab 03 on every save
//	labctl write 03             the test-writing track: your tests, scored by the mutants they kill
//	labctl verify               maintainers: stubs red, solutions green, mutants killed
//	labctl grade                instructors: JSON, JUnit XML and Markdown reports
//	labctl integration          the real-Redis tests, which may not skip
//	labctl checklist            the production-readiness checklist, one line per item
//	labctl interview            a timed mock interview round from docs/interview
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"

	"github.com/production-go/gateway-lab/internal/labkit/catalog"
)

// errRed is returned when tests ran and some failed: exit 1 without an
// extra "error:" line, since the output already says what failed.
var errRed = errors.New("red")

// errUsage marks a bad command line: exit 2.
var errUsage = errors.New("usage")

type command struct {
	name    string
	args    string
	summary string
	run     func(ctx context.Context, env *env, args []string) error
	details func() string // more for -h, after the flags; nil for none
}

// commands is every command, in the order usage lists them. A command
// finds its own usage line in env.cmd, not here, so that this table can be
// a plain variable: a lookup from the commands into it would be an
// initialisation cycle.
var commands = []command{
	{"list", "", "progress table: lab, tests passing/total, status (alias: progress)", cmdList, nil},
	{"test", "NN", "run lab NN with -race; on red, the first failing test, its message and a hint", cmdTest, nil},
	{"hint", "NN [k]", "show the next hint for lab NN, or hint k", cmdHint, nil},
	{"watch", "NN", "re-run lab NN's tests on every save (Enter re-runs now, q quits)", cmdWatch, nil},
	{"write", "NN", "the test-writing track: your tests in write/NN-topic against the reference, then its mutants; prints killed K/N", cmdWrite, nil},
	{"interview", "[--round lightning|deep-dive|debugging|design|all] [--n N] [--seed S]", "a timed mock interview round from docs/interview: a question, your time, then its answer and rubric", cmdInterview, interviewDetails},
	{"verify", "", "maintainers: tests identical, stubs red test by test, solutions green, mutants killed", cmdVerify, nil},
	{"grade", "", "instructors: grade the labs with pristine tests; writes grade.json, junit.xml, grade.md", cmdGrade, nil},
	{"checklist", "", "run the tests checklist/PRODUCTION_READINESS.md names; one ✓/✗ line per item, exit 1 on any ✗", cmdChecklist, nil},
	{"integration", "", "run the real-Redis tests with REDIS_INTEGRATION_REQUIRED=1; fail if any skips", cmdIntegration, nil},
	{"classroom", "[run NN TestName]", "instructors: write .github/classroom/autograding.json from the catalogue; run: grade one test", cmdClassroom, nil},
	{"export", "[-track labs|write] DIR", "instructors: write a learner template of one track into DIR: labs (stubs and tests, no reference or mutant) or write (references and mutants, no exercise test)", cmdExport, exportDetails},
}

type env struct {
	cmd    command // the command running: its flags' usage names it
	root   string
	stdout io.Writer
	stderr io.Writer
	stdin  io.Reader
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	top := flag.NewFlagSet("labctl", flag.ContinueOnError)
	top.SetOutput(stderr)
	dir := top.String("C", ".", "run as if started in `dir`")
	top.Usage = func() { usage(stderr) }
	if err := top.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		return 2
	}
	if top.NArg() == 0 {
		usage(stderr)
		return 2
	}
	name, rest := top.Arg(0), top.Args()[1:]
	if name == "help" {
		usage(stdout)
		return 0
	}
	if name == "progress" {
		name = "list"
	}
	for _, c := range commands {
		if c.name != name {
			continue
		}
		root, err := catalog.FindRoot(*dir)
		if err != nil {
			fmt.Fprintln(stderr, "labctl:", err)
			return 2
		}
		err = c.run(ctx, &env{cmd: c, root: root, stdout: stdout, stderr: stderr, stdin: stdin}, rest)
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.Is(err, errRed):
			return 1
		case errors.Is(err, errUsage), errors.Is(err, catalog.ErrUnknownLab), errors.Is(err, catalog.ErrBadOption), errors.Is(err, catalog.ErrOtherTrack):
			fmt.Fprintln(stderr, "labctl:", err)
			return 2
		default:
			fmt.Fprintln(stderr, "labctl:", err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "labctl: unknown command %q\n\n", name)
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: labctl [-C dir] <command> [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	t := table(w)
	for _, c := range commands {
		fmt.Fprintf(t, "  %s %s\t%s\n", c.name, c.args, c.summary)
	}
	t.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'labctl <command> -h' for a command's flags. Start with: make lab-01")
}

// table aligns tab-separated cells in columns two spaces apart; Flush prints it.
func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// flags builds the running command's flag set with a usage line and its
// summary.
func flags(e *env) *flag.FlagSet {
	c := e.cmd
	fs := flag.NewFlagSet("labctl "+c.name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stdout, "usage: labctl %s %s\n\n%s\n", c.name, c.args, c.summary)
		var n int
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(e.stdout, "\nflags:")
			fs.SetOutput(e.stdout)
			fs.PrintDefaults()
			fs.SetOutput(e.stderr)
		}
		if c.details != nil {
			fmt.Fprintf(e.stdout, "\n%s", c.details())
		}
	}
	return fs
}

// parse parses a command's flags, allowing flags after positional arguments
// ("labctl hint 03 -reset" as well as "labctl hint -reset 03").
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// labCommand parses a lab command's flags and finds the lab its first
// argument names; the arguments after it come back as rest.
func labCommand(e *env, fs *flag.FlagSet, name string, args []string) (l catalog.Lab, rest []string, err error) {
	return trackCommand(e, fs, name, args, catalog.TrackLabs)
}

// trackCommand is labCommand for a lab of the given track: the write
// command takes a lab whose test-writing track is here.
func trackCommand(e *env, fs *flag.FlagSet, name string, args []string, track catalog.Track) (l catalog.Lab, rest []string, err error) {
	pos, err := parse(fs, args)
	if err != nil {
		return catalog.Lab{}, nil, err
	}
	if len(pos) == 0 {
		return catalog.Lab{}, nil, fmt.Errorf("%w: labctl %s needs a lab number, e.g. labctl %s 01", errUsage, name, name)
	}
	c, err := catalog.Load(e.root)
	if err != nil {
		return catalog.Lab{}, nil, err
	}
	sel := c.Select
	if track == catalog.TrackWrite {
		sel = c.SelectWrite
	}
	labs, err := sel(pos[:1])
	if err != nil {
		return catalog.Lab{}, nil, err
	}
	return labs[0], pos[1:], nil
}
