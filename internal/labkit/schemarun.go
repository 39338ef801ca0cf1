package labkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// schemaBuild is one package built with its mutants folded in: its test
// binaries, built once each (without and with the race detector) and run
// once per mutant.
type schemaBuild struct {
	schema    *mutantSchema
	root      string // the repository, where go test -c runs
	pkg       string // the package, "./dir"
	tmp       string // where the binaries go
	test2json string
	path      string // PATH for the binaries: $GOROOT/bin first, as go test sets it
	// overlay lays the schema's files over the package for the build.
	overlay func(files map[string][]byte) (*Overlay, error)
	logf    func(format string, args ...any)
	once    [2]sync.Once
	bin     [2]string // "" once a build failed: mutants build on their own
}

// newSchemaBuild folds mutants into ref. It is nil when none fold or the
// tools it needs are missing: the mutants then build one by one, as any
// that do not fold always do.
func newSchemaBuild(ctx context.Context, root, pkg string, ref map[string][]byte, ms []schemaMutant,
	overlay func(map[string][]byte) (*Overlay, error), logf func(string, ...any)) *schemaBuild {
	if len(ms) == 0 {
		return nil
	}
	schema, err := buildMutantSchema(ref, ms)
	if err != nil || len(schema.IDs) == 0 {
		return nil
	}
	t2j, err := goOutput(ctx, root, "tool", "-n", "test2json")
	if err != nil {
		logf("mutants build one by one (no test2json: %v)", err)
		return nil
	}
	goroot, err := goOutput(ctx, root, "env", "GOROOT")
	if err != nil {
		return nil
	}
	tmp, err := os.MkdirTemp("", "labctl-schema-")
	if err != nil {
		return nil
	}
	path := filepath.Join(strings.TrimSpace(string(goroot)), "bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	return &schemaBuild{schema: schema, root: root, pkg: pkg, tmp: tmp, test2json: strings.TrimSpace(string(t2j)),
		path: path, overlay: overlay, logf: logf}
}

// close removes the binaries.
func (b *schemaBuild) close() {
	if b != nil {
		_ = os.RemoveAll(b.tmp)
	}
}

// id is the number that selects a mutant; the empty name is the
// reference itself (0). ok is false for a mutant that did not fold, or
// when there is no schema.
func (b *schemaBuild) id(name string) (int, bool) {
	if b == nil {
		return 0, false
	}
	if name == "" {
		return 0, true
	}
	id, ok := b.schema.IDs[name]
	return id, ok
}

// binary builds the test binary once, with or without the race detector;
// "" means it did not build (a mutant that does not compile, say), and
// the mutants build on their own instead.
func (b *schemaBuild) binary(ctx context.Context, race bool) string {
	i := 0
	if race {
		i = 1
	}
	b.once[i].Do(func() {
		bin := filepath.Join(b.tmp, fmt.Sprintf("mutants-%d.test", i))
		if err := b.build(ctx, bin, race); err != nil {
			if ctx.Err() == nil {
				b.logf("mutants build one by one (their shared build failed: %v)", err)
			}
			return
		}
		b.bin[i] = bin
	})
	return b.bin[i]
}

func (b *schemaBuild) build(ctx context.Context, bin string, race bool) error {
	ov, err := b.overlay(b.schema.Files)
	if err != nil {
		return err
	}
	defer ov.Close()
	overlay, err := ov.File()
	if err != nil {
		return err
	}
	args := []string{"test", "-c", "-o", bin, "-vet=off", "-overlay", overlay}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, "go", append(args, b.pkg)...)
	cmd.Dir = b.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%w: %s", err, first)
	}
	return nil
}

// schemaRunOptions is one run of a schema's binary.
type schemaRunOptions struct {
	ID      int
	Race    bool
	Run     string // -test.run; "" runs every test
	Skip    []string
	Timeout time.Duration // -test.timeout; 0: go test's default
	// HangLimit stops the binary once a test running alone has run this
	// long; 0 never does.
	HangLimit time.Duration
}

// run runs the binary as mutant o.ID, the way go test -json runs a test
// binary; used is false when there is no binary to run, and the caller
// builds the mutant on its own.
func (b *schemaBuild) run(ctx context.Context, o schemaRunOptions) (p *PackageResult, used bool, err error) {
	bin := b.binary(ctx, o.Race)
	if bin == "" {
		return nil, false, ctx.Err()
	}
	args := []string{"-test.v=test2json", "-test.paniconexit0", "-test.count=1"}
	if o.Run != "" {
		args = append(args, "-test.run="+o.Run)
	}
	if len(o.Skip) > 0 {
		args = append(args, "-test.skip="+exactNames(o.Skip))
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Minute
	}
	args = append(args, "-test.timeout="+timeout.String())
	// As go test does: a binary its own timeout cannot stop is killed a
	// minute later.
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	test := exec.CommandContext(runCtx, bin, args...)
	test.Dir = filepath.Join(b.root, filepath.FromSlash(strings.TrimPrefix(b.pkg, "./")))
	test.Env = append(os.Environ(), schemaEnv+"="+strconv.Itoa(o.ID), "PATH="+b.path)
	if o.Race {
		test.Env = append(test.Env, "GORACE="+noExitSleep(os.Getenv("GORACE")))
	}
	killGroupOnCancel(test)
	var watch *hangWatch
	if o.HangLimit > 0 {
		watch = newHangWatch(o.HangLimit, stop)
	}
	run, status, err := b.test2jsonRun(test, watch)
	hung := watch.close()
	if err := ctx.Err(); err != nil {
		return nil, true, err
	}
	if err != nil && hung == "" {
		return nil, true, err
	}
	pkg := strings.TrimPrefix(b.pkg, "./")
	if p = run.Package(pkg); p == nil {
		return nil, true, errors.New("the mutants' test binary reported nothing")
	}
	if status != nil && p.Status == Pass {
		p.Status = Fail // exited non-zero after PASS: goleak's report, say
	}
	if hung != "" {
		// Stopped early: the running test could no longer count, and
		// the binary's own timeout is much further off.
		t := p.Tests[hung]
		if t == nil {
			t = &TestResult{Name: hung, Status: NotRun}
			p.Tests[hung] = t
		}
		t.Output += fmt.Sprintf("test timed out after %s (labctl stopped it: it ran past the limit)\n", o.HangLimit)
		p.Status = Fail
	}
	return p, true, nil
}

