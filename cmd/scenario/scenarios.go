package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

const chatBody = `{"model":"auto","messages":[{"role":"user","content":"how does a circuit breaker work"}]}`

// chatTarget is a chat completion for tenant at a gateway.
func chatTarget(url, tenant string) vegeta.Target {
	return vegeta.Target{Method: http.MethodPost, URL: url + "/v1/chat/completions", Body: []byte(chatBody),
		Header: http.Header{"Content-Type": {"application/json"}, "X-Tenant-ID": {tenant}}}
}

func init() {
	register(scenario{name: "brownout", title: "a brown-out: one provider slows for some calls",
		lesson: "Between 15 s and 35 s, 2% of the provider's calls take 700 ms more. The median does not " +
			"move, nor does p95; p99 jumps. A dashboard of averages or p50 shows a healthy service while one " +
			"request in twelve is slow — which is why the gateway exports histograms, and why alerts watch p99.",
		run: brownout})
	register(scenario{name: "outage", title: "an outage and its recovery",
		lesson: "The primary provider answers 503 from 15 s to 30 s. Its breaker opens after three failures " +
			"and the fallback carries the traffic (the requests that found the primary failing still succeed, " +
			"one attempt later); every 5 s one probe tests the primary, and once it answers the breaker closes " +
			"and traffic returns.",
		run: outage})
	register(scenario{name: "burst", title: "a burst against the rate limiter vs the semaphore alone",
		lesson: "One tenant sends 120 requests a second at a provider that takes 200 ms, to two gateways " +
			"with 16 slots each. With a per-tenant rate limit (20/s) the excess is refused at once (429, in " +
			"microseconds) and what is admitted is fast. With only the semaphore, everything queues: the " +
			"queue fills, waits reach the 1 s limit, and requests are shed with 503 after waiting — slow " +
			"failures instead of fast ones, and every answer a second late. A's 20/s is this tenant's quota, " +
			"not the gateway's capacity (80/s here): the slots it leaves free are other tenants' to use.",
		run: burst})
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
	r.text(phaseTable(secs, [][3]any{{"before (0–15 s)", 0.0, 15.0}, {"brown-out (15–35 s)", 15.0, 35.0}, {"after (35–50 s)", 35.0, 51.0}}))
	return nil
}

func outage(ctx context.Context, r *report) error {
	alpha := fmt.Sprintf("name=alpha,latency=40ms,jitter=10ms,outage=15s-30s,seed=%d", r.seed)
	beta := fmt.Sprintf("name=beta,latency=90ms,jitter=20ms,seed=%d", r.seed+1)
	g, err := startGateway(ctx, "-provider", alpha, "-provider", beta, "-rate=1e6", "-burst=1000000", "-max-concurrent=256",
		"-max-per-tenant=0", "-failure-threshold=3", "-recovery-timeout=5s", "-base-backoff=10ms")
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
	r.configure("                -failure-threshold 3 -recovery-timeout 5s -base-backoff 10ms")
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
		state = append(state, point{s.t, s.breakers["alpha/alpha-1"]})
	}
	if err := r.chart(chart{Title: "alpha's breaker: 0 closed, 1 open, 2 half-open", YLabel: "state", YMax: 2, Bands: fault,
		Series: []series{{Name: "alpha/alpha-1", Color: "#9467bd", Points: state}}}); err != nil {
		return err
	}
	if err := r.chart(chart{Title: "Latency: one attempt more while the breaker learns, then the fallback's own", YLabel: "milliseconds", Bands: fault, Series: []series{
		{Name: "p50", Color: "#1f77b4", Points: pointsOf(secs, func(s second) float64 { return s.p50 })},
		{Name: "p99", Color: "#d62728", Points: pointsOf(secs, func(s second) float64 { return s.p99 })},
	}}); err != nil {
		return err
	}
	r.text(phaseTable(secs, [][3]any{{"before (0–15 s)", 0.0, 15.0}, {"outage (15–30 s)", 15.0, 30.0}, {"after (30–45 s)", 30.0, 46.0}}))
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
	r.text("A, rate limit + semaphore:\n\n" + phaseTable(a, [][3]any{{"the burst", 0.0, 16.0}}))
	r.text("B, semaphore alone:\n\n" + phaseTable(b, [][3]any{{"the burst", 0.0, 16.0}}))
	return nil
}
