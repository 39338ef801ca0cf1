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

// schemaRun is one scoring run's mutant schema: its test binaries, built
// once each (without and with the race detector) and run once per mutant.
type schemaRun struct {
	schema    *mutantSchema
	dir       string // where the binaries go
	test2json string
	path      string // PATH for the binaries: $GOROOT/bin first, as go test sets it
	once      [2]sync.Once
	bin       [2]string // "" once a build failed: mutants build on their own
}

// startSchema folds the mutants about to run into one schema. Nothing
// folds with OneByOne or when the tools it needs are missing; the mutants
// then build one by one, as any that do not fold always do.
func (w *writeRun) startSchema(ctx context.Context, pending []Mutant) {
	if w.opts.OneByOne || len(pending) == 0 {
		return
	}
	var ms []schemaMutant
	for _, m := range pending {
		if _, patched, err := w.apply(m.Patch); err == nil {
			ms = append(ms, schemaMutant{Name: m.Name, Patched: patched})
		}
	}
	schema, err := buildMutantSchema(w.kit.Ref, ms)
	if err != nil || len(schema.IDs) == 0 {
		return
	}
	t2j, err := goOutput(ctx, w.opts.Root, "tool", "-n", "test2json")
	if err != nil {
		w.logf("write: mutants build one by one (no test2json: %v)", err)
		return
	}
	goroot, err := goOutput(ctx, w.opts.Root, "env", "GOROOT")
	if err != nil {
		return
	}
	dir, err := os.MkdirTemp("", "labctl-schema-")
	if err != nil {
		return
	}
	path := filepath.Join(strings.TrimSpace(string(goroot)), "bin") + string(os.PathListSeparator) + os.Getenv("PATH")
	w.schema = &schemaRun{schema: schema, dir: dir, test2json: strings.TrimSpace(string(t2j)), path: path}
}

// closeSchema removes the schema's binaries.
func (w *writeRun) closeSchema() {
	if w.schema != nil {
		_ = os.RemoveAll(w.schema.dir)
	}
}

// schemaID is the number that selects a mutant in the schema; the empty
// name is the reference itself (0). ok is false for a mutant that did not
// fold, or when there is no schema.
func (w *writeRun) schemaID(name string) (int, bool) {
	if w.schema == nil {
		return 0, false
	}
	if name == "" {
		return 0, true
	}
	id, ok := w.schema.schema.IDs[name]
	return id, ok
}

// schemaBinary builds the schema's test binary once, with or without the
// race detector; "" means it did not build (a mutant that does not
// compile, say), and the mutants build on their own instead.
func (w *writeRun) schemaBinary(ctx context.Context, race bool) string {
	i := 0
	if race {
		i = 1
	}
	s := w.schema
	s.once[i].Do(func() {
		bin := filepath.Join(s.dir, fmt.Sprintf("write-%d.test", i))
		if err := w.buildSchema(ctx, bin, race); err != nil {
			if ctx.Err() == nil {
				w.logf("write: mutants build one by one (their shared build failed: %v)", err)
			}
			return
		}
		s.bin[i] = bin
	})
	return s.bin[i]
}

func (w *writeRun) buildSchema(ctx context.Context, bin string, race bool) error {
	ov, err := w.overlay(w.schema.schema.Files)
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
	cmd := exec.CommandContext(ctx, "go", append(args, w.pkg())...)
	cmd.Dir = w.opts.Root
	out, err := cmd.CombinedOutput()
	if err != nil {
		first, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		return fmt.Errorf("%w: %s", err, first)
	}
	return nil
}

// runSchema runs the counting tests in the schema's binary as mutant id,
// the way go test -json runs a test binary; used is false when there is
// no binary to run, and the caller builds the mutant on its own.
func (w *writeRun) runSchema(ctx context.Context, id int, counting, skip []string, race bool) (p *PackageResult, used bool, err error) {
	bin := w.schemaBinary(ctx, race)
	if bin == "" {
		return nil, false, ctx.Err()
	}
	args := []string{"-test.v=test2json", "-test.paniconexit0", "-test.count=1", "-test.run=" + exactNames(counting)}
	if len(skip) > 0 {
		args = append(args, "-test.skip="+exactNames(skip))
	}
	if w.mutantTimeout > 0 {
		args = append(args, "-test.timeout="+w.mutantTimeout.String())
		// As go test does: a binary its own timeout cannot stop is
		// killed a minute later.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.mutantTimeout+time.Minute)
		defer cancel()
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	test := exec.CommandContext(runCtx, bin, args...)
	test.Dir = filepath.Join(w.opts.Root, WriteDirOf(w.kit.Lab))
	test.Env = append(os.Environ(), schemaEnv+"="+strconv.Itoa(id), "PATH="+w.schema.path)
	if race {
		test.Env = append(test.Env, "GORACE="+noExitSleep(os.Getenv("GORACE")))
	}
	killGroupOnCancel(test)
	// The binary's output goes through test2json, as under go test; the
	// binary is ours to stop, and test2json ends when its input does.
	var watch *hangWatch
	if id != 0 { // never cut the runs that say which tests count
		watch = newHangWatch(w.opts.limit()+time.Second, stop)
	}
	run, status, err := w.test2json(test, watch)
	hung := watch.close()
	if err := ctx.Err(); err != nil {
		return nil, true, err
	}
	if err != nil && hung == "" {
		return nil, true, err
	}
	pkg := strings.TrimPrefix(w.pkg(), "./")
	if p = run.Package(pkg); p == nil {
		return nil, true, errors.New("the mutant's test binary reported nothing")
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
		t.Output += fmt.Sprintf("test timed out after %s (labctl stopped it: it ran past the limit)\n", w.opts.limit()+time.Second)
		p.Status = Fail
	}
	return p, true, nil
}

// test2json runs test with its output converted by test2json and returns
// the events read and the test's exit error.
func (w *writeRun) test2json(test *exec.Cmd, watch *hangWatch) (*Run, error, error) {
	pkg := strings.TrimPrefix(w.pkg(), "./")
	conv := exec.Command(w.schema.test2json, "-t", "-p", pkg)
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
