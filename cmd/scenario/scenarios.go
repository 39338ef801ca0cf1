package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

const chatBody = `{"model":"auto","messages":[{"role":"user","content":"how does a circuit breaker work"}]}`

// chatTarget is a chat completion for tenant at a gateway.
func chatTarget(url, tenant string) vegeta.Target {
	return vegeta.Target{Method: http.MethodPost, URL: url + "/v1/chat/completions", Body: []byte(chatBody),
		Header: http.Header{"Content-Type": {"application/json"}, "X-Tenant-ID": {tenant}}}
}

func brownout(ctx context.Context, r *report) error {
	provider := fmt.Sprintf("name=alpha,latency=40ms,jitter=10ms,slow=15s-35s:700ms@0.02,seed=%d", r.seed)
	g, err := startGateway(ctx, "-provider", provider, "-rate=1e6", "-burst=1000000", "-max-concurrent=256", "-max-per-tenant=0")
	if err != nil {
		return err
	}
	defer g.stop()
	l := load{name: "brownout", targets: []vegeta.Target{chatTarget(g.url, "load")}, rate: 40, dur: 50 * time.Second}
	r.configure("production_app -provider " + provider + " -rate 1e6 -max-concurrent 256")
	r.configure(fmt.Sprintf("load: %d requests/s for %s, one tenant (vegeta)", l.rate, l.dur))
	r.progress("40 requests/s for 50 s; the brown-out runs from 15 s to 35 s")
	secs := bySecond(l.run(time.Now()))
	fault := []band{{From: 15, To: 35, Label: "2% of calls +700 ms"}}
	if err := r.chart(chart{Title: "Latency: p50 stays flat while p99 climbs", YLabel: "milliseconds", Bands: fault, Series: []series{
		{Name: "p50", Color: "#1f77b4", Points: pointsOf(secs, func(s second) float64 { return s.p50 })},
		{Name: "p95", Color: "#ff7f0e", Points: pointsOf(secs, func(s second) float64 { return s.p95 })},
		{Name: "p99", Color: "#d62728", Points: pointsOf(secs, func(s second) float64 { return s.p99 })},
	}}); err != nil {
		return err
	}
	r.text(phaseTable(secs, []band{{From: 0, To: 15, Label: "before (0–15 s)"}, {From: 15, To: 35, Label: "brown-out (15–35 s)"}, {From: 35, To: 51, Label: "after (35–50 s)"}}))
	return nil
}

