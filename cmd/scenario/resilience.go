package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// lines is a Markdown table, a row at a time.
type lines []string

func (l *lines) line(s string) { *l = append(*l, s) }

// startPair starts gateway A with args and gateway B with args and extra.
func startPair(ctx context.Context, args []string, extra ...string) (a, b *gateway, err error) {
	if a, err = startGateway(ctx, args...); err != nil {
		return nil, nil, err
	}
	if b, err = startGateway(ctx, append(slices.Clip(args), extra...)...); err != nil {
		a.stop()
		return nil, nil, err
	}
	return a, b, nil
}

// side is one gateway of a side-by-side comparison and what was measured
// at it. Each result is kept on the side it came from, so a table row
// reads its gateway's numbers by the side it describes, never by a
// position that has to match another list's.
type side struct {
	name    string        // as the report's tables name it
	metrics string        // its /metrics URL, if watch scrapes it
	target  vegeta.Target // the request the load sends it
	samples []sample      // every outcome, once sideBySide returns
	scraper scraper       // its /metrics through the run, once watch's stop returns
}

// gatewaySide is a side for an in-process gateway, loaded by one tenant.
func gatewaySide(name string, g *gateway) *side {
	return &side{name: name, metrics: g.url + "/metrics", target: chatTarget(g.url, "load")}
}

// sideBySide sends the same load to each side at once, so both share the
// machine's noise, and keeps each one's outcomes on it.
func sideBySide(start time.Time, rate int, dur time.Duration, sides ...*side) {
	var wg sync.WaitGroup
	for _, s := range sides {
		wg.Go(func() {
			s.samples = load{name: s.name, targets: []vegeta.Target{s.target}, rate: rate, dur: dur}.run(start)
		})
	}
	wg.Wait()
}

// summary is a whole run's latency quantiles over the answered requests,
// in milliseconds, and its counts.
type summary struct {
	p50, p95, p99, max float64
	ok, failed         int
}

func summarise(samples []sample) summary {
	var lats []float64
	var s summary
	for _, x := range samples {
		if x.code >= 200 && x.code < 300 {
			s.ok++
			lats = append(lats, float64(x.lat.Microseconds())/1000)
		} else {
			s.failed++
		}
	}
	s.p50, s.p95, s.p99, s.max = quantile(lats, 0.50), quantile(lats, 0.95), quantile(lats, 0.99), quantile(lats, 1)
	return s
}

// watch scrapes each side's /metrics every interval until stop is called,
// and once more then.
func watch(start time.Time, every time.Duration, sides ...*side) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range sides {
		wg.Go(func() { s.scraper.run(ctx, s.metrics, start, every) })
	}
	return func() {
		cancel()
		wg.Wait()
		for _, s := range sides { // and once more, now that every answer is in
			if sc, err := scrapeOnce(context.Background(), s.metrics); err == nil {
				sc.t = time.Since(start).Seconds()
				s.scraper.record(sc)
			}
		}
	}
}

// perSecond turns a cumulative counter into its rate between scrapes.
func perSecond(scs []scrape, f func(scrape) float64) []point {
	var out []point
	for i := 1; i < len(scs); i++ {
		if dt := scs[i].t - scs[i-1].t; dt > 0 {
			out = append(out, point{scs[i].t, (f(scs[i]) - f(scs[i-1])) / dt})
		}
	}
	return out
}

// between is how much a cumulative counter grew over a span: from the last
// scrape at or before its start to the last at or before its end.
func between(scs []scrape, span band, f func(scrape) float64) float64 {
	var a, b float64
	for _, s := range scs {
		if s.t <= span.From {
			a = f(s)
		}
		if s.t <= span.To {
			b = f(s)
		}
	}
	return b - a
}

