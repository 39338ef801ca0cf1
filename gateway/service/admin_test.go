package service

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The admin listener is unauthenticated and, in a pod, on every interface:
// a client that holds a connection open must be cut by the server, not by
// its own good manners. These tests serve the service's real admin server
// over in-memory pipes inside a synctest bubble: a goroutine blocked on a
// pipe is durably blocked (on loopback TCP it would not be), so the
// server's deadlines run on the fake clock and each limit is checked to the
// nanosecond, without waiting for it.

// pipeListener is an in-memory net.Listener: every dial is a net.Pipe.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// adminRig is the admin server on a pipe listener, with one client
// connection. closedAt says when the server closed that connection.
type adminRig struct {
	client  net.Conn
	start   time.Time
	closed  chan time.Duration
	clients []chan struct{}
}

// startAdmin serves s's admin server in the bubble and dials it once. Its
// cleanup closes the server, then waits for Serve and for every client
// goroutine: each one's next read or write on its pipe fails. (Fake time
// stops when the bubble's main goroutine ends, so nothing may outlive it.)
func startAdmin(t *testing.T, s *Service) *adminRig {
	t.Helper()
	ln := &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
	r := &adminRig{start: time.Now(), closed: make(chan time.Duration, 1)}
	srv := s.adminServer()
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			r.closed <- time.Since(r.start)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		for _, c := range r.clients {
			<-c
		}
	})
	client, server := net.Pipe()
	ln.conns <- server
	r.client = client
	return r
}

// attack runs client on the connection in a goroutine of its own.
func (r *adminRig) attack(client func(conn net.Conn)) {
	done := make(chan struct{})
	r.clients = append(r.clients, done)
	go func() {
		defer close(done)
		client(r.client)
	}()
}

// closedAt is when the server closed the connection, or a failure if it
// still holds it after an hour of fake time.
func (r *adminRig) closedAt(t *testing.T) time.Duration {
	t.Helper()
	select {
	case at := <-r.closed:
		return at
	case <-time.After(time.Hour):
		t.Fatal("the server still holds the connection after an hour")
		return 0
	}
}

// testService is a service with its default simulated providers and an
// admin address; the tests serve its admin server on their own pipes.
func testService(t *testing.T) *Service {
	t.Helper()
	c, err := Parse("service_test", []string{"-admin-addr=127.0.0.1:0", "-seed=1"}, io.Discard, nil)
	require.NoError(t, err)
	s, err := Build(c, slog.New(slog.DiscardHandler), Hooks{})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// discardAll reads everything the server sends until it closes the
// connection, so that only the limit under test can hold the server up. The
// func it returns waits for that.
func discardAll(conn net.Conn) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, conn)
	}()
	return func() { <-done }
}

// readScrape reads one answer off the connection, whole (test goroutine only).
func readScrape(t *testing.T, br *bufio.Reader) (int, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

const scrape = "GET /metrics HTTP/1.1\r\nHost: gateway:9464\r\nAccept: text/plain;version=0.0.4\r\n\r\n"

func TestAdminListenerCutsClientsThatHoldItOpen(t *testing.T) {
	s := testService(t)
	for _, tc := range []struct {
		description string
		client      func(t *testing.T, conn net.Conn) // the client, in a goroutine of its own
		limit       time.Duration
	}{
		{"a client sending its headers a byte a second (slowloris) is cut at the read-header timeout", func(t *testing.T, conn net.Conn) {
			if _, err := io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: gateway:9464\r\nX-Slow: "); err != nil {
				return
			}
			for {
				if _, err := conn.Write([]byte("a")); err != nil {
					return // the server hung up
				}
				time.Sleep(time.Second) // the attacker's pace, in fake time
			}
		}, adminReadHeaderTimeout},
		{"a client trickling a body a byte a second is cut at the read timeout", func(t *testing.T, conn net.Conn) {
			defer discardAll(conn)()
			// Under 256 KiB: net/http reads such a body before it answers.
			if _, err := io.WriteString(conn, "GET /readyz HTTP/1.1\r\nHost: gateway:9464\r\nContent-Length: 65536\r\n\r\n"); err != nil {
				return
			}
			for {
				if _, err := conn.Write([]byte("a")); err != nil {
					return
				}
				time.Sleep(time.Second)
			}
		}, adminReadTimeout},
		{"a client that asks for /metrics and never reads the answer is cut at the write timeout", func(t *testing.T, conn net.Conn) {
			_, _ = io.WriteString(conn, scrape)
		}, adminWriteTimeout},
		{"a kept-alive connection left idle after a scrape is closed at the idle timeout", func(t *testing.T, conn net.Conn) {
			if _, err := io.WriteString(conn, scrape); err != nil {
				return
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if !assert.NoError(t, err, "the scrape itself is answered") {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode, "the scrape itself is answered")
			_, _ = br.ReadByte() // idle, kept alive, until the server hangs up
		}, adminIdleTimeout},
	} {
		t.Run(tc.description, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := startAdmin(t, s)
				r.attack(func(conn net.Conn) { tc.client(t, conn) })
				assert.Equal(t, tc.limit, r.closedAt(t), "the server closes the connection when the limit ends")
			})
		})
	}
}

func TestAdminListenerLetsASlowScrapeFinish(t *testing.T) {
	// A big registry over a slow link: the scraper reads the page 50 s after
	// asking, within a one-minute scrape_timeout. The write timeout must not
	// cut what the scraper still waits for.
	const slowScrape = 50 * time.Second
	s := testService(t)
	synctest.Test(t, func(t *testing.T) {
		r := startAdmin(t, s)
		_, err := io.WriteString(r.client, scrape)
		require.NoError(t, err)
		time.Sleep(slowScrape) // the scraper's pace, in fake time; the server is blocked writing
		code, body := readScrape(t, bufio.NewReader(r.client))
		assert.Equal(t, http.StatusOK, code)
		assert.Contains(t, body, "process_open_fds", "the whole page: the families are sorted by name, process_ last")
	})
}

func TestAdminListenerRefusesOversizedHeaders(t *testing.T) {
	s := testService(t)
	synctest.Test(t, func(t *testing.T) {
		r := startAdmin(t, s)
		r.attack(func(conn net.Conn) {
			// Written while the answer is read: the server stops reading
			// after MaxHeaderBytes, and a pipe write waits for a reader.
			_, _ = io.WriteString(conn, "GET /metrics HTTP/1.1\r\nHost: gateway:9464\r\nX-Big: "+strings.Repeat("a", 64<<10)+"\r\n\r\n")
		})
		code, _ := readScrape(t, bufio.NewReader(r.client))
		assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, code, "64 KiB of headers is no scrape")
		r.closedAt(t)
	})
}