func outage(ctx context.Context, r *report) error {
	alpha := fmt.Sprintf("name=alpha,latency=40ms,jitter=10ms,outage=15s-30s,seed=%d", r.seed)
	beta := fmt.Sprintf("name=beta,latency=90ms,jitter=20ms,seed=%d", r.seed+1)
	g, err := startGateway(ctx, "-provider", alpha, "-provider", beta, "-rate=1e6", "-burst=1000000", "-max-concurrent=256",
		"-max-per-tenant=0", "-failure-threshold=3", "-recovery-timeout=60s", "-base-backoff=10ms")
	if err != nil {
		return err
	}
	defer g.stop()
	sctx, cancel := context.WithCancel(ctx)
	var sc scraper
	start := time.Now()
	done := make(chan struct{})
	go func() { defer close(done); sc.run(sctx, g.url+"/metrics", start, 250*time.Millisecond) }()
	l := load{name: "outage", targets: []vegeta.Target{chatTarget(g.url, "load")}, rate: 30, dur: 45 * time.Second}
	r.configure("production_app -provider " + alpha + " -provider " + beta)
	r.configure("                -failure-threshold 3 -recovery-timeout 60s -base-backoff 10ms (background probes at their defaults: -probe-interval 250ms, -probe-max-interval 2s)")
	r.configure(fmt.Sprintf("load: %d requests/s for %s (vegeta)", l.rate, l.dur))
	r.progress("30 requests/s for 45 s; alpha is down from 15 s to 30 s")
	secs := bySecond(l.run(start))
	cancel()
	<-done
	fault := []band{{From: 15, To: 30, Label: "alpha answers 503"}}
	if err := r.chart(chart{Title: "Who answered: the fallback carries the outage", YLabel: "answers per second", Bands: fault, Series: []series{
		{Name: "alpha (primary)", Color: "#1f77b4", Points: pointsOf(secs, func(s second) float64 { return float64(s.models["alpha-1"]) })},
		{Name: "beta (fallback)", Color: "#2ca02c", Points: pointsOf(secs, func(s second) float64 { return float64(s.models["beta-1"]) })},
		{Name: "errors", Color: "#d62728", Points: pointsOf(secs, func(s second) float64 { return float64(s.failed + s.shed) })},
	}}); err != nil {
		return err
	}
	var state []point
	for _, s := range sc.scrapes() {
		state = append(state, point{s.t, s.breakers[upstream{provider: "alpha", model: "alpha-1"}]})
	}
	if err := r.chart(chart{Title: "alpha's breaker: 0 closed, 1 half-open, 2 open", YLabel: "state", YMax: 2, Bands: fault,
		Series: []series{{Name: "alpha/alpha-1", Color: "#9467bd", Points: state}}}); err != nil {
		return err
	}
	if err := r.chart(chart{Title: "Latency: one attempt more while the breaker learns, then the fallback's own", YLabel: "milliseconds", Bands: fault, Series: []series{
		{Name: "p50", Color: "#1f77b4", Points: pointsOf(secs, func(s second) float64 { return s.p50 })},
		{Name: "p99", Color: "#d62728", Points: pointsOf(secs, func(s second) float64 { return s.p99 })},
	}}); err != nil {
		return err
	}
	r.text(phaseTable(secs, []band{{From: 0, To: 15, Label: "before (0–15 s)"}, {From: 15, To: 30, Label: "outage (15–30 s)"}, {From: 30, To: 46, Label: "after (30–45 s)"}}))
	return nil
}

func burst(ctx context.Context, r *report) error {
	provider := fmt.Sprintf("name=alpha,latency=200ms,jitter=20ms,seed=%d", r.seed)
	common := []string{"-provider", provider, "-max-concurrent=16", "-max-queue-wait=1s", "-max-per-tenant=0"}
	limited, err := startGateway(ctx, append(common, "-rate=20", "-burst=20")...)
	if err != nil {
		return err
	}
	defer limited.stop()
	unlimited, err := startGateway(ctx, append(common, "-rate=1e6", "-burst=1000000")...)
	if err != nil {
		return err
	}
	defer unlimited.stop()
	r.configure("production_app -provider " + provider + " -max-concurrent 16 -max-queue-wait 1s")
	r.configure("  A: -rate 20 -burst 20 (a per-tenant rate limit before the semaphore)")
	r.configure("  B: -rate 1e6 (the semaphore alone)")
	r.configure("load: 120 requests/s for 15 s from one tenant, to A, then the same to B (vegeta)")
	r.progress("120 requests/s for 15 s to A (rate limit + semaphore), then to B (semaphore only)")
	a := bySecond(load{name: "A", targets: []vegeta.Target{chatTarget(limited.url, "burst")}, rate: 120, dur: 15 * time.Second}.run(time.Now()))
	b := bySecond(load{name: "B", targets: []vegeta.Target{chatTarget(unlimited.url, "burst")}, rate: 120, dur: 15 * time.Second}.run(time.Now()))
	if err := r.chart(chart{Title: "A, rate limited: the excess is refused at once (429)", YLabel: "requests per second", YMax: 130, Series: []series{
		{Name: "answered", Color: "#2ca02c", Points: pointsOf(a, func(s second) float64 { return float64(s.ok) })},
		{Name: "429 rate limited", Color: "#ff7f0e", Points: pointsOf(a, func(s second) float64 { return float64(s.limited) })},
		{Name: "503 shed", Color: "#d62728", Points: pointsOf(a, func(s second) float64 { return float64(s.shed) })},
	}}); err != nil {
		return err
	}
	if err := r.chart(chart{Title: "B, semaphore alone: everything queues, then is shed (503) after waiting", YLabel: "requests per second", YMax: 130, Series: []series{
		{Name: "answered", Color: "#2ca02c", Points: pointsOf(b, func(s second) float64 { return float64(s.ok) })},
		{Name: "429 rate limited", Color: "#ff7f0e", Points: pointsOf(b, func(s second) float64 { return float64(s.limited) })},
		{Name: "503 shed", Color: "#d62728", Points: pointsOf(b, func(s second) float64 { return float64(s.shed) })},
	}}); err != nil {
		return err
	}
	if err := r.chart(chart{Title: "p99 of answered requests: fast with the limit, the queue's wait without", YLabel: "milliseconds", Series: []series{
		{Name: "A: rate limit + semaphore", Color: "#1f77b4", Points: pointsOf(a, func(s second) float64 { return s.p99 })},
		{Name: "B: semaphore alone", Color: "#d62728", Points: pointsOf(b, func(s second) float64 { return s.p99 })},
	}}); err != nil {
		return err
	}
	throughout := []band{{From: 0, To: 16, Label: "the burst"}}
	r.text("A, rate limit + semaphore:\n\n" + phaseTable(a, throughout))
	r.text("B, semaphore alone:\n\n" + phaseTable(b, throughout))
	return nil
}