func hedgingScenario(ctx context.Context, r *report) error {
	provider := fmt.Sprintf("name=alpha,latency=40ms,jitter=10ms,slow=0s-1h:800ms@0.04,seed=%d", r.seed)
	common := []string{"-provider", provider, "-rate=1e6", "-burst=1000000", "-max-concurrent=256", "-max-per-tenant=0"}
	ga, gb, err := startPair(ctx, common, "-hedge-delay=100ms", "-retry-budget=0.1")
	if err != nil {
		return err
	}
	defer ga.stop()
	defer gb.stop()
	a, b := gatewaySide("A: no hedging", ga), gatewaySide("B: hedge at 100 ms", gb)
	const rate, dur = 25, 30 * time.Second
	r.configure("production_app -provider " + provider + " -rate 1e6 -max-concurrent 256")
	r.configure("  A: no hedging")
	r.configure("  B: -hedge-delay 100ms -retry-budget 0.1")
	r.configure(fmt.Sprintf("load: %d requests/s for %s to each, side by side (vegeta)", rate, dur))
	r.progress("%d requests/s for %s to A and to B at once", rate, dur)
	start := time.Now()
	stop := watch(start, time.Second, a, b)
	sideBySide(start, rate, dur, a, b)
	stop()
	sa, sb := bySecond(a.samples), bySecond(b.samples)
	if err := r.chart(chart{Title: "p99 over the last 5 s: every slow call vs the first of two", YLabel: "milliseconds", Series: []series{
		{Name: "A: no hedging", Color: "#d62728", Points: pointsOf(sa, func(s second) float64 { return s.p99 })},
		{Name: "B: hedge at 100 ms", Color: "#2ca02c", Points: pointsOf(sb, func(s second) float64 { return s.p99 })},
		{Name: "A p50", Color: "#d62728", Dashed: true, Points: pointsOf(sa, func(s second) float64 { return s.p50 })},
		{Name: "B p50", Color: "#2ca02c", Dashed: true, Points: pointsOf(sb, func(s second) float64 { return s.p50 })},
	}}); err != nil {
		return err
	}
	var t lines
	t.line("| gateway | p50 | p95 | p99 | slowest | answered | failed | upstream calls per request | hedges started | hedges won |")
	t.line("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, g := range []*side{a, b} {
		s, m := summarise(g.samples), g.scraper.last()
		calls := (m.attempts + m.hedgesStarted) / float64(max(1, s.ok+s.failed))
		t.line(fmt.Sprintf("| %s | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %d | %d | %.3f | %.0f | %.0f |", g.name,
			s.p50, s.p95, s.p99, s.max, s.ok, s.failed, calls, m.hedgesStarted, m.hedgesWon))
	}
	t.line("")
	t.line("(Quantiles over every answered request of the run. Upstream calls: the retry loop's attempts plus the hedges, per request sent.)")
	r.text(strings.Join(t, "\n"))
	return nil
}

