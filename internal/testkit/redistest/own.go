package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server of one test's own, for a test that does to its
// Redis what it must not do to a shared one: stop it (an outage), start it
// again (its recovery, data lost), or stall it. It is stopped when the
// test ends.
type Server struct {
	tb     testing.TB
	bin    string
	port   int
	dir    string
	cmd    *exec.Cmd
	done   chan struct{}
	stalls sync.WaitGroup // Stall's sleeping clients
}

// Own starts a redis-server of tb's own on a free loopback port. Without
// redis-server on PATH the test skips — unless REDIS_INTEGRATION_REQUIRED=1,
// in which case it fails.
func Own(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(RequiredEnv) == "1" {
			tb.Fatalf("redistest: %s=1 but redis-server is not on PATH", RequiredEnv)
		}
		tb.Skip("redis-server is not on PATH: this test needs a Redis of its own to stop or stall")
	}
	port, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	s := &Server{tb: tb, bin: bin, port: port, dir: tb.TempDir()}
	s.Start()
	tb.Cleanup(s.Stop)
	tb.Logf("%s at %s (a redis-server of the test's own)", Marker, s.URL())
	return s
}

// URL is the server's address as a redis:// URL (database 0).
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.port) }

// Client returns a client of the server that fails fast (no retries) and
// is closed when the test ends.
func (s *Server) Client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), MaxRetries: -1, DialerRetries: 1,
		ContextTimeoutEnabled: true}) // go-redis ignores a context's deadline without it
	s.tb.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Start starts the server (again, after Stop) on its port and waits until
// it answers.
func (s *Server) Start() {
	s.tb.Helper()
	s.cmd = exec.Command(s.bin, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--enable-debug-command", "local")
	setParentDeathSignal(s.cmd)
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("redistest: %v", err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { // owned by Stop, which waits for done
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for ping(s.URL()) != nil {
		select {
		case <-s.done:
			s.tb.Fatalf("redistest: redis-server exited at start")
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.tb.Fatalf("redistest: redis-server did not answer on port %d within 10s", s.port)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process's port, not test timing
	}
}

// Stop kills the server and waits for it to exit. Safe to call twice.
func (s *Server) Stop() {
	s.stalls.Wait()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Stall blocks the server for d (DEBUG SLEEP), as a slow script or a fork
// would: commands sent meanwhile wait in its sockets and run when it wakes,
// whether or not their clients are still waiting. Stall returns at once;
// Stop waits for the sleep to end.
func (s *Server) Stall(d time.Duration) {
	s.tb.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), MaxRetries: -1, ReadTimeout: d + 10*time.Second})
	started := make(chan struct{})
	s.stalls.Go(func() {
		defer rdb.Close()
		close(started)
		_ = rdb.Do(context.Background(), "DEBUG", "SLEEP", d.Seconds()).Err()
	})
	<-started
	// Let the DEBUG SLEEP reach the server before returning: a PING on a
	// connection of its own does not answer until the sleep is over, so
	// wait until one is sent and outstanding for a moment.
	probe := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", s.port), MaxRetries: -1,
		ReadTimeout: 50 * time.Millisecond, ContextTimeoutEnabled: true})
	defer probe.Close()
	for probe.Ping(context.Background()).Err() == nil {
		time.Sleep(time.Millisecond) // polling until the server stops answering, not test timing
	}
}