// jwtSecret is the scenarios' secret, random per run like their tokens: a
// constant here would be a published secret secure_app refuses without -dev.
var jwtSecret = func() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}()

// tieredTarget is a chat completion with a bearer token.
func tieredTarget(url, token string) vegeta.Target {
	return vegeta.Target{Method: http.MethodPost, URL: url + "/v1/chat/completions", Body: []byte(chatBody),
		Header: http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + token}}}
}

// mintToken asks a secure_app binary for a dev token.
func mintToken(ctx context.Context, bin, tenant, tier, tiers string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, "token", "--tenant", tenant, "--tier", tier, "--tiers", tiers)
	cmd.Env = append(os.Environ(), "JWT_SECRET="+jwtSecret)
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// oneTier writes a tier policy with one tier of rate 10/s, burst 10.
func oneTier(dir string) (string, error) {
	file := filepath.Join(dir, "tiers.yaml")
	return file, os.WriteFile(file, []byte(`tiers:
  team:
    rate_per_second: 10
    burst: 10
    max_in_flight: 64
    max_prompt_bytes: 65536
    models: ["*"]
    max_request_timeout: 30s
    tokens_per_minute: 0
`), 0o644)
}

func replicas(ctx context.Context, r *report) error {
	bin, err := binaries(ctx, r)
	if err != nil {
		return err
	}
	provider := fmt.Sprintf("name=alpha,latency=20ms,seed=%d", r.seed)
	var inproc []vegeta.Target
	for range 3 {
		g, err := startGateway(ctx, "-provider", provider, "-rate=10", "-burst=10", "-max-per-tenant=0")
		if err != nil {
			return err
		}
		defer g.stop()
		inproc = append(inproc, chatTarget(g.url, "one-tenant"))
	}
	rs, err := startRedis(ctx, "")
	if err != nil {
		return err
	}
	defer rs.stop()
	tiers, err := oneTier(r.dir)
	if err != nil {
		return err
	}
	defer os.Remove(tiers)
	token, err := mintToken(ctx, filepath.Join(bin, "secure_app"), "one-tenant", "team", tiers)
	if err != nil {
		return fmt.Errorf("minting a token: %w", err)
	}
	var shared []vegeta.Target
	for range 3 {
		p, err := startProcess(ctx, filepath.Join(bin, "secure_app"), []string{"JWT_SECRET=" + jwtSecret},
			"-redis-url", rs.url(), "-tiers", tiers, "-provider", provider)
		if err != nil {
			return err
		}
		defer p.kill()
		shared = append(shared, tieredTarget(p.url, token))
	}
	r.configure("3 × production_app -provider " + provider + " -rate 10 -burst 10   (in-process buckets)")
	r.configure("3 × secure_app -provider " + provider + " -tiers (rate 10/s, burst 10) -redis-url …   (one bucket on Redis)")
	r.configure("load: 60 requests/s for 20 s from one tenant, spread round-robin over the three (vegeta)")
	r.progress("60 requests/s for 20 s over three production_app replicas, then over three secure_app replicas")
	a := bySecond(load{name: "in-process", targets: inproc, rate: 60, dur: 20 * time.Second}.run(time.Now()))
	b := bySecond(load{name: "redis", targets: shared, rate: 60, dur: 20 * time.Second}.run(time.Now()))
	if err := r.chart(chart{Title: "Admitted requests per second for one tenant with a 10/s quota", YLabel: "answered per second", YMax: 40, Series: []series{
		{Name: "3 replicas, in-process limit", Color: "#d62728", Points: pointsOf(a, func(s second) float64 { return float64(s.ok) })},
		{Name: "3 replicas, Redis limit", Color: "#2ca02c", Points: pointsOf(b, func(s second) float64 { return float64(s.ok) })},
		{Name: "the quota", Color: "#888", Dashed: true, Points: []point{{0, 10}, {20, 10}}},
	}}); err != nil {
		return err
	}
	total := func(secs []second, from float64) (ok int) {
		for _, s := range secs {
			if s.t >= from && s.t < 20 {
				ok += s.ok
			}
		}
		return ok
	}
	r.text(fmt.Sprintf("| limit | answered in 5–20 s | per second | × the quota |\n| --- | ---: | ---: | ---: |\n"+
		"| in-process, 3 replicas | %d | %.1f | %.1f× |\n| Redis, 3 replicas | %d | %.1f | %.1f× |\n\n(The first 5 s are left out: each bucket starts full, a burst of 10 per bucket.)",
		total(a, 5), float64(total(a, 5))/15, float64(total(a, 5))/15/10, total(b, 5), float64(total(b, 5))/15, float64(total(b, 5))/15/10))
	return nil
}

