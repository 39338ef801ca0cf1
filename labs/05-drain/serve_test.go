package drain

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeListener is an in-memory net.Listener: every dial is a net.Pipe. A
// goroutine blocked on a pipe is durably blocked, so the synctest clock keeps
// moving; on loopback TCP it would freeze.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
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

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, errors.New("connection refused: listener closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// rig is a server under Serve with an in-memory client.
type rig struct {
	t      *testing.T
	d      *Drainer
	ln     *pipeListener
	client *http.Client
	stop   context.CancelFunc
	done   chan serveResult
	start  time.Time
}

type serveResult struct {
	report Report
	err    error
	at     time.Duration
}

type response struct {
	code int
	body string
	err  error
	at   time.Duration
}

func startRig(t *testing.T, opts ServeOptions, handler http.HandlerFunc) *rig {
	t.Helper()
	d := newDrainer(t)
	mux := http.NewServeMux()
	mux.Handle("/work", d.Middleware(handler))
	mux.Handle("/untracked", handler) // e.g. a metrics scrape the drainer does not count
	mux.Handle("/readyz", d.Readiness())
	ln := newPipeListener()
	ctx, stop := context.WithCancel(t.Context())
	r := &rig{t: t, d: d, ln: ln, stop: stop, done: make(chan serveResult, 1), start: time.Now(),
		client: &http.Client{Transport: &http.Transport{DialContext: ln.dial, DisableKeepAlives: true}}}
	go func() {
		rep, err := Serve(ctx, &http.Server{Handler: mux}, ln, d, opts)
		r.done <- serveResult{rep, err, time.Since(r.start)}
	}()
	synctest.Wait()
	select {
	case res := <-r.done:
		ln.Close()
		t.Fatalf("Serve returned before its context ended: %+v", res)
	default:
	}
	return r
}

// get sends one request in the background.
func (r *rig) get(path string) <-chan response {
	out := make(chan response, 1)
	go func() {
		resp, err := r.client.Get("http://gateway" + path)
		if err != nil {
			out <- response{err: err, at: time.Since(r.start)}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- response{code: resp.StatusCode, body: string(b), at: time.Since(r.start)}
	}()
	return out
}

func (r *rig) finish() serveResult {
	res := <-r.done
	r.ln.Close()
	r.client.CloseIdleConnections()
	return res
}

func TestServeDrainsInFlightRequestsBeforeShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, ServeOptions{ReadinessDelay: 2 * time.Second, Grace: 10 * time.Second},
			func(w http.ResponseWriter, _ *http.Request) {
				time.Sleep(5 * time.Second)
				_, _ = io.WriteString(w, "finished")
			})
		inflight := r.get("/work")
		time.Sleep(time.Second)
		r.stop() // SIGTERM at 1 s; the request needs until 5 s
		resp := <-inflight
		res := r.finish()
		require.NoError(t, resp.err, "an in-flight request must not be dropped by the shutdown")
		assert.Equal(t, http.StatusOK, resp.code)
		assert.Equal(t, "finished", resp.body)
		require.NoError(t, res.err, "a clean shutdown returns no error (was Shutdown given the already-cancelled signal context?)")
		assert.Equal(t, Report{Drained: true, Cut: 0}, res.report)
		assert.Less(t, res.at, 6*time.Second, "Serve returns soon after the last request, not at the end of Grace")
	})
}

func TestServeShutdownStillWaitsForConnectionsTheDrainerDoesNotSee(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, ServeOptions{Grace: 10 * time.Second}, func(w http.ResponseWriter, _ *http.Request) {
			time.Sleep(2 * time.Second)
			_, _ = io.WriteString(w, "scraped")
		})
		scrape := r.get("/untracked")
		time.Sleep(time.Second)
		r.stop() // nothing tracked is in flight: the drain ends at once
		resp := <-scrape
		res := r.finish()
		require.NoError(t, resp.err, "http.Server.Shutdown must still wait for the untracked request; it needs a live context to do so")
		assert.Equal(t, http.StatusOK, resp.code)
		require.NoError(t, res.err, "Shutdown given the already-cancelled signal context gives up at once and reports an error")
		assert.True(t, res.report.Drained)
	})
}

func TestServeKeepsServingDuringTheReadinessDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, ServeOptions{ReadinessDelay: 5 * time.Second, Grace: 10 * time.Second},
			func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		r.stop()
		time.Sleep(time.Second) // 1 s into the 5 s readiness delay
		ready := <-r.get("/readyz")
		work := <-r.get("/work")
		res := r.finish()
		require.NoError(t, ready.err)
		assert.Equal(t, http.StatusServiceUnavailable, ready.code, "/readyz turns 503 as soon as shutdown begins")
		require.NoError(t, work.err, "requests still routed here during the readiness delay must be served, not refused")
		assert.Equal(t, http.StatusOK, work.code, "the load balancer has not noticed yet: refusing now drops its traffic")
		assert.GreaterOrEqual(t, res.at, 5*time.Second, "the drain starts only after the readiness delay")
		require.NoError(t, res.err)
	})
}

func TestServeRefusesNewRequestsWhileDraining(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, ServeOptions{Grace: 10 * time.Second},
			func(w http.ResponseWriter, _ *http.Request) {
				time.Sleep(3 * time.Second)
				_, _ = io.WriteString(w, "slow")
			})
		slow := r.get("/work")
		time.Sleep(time.Second)
		r.stop()
		time.Sleep(time.Second) // draining, the slow request still running
		late := <-r.get("/work")
		require.NoError(t, late.err)
		assert.Equal(t, http.StatusServiceUnavailable, late.code, "a request arriving during the drain is refused with 503")
		assert.Equal(t, http.StatusOK, (<-slow).code)
		res := r.finish()
		assert.True(t, res.report.Drained)
	})
}

func TestServeCutsRequestsWhenGraceEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, ServeOptions{ReadinessDelay: time.Second, Grace: 5 * time.Second},
			func(w http.ResponseWriter, req *http.Request) {
				// A stream: runs until its context ends (or an hour passes).
				select {
				case <-req.Context().Done():
				case <-time.After(time.Hour):
					_, _ = io.WriteString(w, "an hour later")
				}
			})
		streams := []<-chan response{r.get("/work"), r.get("/work")}
		time.Sleep(time.Second)
		r.stop() // shutdown at 1 s: readiness delay to 2 s, grace to 7 s
		res := r.finish()
		for _, s := range streams {
			<-s
		}
		assert.Equal(t, Report{Drained: false, Cut: 2}, res.report, "two requests were still running when Grace ended")
		assert.Less(t, res.at, 10*time.Second,
			"when Grace ends the requests' contexts must be cancelled; http.Server.Shutdown alone waits for the stream (an hour)")
	})
}
