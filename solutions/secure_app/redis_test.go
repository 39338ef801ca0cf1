package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// redisServer is a redis-server of one test's own, so the test may stop it
// (a Redis outage) and start it again on the same port (its recovery).
type redisServer struct {
	t    *testing.T
	port int
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts redis-server on a free loopback port. Without
// redis-server on PATH the test skips — unless REDIS_INTEGRATION_REQUIRED=1.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("REDIS_INTEGRATION_REQUIRED") == "1" {
			t.Fatal("redis-server is not on PATH and REDIS_INTEGRATION_REQUIRED=1")
		}
		t.Skip("redis-server is not on PATH: the outage test needs a Redis of its own to stop")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	s := &redisServer{t: t, port: port, url: fmt.Sprintf("redis://127.0.0.1:%d/0", port)}
	s.restart()
	t.Cleanup(s.stop)
	return s
}

// restart starts the server (again) and waits until it accepts connections.
func (s *redisServer) restart() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(s.t, s.cmd.Start())
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	require.Eventually(s.t, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 100*time.Millisecond)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, 10*time.Second, 20*time.Millisecond, "redis-server did not start on port %d", s.port)
}

// stop kills the server and waits for it to exit. Safe to call twice.
func (s *redisServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}