func redisOutage(ctx context.Context, r *report) error {
	bin, err := binaries(ctx, r)
	if err != nil {
		return err
	}
	rs, err := startRedis(ctx, "")
	if err != nil {
		return err
	}
	defer func() { rs.stop() }()
	provider := fmt.Sprintf("name=alpha,latency=20ms,seed=%d", r.seed)
	env := []string{"JWT_SECRET=" + jwtSecret}
	closed, err := startProcess(ctx, filepath.Join(bin, "secure_app"), env, "-redis-url", rs.url(), "-provider", provider, "-redis-prefix", "closed")
	if err != nil {
		return err
	}
	defer closed.kill()
	open, err := startProcess(ctx, filepath.Join(bin, "secure_app"), env, "-redis-url", rs.url(), "-provider", provider, "-redis-prefix", "open", "-ratelimit-fail-open")
	if err != nil {
		return err
	}
	defer open.kill()
	token, err := mintToken(ctx, filepath.Join(bin, "secure_app"), "steady", "enterprise", "")
	if err != nil {
		return fmt.Errorf("minting a token: %w", err)
	}
	r.configure("secure_app -provider " + provider + " -redis-url …                       (fail closed, the default)")
	r.configure("secure_app -provider " + provider + " -redis-url … -ratelimit-fail-open")
	r.configure("load: 20 requests/s to each for 30 s, one enterprise tenant (vegeta); Redis is killed at 10 s and restarted at 20 s")
	r.progress("20 requests/s to each for 30 s; Redis is down from 10 s to 20 s")
	start := time.Now()
	// The fault, on schedule: Redis stops at 10 s and starts again on the
	// same address at 20 s. This goroutine owns rs until it reports on
	// restarted, which every return below waits for.
	restarted := make(chan error, 1)
	go func() {
		if err := at(ctx, start, 10*time.Second); err != nil {
			restarted <- err
			return
		}
		rs.stop()
		if err := at(ctx, start, 20*time.Second); err != nil {
			restarted <- err
			return
		}
		s, err := startRedis(ctx, rs.addr)
		if err == nil {
			rs = s
		}
		restarted <- err
	}()
	failClosed := &side{name: "fail closed", target: tieredTarget(closed.url, token)}
	failOpen := &side{name: "fail open", target: tieredTarget(open.url, token)}
	sideBySide(start, 20, 30*time.Second, failClosed, failOpen)
	if err := <-restarted; err != nil {
		return err
	}
	a, b := bySecond(failClosed.samples), bySecond(failOpen.samples)
	fault := []band{{From: 10, To: 20, Label: "Redis down"}}
	if err := r.chart(chart{Title: "Fail closed (default): refused with 503 while Redis is down", YLabel: "requests per second", YMax: 25, Bands: fault, Series: []series{
		{Name: "answered", Color: "#2ca02c", Points: pointsOf(a, func(s second) float64 { return float64(s.ok) })},
		{Name: "503", Color: "#d62728", Points: pointsOf(a, func(s second) float64 { return float64(s.shed) })},
	}}); err != nil {
		return err
	}
	if err := r.chart(chart{Title: "Fail open: served, with no limit enforced, while Redis is down", YLabel: "requests per second", YMax: 25, Bands: fault, Series: []series{
		{Name: "answered", Color: "#2ca02c", Points: pointsOf(b, func(s second) float64 { return float64(s.ok) })},
		{Name: "503", Color: "#d62728", Points: pointsOf(b, func(s second) float64 { return float64(s.shed) })},
	}}); err != nil {
		return err
	}
	phases := []band{{From: 0, To: 10, Label: "before"}, {From: 10, To: 20, Label: "Redis down"}, {From: 20, To: 31, Label: "after"}}
	r.text("Fail closed:\n\n" + phaseTable(a, phases))
	r.text("Fail open:\n\n" + phaseTable(b, phases))
	return nil
}

