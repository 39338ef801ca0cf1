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
	for range 200 {
		if ready(readyz) {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited at start", filepath.Base(bin))
		case <-time.After(50 * time.Millisecond):
		}
	}
	p.kill()
	return nil, errors.New(filepath.Base(bin) + " did not become ready")
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
	for range 100 {
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			_ = c.Close()
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stop()
	return nil, errors.New("redis-server did not start")
}

func (s *redisServer) url() string { return "redis://" + s.addr + "/0" }

func (s *redisServer) stop() {
	_ = s.cmd.Process.Kill()
	<-s.done
}
