package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// binaries builds the services the scenarios run as processes (a
// SIGTERM, a Redis outage and replicas need real processes), once.
func binaries(ctx context.Context, r *report) (dir string, err error) {
	dir, err = filepath.Abs("bin/scenario")
	if err != nil {
		return "", err
	}
	r.progress("building production_app and secure_app into %s", dir)
	for _, cmd := range []string{"production_app", "secure_app"} {
		b := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, cmd), "./solutions/"+cmd)
		b.Stderr = os.Stderr
		if err := b.Run(); err != nil {
			return "", fmt.Errorf("building %s: %w", cmd, err)
		}
	}
	return dir, nil
}

// process is a service running as a child process on a loopback port.
type process struct {
	url      string
	adminURL string
	cmd      *exec.Cmd
	done     chan struct{}
}

// freePort is a loopback address nothing listens on yet.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// startProcess runs bin with args plus -addr, and waits until its /readyz
// (on ready, the admin address if it has one) answers 200.
func startProcess(ctx context.Context, bin string, env []string, args ...string) (*process, error) {
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	admin, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"-addr", addr, "-admin-addr", admin, "-readiness-delay=1s", "-log-level=error"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = nil, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{url: "http://" + addr, adminURL: "http://" + admin, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	readyz, err := http.NewRequestWithContext(ctx, http.MethodGet, p.adminURL+"/readyz", nil)
	if err != nil {
		p.kill()
		return nil, err
	}
	switch err := poll(ctx, 10*time.Second, 50*time.Millisecond, p.done, func() bool { return ready(readyz) }); {
	case err == nil:
		return p, nil
	case errors.Is(err, errExited):
		return nil, fmt.Errorf("%s exited at start", filepath.Base(bin))
	case errors.Is(err, errTimedOut):
		p.kill()
		return nil, errors.New(filepath.Base(bin) + " did not become ready")
	default:
		p.kill()
		return nil, err
	}
}

var (
	errExited   = errors.New("exited while waited for")
	errTimedOut = errors.New("not in time")
)

// poll asks ok every interval until it says yes, and gives up when within
// has passed (errTimedOut), when ctx ends, or when exited closes
// (errExited: what it waits for has died, so the deadline would only add
// to the wait; nil waits out the deadline).
func poll(ctx context.Context, within, every time.Duration, exited <-chan struct{}, ok func() bool) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		if ok() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errExited
		case <-deadline.C:
			return errTimedOut
		case <-tick.C:
		}
	}
}

// at waits until offset after start: a fault's place in the schedule.
func at(ctx context.Context, start time.Time, offset time.Duration) error {
	t := time.NewTimer(time.Until(start.Add(offset)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ready sends a readiness check (a GET of /readyz, which may be sent again
// once it has answered) and reports whether it answered 200 in time.
func ready(readyz *http.Request) bool {
	resp, err := probeClient.Do(readyz)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// terminate sends SIGTERM (a rolling deploy's signal) and returns at once.
func (p *process) terminate() { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

// kill stops the process and waits for it.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// redisServer is a redis-server of the scenario's own, so it can be stopped
// (an outage) and started again on the same port.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(ctx context.Context, addr string) (*redisServer, error) {
	if addr == "" {
		var err error
		if addr, err = freePort(); err != nil {
			return nil, err
		}
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("redis-server (needed by this scenario): %w", err)
	}
	s := &redisServer{addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	listening := func() bool {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}
	if err := poll(ctx, 5*time.Second, 20*time.Millisecond, s.done, listening); err != nil {
		s.stop()
		return nil, errors.New("redis-server did not start")
	}
	return s, nil
}

func (s *redisServer) url() string { return "redis://" + s.addr + "/0" }

func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}
