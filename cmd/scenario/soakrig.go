package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/gateway/providers/simhttp"
	"github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"
)

// The soak's parts that are not the load: the upstreams, its Redis, the
// replicas and what is measured of each.

// soakUpstream is a simulated provider served over HTTP on loopback from
// this process, so its fault windows run on the soak's clock: reset
// starts a new provider whose windows count from that moment, whichever
// replica calls it and whenever that replica started.
type soakUpstream struct {
	name    string
	url     string // its /v1 base URL
	handler atomic.Pointer[http.Handler]
	srv     *http.Server
	tokens  atomic.Int64 // total_tokens of the answers it sent whole
	answers atomic.Int64
	probes  atomic.Int64 // the gateways' background health probes it answered, not counted above
}

func startUpstream(name, spec string) (*soakUpstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &soakUpstream{name: name, url: "http://" + ln.Addr().String() + "/v1"}
	if err := u.reset(spec); err != nil {
		_ = ln.Close()
		return nil, err
	}
	// Idle connections close after 2 s, so the replicas' idle pools (two
	// goroutines a connection) are empty when their levels are measured.
	u.srv = &http.Server{Handler: u, IdleTimeout: 2 * time.Second, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// reset replaces the simulated provider with a new one of spec: its
// windows start now.
func (u *soakUpstream) reset(spec string) error {
	c, err := sim.Parse(spec)
	if err != nil {
		return err
	}
	p, err := sim.New(c)
	if err != nil {
		return err
	}
	h := simhttp.Handler(p, simhttp.Options{})
	u.handler.Store(&h)
	return nil
}

// ServeHTTP serves the current provider and counts the usage of every
// chat answer it sent whole (a stream it cut panics past the count).
func (u *soakUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := *u.handler.Load()
	if r.URL.Path != "/v1/chat/completions" {
		h.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, simhttp.MaxBodyBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	tw := &teeWriter{ResponseWriter: w}
	h.ServeHTTP(tw, r)
	if tw.status == 0 || tw.status == http.StatusOK {
		if isProbe(body) {
			u.probes.Add(1)
		} else if n := usageIn(tw.body); n > 0 {
			u.tokens.Add(int64(n))
			u.answers.Add(1)
		}
	}
}

func (u *soakUpstream) close() { _ = u.srv.Close() }

// isProbe reports whether a chat request is a gateway's background probe
// of an upstream whose breaker is open: a one-token "ping" (the load never
// sends one).
func isProbe(body []byte) bool { return gjson.GetBytes(body, "messages.0.content").Str == "ping" }

// teeWriter keeps a copy of what a handler writes.
type teeWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

func (t *teeWriter) WriteHeader(code int) {
	if t.status == 0 {
		t.status = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *teeWriter) Write(b []byte) (int, error) {
	t.body = append(t.body, b...)
	return t.ResponseWriter.Write(b)
}

func (t *teeWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// soakRedis is the soak's own redis-server, which its faults stall and
// restart; the mutex hands the current one from the fault schedule to
// whoever stops it.
type soakRedis struct {
	mu   sync.Mutex
	rs   *redisServer
	addr string
}

// stall stops the server (SIGSTOP) for d, then lets it go on (SIGCONT),
// even if ctx ends meanwhile.
func (h *soakRedis) stall(ctx context.Context, d time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.rs.cmd.Process
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	return p.Signal(syscall.SIGCONT)
}

// restart kills the server and, down gives later, starts a new one on
// the same port: every key is lost.
func (h *soakRedis) restart(ctx context.Context, down time.Duration) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rs.stop()
	if err := at(ctx, time.Now(), down); err != nil {
		return err
	}
	s, err := startRedis(ctx, h.addr)
	if err != nil {
		return err
	}
	h.rs = s
	return nil
}

func (h *soakRedis) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rs.stop()
}

// timed is a value at an instant.
type timed struct {
	at time.Time
	v  float64
}

// keySampler reads the soak Redis' DBSIZE every second; a stalled or
// restarting Redis is a missed point.
type keySampler struct {
	mu   sync.Mutex
	seen []timed
}

func (k *keySampler) run(ctx context.Context, addr string) {
	redis.SetLogger(quietRedis{}) // its pool's complaints while Redis is down are the fault, not news
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 300 * time.Millisecond, ReadTimeout: 300 * time.Millisecond,
		WriteTimeout: 300 * time.Millisecond, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if n, err := c.DBSize(ctx).Result(); err == nil {
			k.mu.Lock()
			k.seen = append(k.seen, timed{time.Now(), float64(n)})
			k.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// quietRedis drops go-redis' log lines in this process (the key sampler
// is its only client).
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func (k *keySampler) samples() []timed {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.seen)
}

// soakReplica is one secure_app process behind the balancer and what was
// scraped from its admin /metrics.
type soakReplica struct {
	name    string
	p       *process
	streams atomic.Int64 // streams in flight through it, counted at the balancer
	fast    atomic.Bool  // scrape every 100 ms (it is draining): the last scrape is its final count
	mu      sync.Mutex
	seen    []replicaSample
}

// replicaSample is one scrape of a replica's /metrics.
type replicaSample struct {
	at         time.Time
	goroutines float64 // go_goroutines
	heap       float64 // go_memstats_heap_inuse_bytes: spans in use, fragmentation included
	live       float64 // go_memstats_heap_alloc_bytes: after a forced GC, the live heap
	fds        float64 // process_open_fds: its sockets (clients, upstreams, Redis) and files
	tokens     float64 // gateway_tokens_total, input and output
	inFlight   float64 // gateway_requests_in_flight
	redisConns int     // its connections to Redis (read from /proc, at its idle levels only)
}

// watch scrapes the replica every second (every 100 ms while fast) until
// it exits or ctx ends.
func (rp *soakReplica) watch(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var last time.Time
	for {
		if rp.fast.Load() || time.Since(last) >= time.Second {
			last = time.Now()
			if s, err := scrapeReplica(ctx, rp.p.adminURL+"/metrics"); err == nil {
				rp.mu.Lock()
				rp.seen = append(rp.seen, s)
				rp.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-rp.p.done:
			return
		case <-t.C:
		}
	}
}

func (rp *soakReplica) samples() []replicaSample {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return slices.Clone(rp.seen)
}

// last is its final scrape: for a replica that exited, its count just
// before it did.
func (rp *soakReplica) last() (replicaSample, bool) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if len(rp.seen) == 0 {
		return replicaSample{}, false
	}
	return rp.seen[len(rp.seen)-1], true
}

// scrapeReplica reads the numbers the soak follows from a /metrics page.
func scrapeReplica(ctx context.Context, url string) (replicaSample, error) {
	mfs, err := metricFamilies(ctx, url)
	if err != nil {
		return replicaSample{}, err
	}
	sum := func(name string) float64 {
		var v float64
		for _, m := range mfs[name].GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
		}
		return v
	}
	return replicaSample{at: time.Now(), goroutines: sum("go_goroutines"), heap: sum("go_memstats_heap_inuse_bytes"),
		live: sum("go_memstats_heap_alloc_bytes"), fds: sum("process_open_fds"), tokens: sum("gateway_tokens_total"),
		inFlight: sum("gateway_requests_in_flight")}, nil
}

// idleLevel is a replica's goroutines and heap at rest: its idle
// connections from the balancer closed (those from it to the upstreams
// close by themselves after 2 s) and two GCs forced through its pprof
// endpoint, which collects before it profiles — two, so that what its
// sync.Pools held is gone too, not only moved to their victim caches.
func idleLevel(ctx context.Context, rp *soakReplica, redisPort int) (replicaSample, error) {
	for range 2 {
		if err := forceGC(ctx, rp); err != nil {
			return replicaSample{}, err
		}
	}
	s, err := scrapeReplica(ctx, rp.p.adminURL+"/metrics")
	s.redisConns = socketsTo(rp.p.cmd.Process.Pid, redisPort)
	return s, err
}

// socketsTo counts pid's established TCP connections to a port on
// loopback (Linux: its socket descriptors in /proc/pid/fd, found in
// /proc/pid/net/tcp); 0 where /proc cannot say.
func socketsTo(pid int, port int) int {
	fds := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(fds)
	mine := map[string]bool{}
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	table, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	n := 0
	for line := range strings.Lines(string(table)) {
		f := strings.Fields(line) // sl local remote st … inode (the 10th)
		if len(f) > 9 && f[3] == "01" && strings.HasSuffix(f[2], fmt.Sprintf(":%04X", port)) && mine[f[9]] {
			n++
		}
	}
	return n
}

// forceGC asks the replica's /debug/pprof/heap?gc=1 (SOAK_PROFILES=dir
// keeps the profiles there).
func forceGC(ctx context.Context, rp *soakReplica) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rp.p.adminURL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return fmt.Errorf("forcing a GC on %s: %w", rp.name, err)
	}
	defer resp.Body.Close()
	var keep io.Writer = io.Discard
	if dir := os.Getenv("SOAK_PROFILES"); dir != "" && os.MkdirAll(dir, 0o755) == nil {
		if f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%d.pb.gz", rp.name, time.Now().UnixMilli()))); err == nil {
			defer f.Close()
			keep = f
		}
	}
	_, _ = io.Copy(keep, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("forcing a GC on %s: %s", rp.name, resp.Status)
	}
	return nil
}

// closeIdle closes this process' idle connections (the balancer's to the
// replicas among them) and gives the upstreams' idle timeout time to close
// the replicas' own.
func closeIdle(ctx context.Context) error {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	return at(ctx, time.Now(), 3*time.Second)
}

// streamCounter is a balancer backend's transport that counts the streams
// in flight through it, from the request until its body is closed.
type streamCounter struct{ n *atomic.Int64 }

func (c streamCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get(soakStreamHeader) == "" {
		return http.DefaultTransport.RoundTrip(req)
	}
	c.n.Add(1)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		c.n.Add(-1)
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, done: sync.OnceFunc(func() { c.n.Add(-1) })}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	done func()
}

func (b *countedBody) Close() error {
	b.done()
	return b.ReadCloser.Close()
}

// countStreams gives the balancer's backend at url a streamCounter.
func countStreams(b *balancer, url string, n *atomic.Int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, be := range b.all {
		if be.url == url {
			be.proxy.Transport = streamCounter{n}
			return nil
		}
	}
	return errors.New("no backend " + url)
}