// balancer round-robins over the backends whose /readyz answers 200,
// checking every 100 ms — a load balancer in a few lines.
type balancer struct {
	mu    sync.Mutex
	all   []*backend
	ready []*backend // by URL
	next  int
}

// backend is one server behind the balancer.
type backend struct {
	url    string
	readyz *http.Request // its readiness check
	proxy  *httputil.ReverseProxy
}

func (b *balancer) add(url, readyz string) error {
	target, err := neturl.Parse(url)
	if err != nil {
		return err
	}
	check, err := http.NewRequest(http.MethodGet, readyz, nil)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all = append(b.all, &backend{url: url, readyz: check, proxy: httputil.NewSingleHostReverseProxy(target)})
	return nil
}

// check refreshes the ready set every 100 ms until ctx ends.
func (b *balancer) check(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		b.refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// refresh asks every backend's /readyz once and routes to those that said yes.
func (b *balancer) refresh(ctx context.Context) {
	b.mu.Lock()
	all := slices.Clone(b.all)
	b.mu.Unlock()
	var up []*backend
	for _, be := range all {
		if ready(be.readyz.WithContext(ctx)) {
			up = append(up, be)
		}
	}
	slices.SortFunc(up, func(x, y *backend) int { return strings.Compare(x.url, y.url) })
	b.mu.Lock()
	b.ready = up
	b.mu.Unlock()
}

func (b *balancer) readyCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.ready)
}

func (b *balancer) pick() *backend {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ready) == 0 {
		return nil
	}
	b.next++
	return b.ready[b.next%len(b.ready)]
}

