// Command scenario runs one of the lessons as an experiment you can see:
// it starts gateways with simulated upstreams on loopback, drives load with
// vegeta, injects a fault, and writes a Markdown report with SVG charts.
//
//	go run ./cmd/scenario -name brownout            # or: make scenario NAME=brownout
//	go run ./cmd/scenario -list
//
// Every run is seeded (-seed; printed in the report) and bounded in time and
// requests; the same seed gives the same shape.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("scenario", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "the scenario to run (see -list)")
	list := fs.Bool("list", false, "list the scenarios")
	seed := fs.Uint64("seed", 0, "seed for the simulated upstreams (0: random, printed in the report)")
	out := fs.String("out", "docs/scenarios", "directory the report goes to (a subdirectory per scenario)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: scenario -name NAME [-seed N] [-out DIR]\n\nRuns a scenario against gateways on loopback and writes DIR/NAME/README.md with SVG charts.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *list || *name == "" {
		byName := slices.SortedFunc(slices.Values(scenarios), func(a, b scenario) int { return strings.Compare(a.name, b.name) })
		for _, s := range byName {
			fmt.Fprintf(stdout, "  %-14s %s\n", s.name, s.title)
		}
		if *name == "" && !*list {
			return 2
		}
		return 0
	}
	sc, ok := lookup(*name)
	if !ok {
		fmt.Fprintf(stderr, "scenario: no scenario %q (-list names them)\n", *name)
		return 2
	}
	if *seed == 0 {
		*seed = rand.Uint64N(1 << 32)
	}
	r := &report{scenario: sc, seed: *seed, dir: filepath.Join(*out, sc.name), log: stdout}
	fmt.Fprintf(stdout, "scenario %s (seed %d): %s\n", sc.name, r.seed, sc.title)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		fmt.Fprintln(stderr, "scenario:", err)
		return 1
	}
	if err := sc.run(ctx, r); err != nil {
		fmt.Fprintln(stderr, "scenario:", err)
		return 1
	}
	if err := r.write(); err != nil {
		fmt.Fprintln(stderr, "scenario:", err)
		return 1
	}
	fmt.Fprintf(stdout, "report: %s\n", filepath.Join(r.dir, "README.md"))
	return 0
}

// report collects a scenario's configuration, charts and tables.
type report struct {
	scenario scenario
	seed     uint64
	dir      string
	log      io.Writer
	config   []string // lines of configuration, shown verbatim
	sections []string // Markdown, in order
	charts   int
}

func (r *report) progress(format string, a ...any) { fmt.Fprintf(r.log, "  "+format+"\n", a...) }

func (r *report) configure(line string) { r.config = append(r.config, line) }

func (r *report) text(md string) { r.sections = append(r.sections, md) }

// chart writes an SVG next to the report and links it.
func (r *report) chart(c chart) error {
	r.charts++
	file := fmt.Sprintf("%s-%d.svg", r.scenario.name, r.charts)
	if err := os.WriteFile(filepath.Join(r.dir, file), []byte(c.svg()), 0o644); err != nil {
		return err
	}
	r.sections = append(r.sections, fmt.Sprintf("![%s](%s)", c.Title, file))
	return nil
}

func (r *report) write() error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Scenario: %s\n\n%s\n\n", r.scenario.title, r.scenario.lesson)
	fmt.Fprintf(&b, "Reproduce: `make scenario NAME=%s SEED=%d` (seeded simulated upstreams; load by\n[vegeta](https://github.com/tsenart/vegeta) on loopback; the numbers move with the machine,\nthe shape does not).\n\n", r.scenario.name, r.seed)
	b.WriteString("```\n" + strings.Join(r.config, "\n") + "\n```\n\n")
	for _, s := range r.sections {
		b.WriteString(s + "\n\n")
	}
	return os.WriteFile(filepath.Join(r.dir, "README.md"), []byte(b.String()), 0o644)
}

// pointsOf turns per-second values into chart points.
func pointsOf(secs []second, f func(second) float64) []point {
	out := make([]point, 0, len(secs))
	for _, s := range secs {
		out = append(out, point{s.t, f(s)})
	}
	return out
}

// phaseTable summarises the seconds of each phase, one row a phase, under
// the phase's label.
func phaseTable(secs []second, phases []band) string {
	var b strings.Builder
	b.WriteString("| phase | p50 | p95 | p99 | answered | 429 | 503 | other errors |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, p := range phases {
		var p50, p95, p99 []float64
		var ok, lim, shed, failed int
		for _, s := range secs {
			if !p.contains(s.t) {
				continue
			}
			if s.ok > 0 {
				p50, p95, p99 = append(p50, s.p50), append(p95, s.p95), append(p99, s.p99)
			}
			ok, lim, shed, failed = ok+s.ok, lim+s.limited, shed+s.shed, failed+s.failed
		}
		fmt.Fprintf(&b, "| %s | %.0f ms | %.0f ms | %.0f ms | %d | %d | %d | %d |\n", p.Label,
			quantile(p50, 0.5), quantile(p95, 0.5), quantile(p99, 0.5), ok, lim, shed, failed)
	}
	b.WriteString("\n(Latency columns: the median, over the phase's seconds, of the quantile over the 5 s ending at each.)")
	return b.String()
}
