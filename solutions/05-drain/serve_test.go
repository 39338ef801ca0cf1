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

// rig is a server under Serve with an in-memory client. Its cleanup stops
// Serve and waits for it, for every handler and for every request, so a
// test that fails half way (or a Serve that closes connections under running
// handlers) leaves nothing blocked in the bubble, which would panic the
// package.
type rig struct {
	t        *testing.T
	d        *Drainer
	ln       *pipeListener
	client   *http.Client
	stop     context.CancelFunc
	done     chan serveResult
	start    time.Time
	reqs     sync.WaitGroup // client requests
	handlers sync.WaitGroup // handlers running on the server
	once     sync.Once
	result   serveResult
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
	ln := newPipeListener()
	ctx, stop := context.WithCancel(t.Context())
	r := &rig{t: t, d: d, ln: ln, stop: stop, done: make(chan serveResult, 1), start: time.Now(),
		client: &http.Client{Transport: &http.Transport{DialContext: ln.dial, DisableKeepAlives: true}}}
	counted := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.handlers.Add(1)
		defer r.handlers.Done()
		handler(w, req)
	})
	mux := http.NewServeMux()
	mux.Handle("/work", d.Middleware(counted))
	mux.Handle("/untracked", counted) // e.g. a metrics scrape the drainer does not count
	mux.Handle("/readyz", d.Readiness())
	mux.Handle("/healthz", d.Liveness())
	go func() {
		rep, err := Serve(ctx, &http.Server{Handler: mux}, ln, d, opts)
		r.done <- serveResult{rep, err, time.Since(r.start)}
	}()
	t.Cleanup(func() {
		r.finish()
		r.handlers.Wait()
		r.reqs.Wait()
		// Fake time stops when the test's goroutine ends: give a Shutdown
		// that Serve left running (a bug its assertions report) the fake
		// minute it needs to finish polling.
		time.Sleep(time.Minute)
	})
	synctest.Wait()
	select {
	case res := <-r.done:
		r.once.Do(func() { r.result = res })
		t.Fatalf("want Serve running until its context ends, got it returning at once with error: %v", res.err)
	default:
	}
	return r
}

// get sends one request in the background.
func (r *rig) get(path string) <-chan response {
	out := make(chan response, 1)
	r.reqs.Go(func() {
		resp, err := r.client.Get("http://gateway" + path)
		if err != nil {
			out <- response{err: err, at: time.Since(r.start)}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- response{code: resp.StatusCode, body: string(b), at: time.Since(r.start)}
	})
	return out
}

// wantStatus sends one request and fails the test unless it is answered
// with want.
func (r *rig) wantStatus(path string, want int, why string) {
	r.t.Helper()
	resp := <-r.get(path)
	require.NoError(r.t, resp.err, "want %d for GET %s %s, got %v", want, path, why, resp.err)
	require.Equal(r.t, want, resp.code, "want %d for GET %s %s, got %d", want, path, why, resp.code)
}

// finish stops Serve (if the test has not), waits for it, and closes the
// listener and the client. Calling it again returns the same result.
func (r *rig) finish() serveResult {
	r.t.Helper()
	r.once.Do(func() {
		r.stop()
		select {
		case r.result = <-r.done:
		case <-time.After(24 * time.Hour):
			r.t.Errorf("want Serve to return once its context ended, got it still running a day later")
		}
	})
	r.ln.Close()
	r.client.CloseIdleConnections()
	return r.result
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
		require.NoError(t, resp.err, "want the in-flight request answered, got %v: the shutdown dropped it", resp.err)
		require.Equal(t, http.StatusOK, resp.code, "want 200 for the in-flight request, got %d", resp.code)
		require.Equal(t, "finished", resp.body, "want its whole body, got %q", resp.body)
		require.NoError(t, res.err, "want a clean shutdown, got %v (was Shutdown given the already-cancelled signal context?)", res.err)
		require.Equal(t, Report{Drained: true, Cut: 0}, res.report, "want Drained, got %+v", res.report)
		require.Less(t, res.at, 5*time.Second+100*time.Millisecond, "want Serve to return just after the last request (5 s), not at the end of Grace, got %v", res.at)
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
		require.NoError(t, resp.err, "want the untracked request answered, got %v: Shutdown needs a live context to wait for it", resp.err)
		require.Equal(t, http.StatusOK, resp.code, "want 200 for the untracked request, got %d", resp.code)
		require.NoError(t, res.err, "want a clean shutdown, got %v: Shutdown given the already-cancelled signal context gives up at once", res.err)
		require.True(t, res.report.Drained, "want Drained (nothing tracked was in flight), got %+v", res.report)
	})
}

func TestServeKeepsServingDuringTheReadinessDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, ServeOptions{ReadinessDelay: 5 * time.Second, Grace: 10 * time.Second},
			func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
		r.stop()
		time.Sleep(time.Second) // 1 s into the 5 s readiness delay
		r.wantStatus("/readyz", http.StatusServiceUnavailable, "as soon as shutdown begins")
		r.wantStatus("/work", http.StatusOK, "during the readiness delay: the load balancer has not noticed yet")
		res := r.finish()
		require.GreaterOrEqual(t, res.at, 5*time.Second, "want the drain to start only after the 5 s readiness delay, got Serve done at %v", res.at)
		require.NoError(t, res.err, "want a clean shutdown, got %v", res.err)
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
		r.wantStatus("/work", http.StatusServiceUnavailable, "arriving during the drain")
		slowCode := (<-slow).code
		require.Equal(t, http.StatusOK, slowCode, "want 200 for the slow request, in flight before the drain, got %d", slowCode)
		res := r.finish()
		require.True(t, res.report.Drained, "want Drained, got %+v", res.report)
	})
}

func TestServeCutsRequestsWhenGraceEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		cut := make(chan time.Duration, 2)
		r := startRig(t, ServeOptions{ReadinessDelay: time.Second, Grace: 5 * time.Second}, stream(start, cut))
		streams := []<-chan response{r.get("/work"), r.get("/work")}
		time.Sleep(time.Second)
		r.stop() // shutdown at 1 s: readiness delay to 2 s, grace to 7 s
		res := r.finish()
		for _, s := range streams {
			<-s
		}
		require.Equal(t, Report{Drained: false, Cut: 2}, res.report, "want both streams, still running when Grace ended, reported cut, got %+v", res.report)
		require.Less(t, res.at, 7*time.Second+100*time.Millisecond,
			"want Serve done just after Grace ends (7 s), got %v: cancel the requests' base context; Shutdown alone waits for the streams (an hour)", res.at)
	})
}

func TestACutRequestIsToldTheServerCutIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		causes := make(chan error, 1)
		r := startRig(t, ServeOptions{Grace: time.Second}, func(w http.ResponseWriter, req *http.Request) {
			<-req.Context().Done()
			causes <- context.Cause(req.Context())
		})
		s := r.get("/work")
		synctest.Wait()
		r.stop()
		res := r.finish()
		<-s
		cause := <-causes
		require.ErrorIs(t, cause, ErrCut, "want context.Cause of a request cut when Grace ends to be ErrCut, so a handler can tell the server cut it from a client that left; got %v", cause)
		require.Equal(t, Report{Drained: false, Cut: 1}, res.report, "want the request reported as cut, got %+v", res.report)
	})
}

// stream is a handler for a request that runs until its context ends (or an
// hour passes); it reports when it ended, since start.
func stream(start time.Time, ended chan<- time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		select {
		case <-req.Context().Done():
		case <-time.After(time.Hour):
			_, _ = io.WriteString(w, "an hour later")
		}
		ended <- time.Since(start)
	}
}

func TestServeFollowsTheShutdownOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		cut := make(chan time.Duration, 1)
		streaming := stream(start, cut)
		r := startRig(t, ServeOptions{ReadinessDelay: 2 * time.Second, Grace: 5 * time.Second},
			func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Query().Has("stream") {
					streaming(w, req)
					return
				}
				_, _ = io.WriteString(w, "ok")
			})
		s := r.get("/work?stream")
		time.Sleep(time.Second)
		r.stop() // SIGTERM at 1 s: readiness off now, drain from 3 s, cut at 8 s
		synctest.Wait()
		r.wantStatus("/readyz", http.StatusServiceUnavailable, "at 1 s, the instant shutdown begins")
		r.wantStatus("/healthz", http.StatusOK, "during the readiness delay")
		time.Sleep(2*time.Second - time.Nanosecond)
		r.wantStatus("/work", http.StatusOK, "1 ns before ReadinessDelay ends: the drain has not begun")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		r.wantStatus("/work", http.StatusServiceUnavailable, "at 3 s, the instant ReadinessDelay ends: the drain has begun")
		r.wantStatus("/healthz", http.StatusOK, "while draining, or the orchestrator kills the pod mid-drain")
		res := r.finish()
		<-s
		ended := <-cut
		require.Equal(t, 8*time.Second, ended, "want the stream's context cancelled exactly when Grace ends (1 s + ReadinessDelay 2 s + Grace 5 s), got it ending at %v", ended)
		require.NoError(t, res.err, "want a clean shutdown, got %v", res.err)
		require.Equal(t, Report{Drained: false, Cut: 1}, res.report, "want the stream reported as cut, got %+v", res.report)
	})
}

func TestServeReportCountsOnlyWhatItCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		cut := make(chan time.Duration, 3)
		streaming := stream(start, cut)
		r := startRig(t, ServeOptions{ReadinessDelay: time.Second, Grace: 5 * time.Second},
			func(w http.ResponseWriter, req *http.Request) {
				if req.URL.Query().Has("stream") {
					streaming(w, req)
					return
				}
				time.Sleep(4 * time.Second) // ends at 4 s, inside Grace (2 s to 7 s)
				_, _ = io.WriteString(w, "finished")
			})
		quick := r.get("/work")
		streams := []<-chan response{r.get("/work?stream"), r.get("/work?stream"), r.get("/untracked?stream")}
		time.Sleep(time.Second)
		r.stop()
		res := r.finish()
		quickCode := (<-quick).code
		require.Equal(t, http.StatusOK, quickCode, "want 200 for the request that ended inside Grace, got %d", quickCode)
		for _, s := range streams {
			<-s
		}
		require.Equal(t, Report{Drained: false, Cut: 2}, res.report,
			"want Cut 2: of 3 tracked requests in flight when the drain began, 1 finished inside Grace (the untracked one is not counted), got %+v", res.report)
	})
}

func TestServeRequestEndingExactlyAsGraceEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := startRig(t, ServeOptions{ReadinessDelay: time.Second, Grace: 5 * time.Second},
			func(w http.ResponseWriter, _ *http.Request) {
				time.Sleep(7 * time.Second) // from 0 s to 7 s: the same instant Grace ends (1 s + 1 s + 5 s)
				_, _ = io.WriteString(w, "finished")
			})
		work := r.get("/work")
		time.Sleep(time.Second)
		r.stop()
		res := r.finish()
		resp := <-work
		require.NoError(t, resp.err, "want the request that ended as Grace ended answered, got %v", resp.err)
		require.Equal(t, "finished", resp.body, "want its whole body delivered, got %q", resp.body)
		// Which comes first at 7 s, the request's end or Grace's, is a race;
		// either answer is right as long as the report agrees with itself.
		require.Contains(t, []Report{{Drained: true, Cut: 0}, {Drained: false, Cut: 1}}, res.report,
			"want {Drained:true} or {Cut:1} for a request ending exactly as Grace ends, got %+v: let the in-flight count decide, not Drain's bool alone", res.report)
		require.NoError(t, res.err, "want a clean shutdown, got %v", res.err)
	})
}

func TestServeReturnsAtOnceWhenServingFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		ln.Close() // Accept fails at once
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		start := time.Now()
		_, err := Serve(ctx, &http.Server{Handler: http.NotFoundHandler()}, ln, newDrainer(t), ServeOptions{Grace: time.Second})
		require.Zero(t, time.Since(start), "want Serve to return the moment serving fails, got it waiting %v (for ctx?)", time.Since(start))
		require.ErrorIs(t, err, net.ErrClosed, "want the serving error returned, got %v", err)
	})
}

func TestServeWithAContextAlreadyDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ln := newPipeListener()
		defer ln.Close()
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		d := newDrainer(t)
		rep, err := Serve(ctx, &http.Server{Handler: d.Middleware(http.NotFoundHandler())}, ln, d, ServeOptions{Grace: time.Second})
		require.NoError(t, err, "want a clean shutdown when ctx was done before Serve began, got %v", err)
		require.Equal(t, Report{Drained: true}, rep, "want Drained with nothing in flight, got %+v", rep)
		require.False(t, d.Accepting(), "want the Drainer drained, got it still accepting")
	})
}