// test2jsonRun runs test with its output converted by test2json and
// returns the events read and the test's exit error.
func (b *schemaBuild) test2jsonRun(test *exec.Cmd, watch *hangWatch) (*Run, error, error) {
	pkg := strings.TrimPrefix(b.pkg, "./")
	conv := exec.Command(b.test2json, "-t", "-p", pkg)
	r, wr, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	test.Stdout, test.Stderr, conv.Stdin = wr, wr, r
	var stderr bytes.Buffer
	conv.Stderr = &stderr
	out, err := conv.StdoutPipe()
	if err != nil {
		r.Close()
		wr.Close()
		return nil, nil, err
	}
	if err := conv.Start(); err != nil {
		r.Close()
		wr.Close()
		return nil, nil, fmt.Errorf("start test2json: %w", err)
	}
	r.Close()
	startErr := test.Start()
	wr.Close() // test2json sees the end of input when the binary exits
	if startErr != nil {
		_ = conv.Wait()
		return nil, nil, fmt.Errorf("start the mutants' test binary: %w", startErr)
	}
	var onEvent func(Event)
	if watch != nil {
		onEvent = watch.event
	}
	run, parseErr := parseEvents(out, onEvent)
	status := test.Wait()
	if err := conv.Wait(); err != nil && parseErr == nil {
		parseErr = fmt.Errorf("test2json: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if parseErr != nil {
		return run, status, fmt.Errorf("read test2json output: %w", parseErr)
	}
	return run, status, nil
}

// hangWatch stops a test binary whose running test has gone past the
// limit: its failure would not count, so waiting on is only time lost.
type hangWatch struct {
	limit   time.Duration
	stop    func()
	mu      sync.Mutex
	running map[string]time.Time // top-level test → when it last ran
	hung    string
	done    chan struct{}
	wg      sync.WaitGroup
}

func newHangWatch(limit time.Duration, stop func()) *hangWatch {
	h := &hangWatch{limit: limit, stop: stop, running: map[string]time.Time{}, done: make(chan struct{})}
	h.wg.Add(1)
	go h.loop()
	return h
}

func (h *hangWatch) event(ev Event) {
	if ev.Test == "" || strings.Contains(ev.Test, "/") {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Action {
	case "run", "cont":
		h.running[ev.Test] = time.Now()
	case "pause", "pass", "fail", "skip":
		delete(h.running, ev.Test)
	case "output":
		// test2json holds a test's own pass or fail event back until the
		// next test starts; its "--- PASS" line says it ended.
		if strings.HasPrefix(ev.Output, "--- ") {
			delete(h.running, ev.Test)
		}
	}
}

func (h *hangWatch) loop() {
	defer h.wg.Done()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-h.done:
			return
		case now := <-tick.C:
			h.mu.Lock()
			// Only a test running alone: with parallel tests, which one
			// holds the binary is not for the watch to guess.
			if len(h.running) == 1 && h.hung == "" {
				for name, since := range h.running {
					if now.Sub(since) > h.limit {
						h.hung = name
						h.stop()
					}
				}
			}
			h.mu.Unlock()
		}
	}
}

// close stops the watch and names the test it stopped the binary in, if
// it did.
func (h *hangWatch) close() string {
	if h == nil {
		return ""
	}
	close(h.done)
	h.wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hung
}

// startSchema folds the track's mutants about to run into one build,
// unless OneByOne.
func (w *writeRun) startSchema(ctx context.Context, pending []Mutant) {
	if w.opts.OneByOne {
		return
	}
	var ms []schemaMutant
	for _, m := range pending {
		if _, patched, err := w.apply(m.Patch); err == nil {
			ms = append(ms, schemaMutant{Name: m.Name, Patched: patched})
		}
	}
	w.schema = newSchemaBuild(ctx, w.opts.Root, w.pkg(), w.kit.Ref, ms, w.overlay, func(format string, args ...any) {
		w.logf("write: "+format, args...)
	})
}

// runSchema runs the counting tests in the schema's binary as mutant id;
// a mutant's run (never the null runs, which say which tests count) is
// stopped once a test running alone is past the limit.
func (w *writeRun) runSchema(ctx context.Context, id int, counting, skip []string, race bool) (*PackageResult, bool, error) {
	o := schemaRunOptions{ID: id, Race: race, Run: exactNames(counting), Skip: skip, Timeout: w.mutantTimeout}
	if id != 0 {
		o.HangLimit = w.opts.limit() + time.Second
	}
	return w.schema.run(ctx, o)
}