func (b *balancer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	be := b.pick()
	if be == nil {
		http.Error(w, "no ready backend", http.StatusBadGateway)
		return
	}
	be.proxy.ServeHTTP(w, r)
}

func rollingDeploy(ctx context.Context, r *report) error {
	bin, err := binaries(ctx, r)
	if err != nil {
		return err
	}
	provider := fmt.Sprintf("name=alpha,latency=150ms,jitter=30ms,seed=%d", r.seed)
	args := []string{"-provider", provider, "-rate=1e6", "-burst=1000000", "-max-per-tenant=0", "-drain-grace=5s"}
	b := &balancer{}
	startOne := func(name string) (*process, error) {
		p, err := startProcess(ctx, filepath.Join(bin, "production_app"), nil, args...)
		if err != nil {
			return nil, err
		}
		r.progress("%s is up at %s", name, p.url)
		if err := b.add(p.url, p.adminURL+"/readyz"); err != nil {
			p.kill()
			return nil, err
		}
		return p, nil
	}
	a, err := startOne("A")
	if err != nil {
		return err
	}
	defer a.kill()
	bb, err := startOne("B")
	if err != nil {
		return err
	}
	defer bb.kill()
	// The load starts once the balancer routes to both; from then on it
	// checks on its own.
	bothReady := func() bool { b.refresh(ctx); return b.readyCount() == 2 }
	if err := poll(ctx, 5*time.Second, 100*time.Millisecond, nil, bothReady); err != nil {
		return fmt.Errorf("the load balancer did not see A and B ready: %w", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go b.check(cctx)
	front := httptest.NewServer(b)
	defer front.Close()

	r.configure("2 × production_app -provider " + provider + " -readiness-delay 1s -drain-grace 5s")
	r.configure("load balancer: round-robin over the backends whose /readyz is 200, checked every 100 ms")
	r.configure("load: 40 requests/s for 25 s (vegeta); SIGTERM to A at 10 s; A′ started at 13 s")
	r.progress("40 requests/s for 25 s; A gets SIGTERM at 10 s, A′ starts at 13 s")
	start := time.Now()
	term := time.AfterFunc(10*time.Second, a.terminate)
	defer term.Stop()
	var replacement *process
	joined := make(chan error, 1)
	newA := time.AfterFunc(13*time.Second, func() {
		p, err := startOne("A′")
		replacement = p
		joined <- err
	})
	defer newA.Stop()
	target := chatTarget(front.URL, "deploy")
	samples := load{name: "deploy", targets: []vegeta.Target{target}, rate: 40, dur: 25 * time.Second}.run(start)
	if err := <-joined; err != nil {
		return err
	}
	defer replacement.kill()
	secs := bySecond(samples)
	fault := []band{{From: 10, To: 13, Label: "A drains; A′ starting"}}
	if err := r.chart(chart{Title: "Answered and failed requests per second through the deploy", YLabel: "requests per second", YMax: 50, Bands: fault, Series: []series{
		{Name: "answered", Color: "#2ca02c", Points: pointsOf(secs, func(s second) float64 { return float64(s.ok) })},
		{Name: "failed (any non-2xx)", Color: "#d62728", Points: pointsOf(secs, func(s second) float64 { return float64(s.failed + s.shed + s.limited) })},
	}}); err != nil {
		return err
	}
	if err := r.chart(chart{Title: "Latency through the deploy", YLabel: "milliseconds", Bands: fault, Series: []series{
		{Name: "p50", Color: "#1f77b4", Points: pointsOf(secs, func(s second) float64 { return s.p50 })},
		{Name: "p99", Color: "#d62728", Points: pointsOf(secs, func(s second) float64 { return s.p99 })},
	}}); err != nil {
		return err
	}
	r.text(phaseTable(secs, []band{{From: 0, To: 10, Label: "before (0–10 s)"}, {From: 10, To: 15, Label: "the deploy (10–15 s)"}, {From: 15, To: 26, Label: "after (15–25 s)"}}))
	return nil
}
