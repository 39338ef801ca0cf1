package gotest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

// BinaryOptions is one run of a test binary that go test -c built.
type BinaryOptions struct {
	Binary    string
	Name      string   // what errors call the binary: "the mutants' test binary"
	Test2JSON string   // the test2json tool (go tool -n test2json)
	Dir       string   // where the binary runs: its package's directory
	Package   string   // the package its events are reported under
	Env       []string // more environment, KEY=VALUE
	Race      bool     // the binary was built with -race
	Run       string   // -test.run; "" runs every test
	Skip      []string
	Timeout   time.Duration // -test.timeout; 0: go test's default
	// HangLimit stops the binary once a test running alone has run this
	// long; 0 never does.
	HangLimit time.Duration
}

// RunBinary runs a test binary the way go test -json runs one: its
// output through test2json, a test it stopped past o.HangLimit failed as
// timed out. A failing test is not an error.
func RunBinary(ctx context.Context, o BinaryOptions) (*PackageResult, error) {
	args := []string{"-test.v=test2json", "-test.paniconexit0", "-test.count=1"}
	if o.Run != "" {
		args = append(args, "-test.run="+o.Run)
	}
	if len(o.Skip) > 0 {
		args = append(args, "-test.skip="+ExactNames(o.Skip))
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
	test := exec.CommandContext(runCtx, o.Binary, args...)
	test.Dir = o.Dir
	test.Env = append(os.Environ(), o.Env...)
	if o.Race {
		test.Env = append(test.Env, "GORACE="+noExitSleep(os.Getenv("GORACE")))
	}
	killGroupOnCancel(test)
	var watch *hangWatch
	if o.HangLimit > 0 {
		watch = newHangWatch(o.HangLimit, stop)
	}
	run, status, err := o.test2jsonRun(test, watch)
	hung := watch.close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err != nil && hung == "" {
		return nil, err
	}
	p := run.Package(o.Package)
	if p == nil {
		return nil, errors.New(o.Name + " reported nothing")
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
	return p, nil
}

// ExactNames is a -run pattern matching exactly these top-level tests.
func ExactNames(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

// test2jsonRun runs test with its output converted by test2json and
// returns the events read and the test's exit error.
func (o BinaryOptions) test2jsonRun(test *exec.Cmd, watch *hangWatch) (*Run, error, error) {
	conv := exec.Command(o.Test2JSON, "-t", "-p", o.Package)
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
		return nil, nil, fmt.Errorf("start %s: %w", o.Name, startErr)
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