func retryBudgetScenario(ctx context.Context, r *report) error {
	provider := fmt.Sprintf("name=alpha,latency=20ms,jitter=5ms,outage=10s-25s,seed=%d", r.seed)
	common := []string{"-provider", provider, "-rate=1e6", "-burst=1000000", "-max-concurrent=256", "-max-per-tenant=0",
		"-max-attempts=3", "-base-backoff=10ms", "-max-backoff=50ms", "-failure-threshold=1000000"}
	ga, gb, err := startPair(ctx, common, "-retry-budget=0.1", "-retry-budget-min=1")
	if err != nil {
		return err
	}
	defer ga.stop()
	defer gb.stop()
	a, b := gatewaySide("A: no budget", ga), gatewaySide("B: retry budget", gb)
	const rate, dur = 40, 35 * time.Second
	r.configure("production_app -provider " + provider)
	r.configure("               -max-attempts 3 -base-backoff 10ms -max-backoff 50ms -failure-threshold 1000000")
	r.configure("  A: no retry budget")
	r.configure("  B: -retry-budget 0.1 -retry-budget-min 1 (window 10 s)")
	r.configure(fmt.Sprintf("load: %d requests/s for %s to each, side by side (vegeta)", rate, dur))
	r.progress("%d requests/s for %s to A and to B at once; alpha answers 503 from 10 s to 25 s", rate, dur)
	start := time.Now()
	stop := watch(start, time.Second, a, b)
	sideBySide(start, rate, dur, a, b)
	stop()
	fault := []band{{From: 10, To: 25, Label: "alpha answers 503"}}
	attempts := func(s scrape) float64 { return s.attempts }
	if err := r.chart(chart{Title: "Calls reaching the provider per second: the outage triples them, unless a budget says no", YLabel: "calls per second", Bands: fault, Series: []series{
		{Name: "A: no budget", Color: "#d62728", Points: perSecond(a.scraper.scrapes(), attempts)},
		{Name: "B: retry budget 10 % + 1/s", Color: "#2ca02c", Points: perSecond(b.scraper.scrapes(), attempts)},
		{Name: "requests sent (each)", Color: "#7f7f7f", Dashed: true, Points: []point{{0, rate}, {dur.Seconds(), rate}}},
	}}); err != nil {
		return err
	}
	var t lines
	t.line("| gateway | phase | requests | calls to the provider | calls per request | retries refused | p50 of the failures |")
	t.line("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
	for _, g := range []*side{a, b} {
		sc := g.scraper.scrapes()
		for _, ph := range []band{{From: 0, To: 10, Label: "before (0–10 s)"}, {From: 10, To: 25, Label: "outage (10–25 s)"}, {From: 25, To: 36, Label: "after (25–35 s)"}} {
			n := 0
			var failLats []float64
			for _, s := range g.samples {
				if ph.contains(s.at) {
					n++
					if s.code >= 300 {
						failLats = append(failLats, float64(s.lat.Microseconds())/1000)
					}
				}
			}
			calls := between(sc, ph, attempts)
			refused := between(sc, ph, func(s scrape) float64 { return s.refused })
			failP50 := "—"
			if len(failLats) > 0 {
				failP50 = fmt.Sprintf("%.0f ms", quantile(failLats, 0.5))
			}
			t.line(fmt.Sprintf("| %s | %s | %d | %.0f | %.2f | %.0f | %s |", g.name, ph.Label, n, calls, calls/float64(max(1, n)), refused, failP50))
		}
	}
	t.line("")
	t.line("(Calls and refusals from each gateway's /metrics, scraped every second, so a phase's edges are ±1 s: \"before\" misses the calls of the requests still in flight at its last scrape, and \"after\" counts the refusals of the requests sent in the outage's last second.)")
	r.text(strings.Join(t, "\n"))
	return nil
}

func adaptiveScenario(ctx context.Context, r *report) error {
	provider := fmt.Sprintf("name=alpha,latency=50ms,jitter=10ms,capacity=8,slow=15s-35s:150ms@1,seed=%d", r.seed)
	common := []string{"-provider", provider, "-rate=1e6", "-burst=1000000", "-max-concurrent=64", "-max-per-tenant=0",
		"-attempt-timeout=2s", "-total-timeout=5s"}
	ga, gb, err := startPair(ctx, common, "-adaptive-limit=gradient")
	if err != nil {
		return err
	}
	defer ga.stop()
	defer gb.stop()
	a, b := gatewaySide("A: fixed limit", ga), gatewaySide("B: adaptive limit", gb)
	const rate, dur = 60, 50 * time.Second
	r.configure("production_app -provider " + provider)
	r.configure("               -max-concurrent 64 -attempt-timeout 2s -total-timeout 5s")
	r.configure("  A: -max-concurrent is the only limit")
	r.configure("  B: -adaptive-limit gradient (from 32, between 1 and 64)")
	r.configure(fmt.Sprintf("load: %d requests/s for %s to each, side by side (vegeta)", rate, dur))
	r.progress("%d requests/s for %s to A and to B at once; every call is 150 ms slower from 15 s to 35 s", rate, dur)
	start := time.Now()
	stop := watch(start, 250*time.Millisecond, a, b)
	sideBySide(start, rate, dur, a, b)
	stop()
	sa, sb := bySecond(a.samples), bySecond(b.samples)
	fault := []band{{From: 15, To: 35, Label: "every call +150 ms"}}
	var limit, inFlight []point
	for _, s := range b.scraper.scrapes() {
		limit, inFlight = append(limit, point{s.t, s.limit}), append(inFlight, point{s.t, s.inFlight})
	}
	if err := r.chart(chart{Title: "B: the limit falls to the provider's capacity, and the excess waits at the gateway", YLabel: "calls at once", Bands: fault, Series: []series{
		{Name: "adaptive limit (calls to the provider)", Color: "#1f77b4", Points: limit},
		{Name: "requests in the gateway", Color: "#ff7f0e", Points: inFlight},
	}}); err != nil {
		return err
	}
	if err := r.chart(chart{Title: "p50 the callers saw", YLabel: "milliseconds", Bands: fault, Series: []series{
		{Name: "A: fixed limit", Color: "#d62728", Points: pointsOf(sa, func(s second) float64 { return s.p50 })},
		{Name: "B: adaptive limit", Color: "#2ca02c", Points: pointsOf(sb, func(s second) float64 { return s.p50 })},
	}}); err != nil {
		return err
	}
	phases := []band{{From: 0, To: 15, Label: "before (0–15 s)"}, {From: 15, To: 35, Label: "brown-out (15–35 s)"}, {From: 35, To: 51, Label: "after (35–50 s)"}}
	r.text("A, fixed limit:\n\n" + phaseTable(sa, phases))
	r.text("B, adaptive limit:\n\n" + phaseTable(sb, phases))
	t := lines{"| phase | B's limit (B's calls at the provider, at most): min / median / max | B's requests in flight: median / max | A's requests in flight (every one of them a call at the provider): median / max |", "| --- | ---: | ---: | ---: |"}
	for _, ph := range phases {
		var lim, in, inA []float64
		for _, s := range b.scraper.scrapes() {
			if ph.contains(s.t) {
				lim, in = append(lim, s.limit), append(in, s.inFlight)
			}
		}
		for _, s := range a.scraper.scrapes() {
			if ph.contains(s.t) {
				inA = append(inA, s.inFlight)
			}
		}
		t.line(fmt.Sprintf("| %s | %.0f / %.0f / %.0f | %.0f / %.0f | %.0f / %.0f |", ph.Label, quantile(lim, 0), quantile(lim, 0.5), quantile(lim, 1),
			quantile(in, 0.5), quantile(in, 1), quantile(inA, 0.5), quantile(inA, 1)))
	}
	t.line("")
	t.line("(From /metrics every 250 ms: gateway_provider_concurrency_limit and gateway_requests_in_flight.)")
	r.text(strings.Join(t, "\n"))
	return nil
}
