package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// streamBody is a streamed chat request to the "chat" route.
const streamBody = `{"model":"chat","stream":true,"messages":[{"role":"user","content":"how does a circuit breaker work"}]}`

// midstream runs two gateways over a primary that drops one stream in five
// halfway through its answer: A ends such a stream with an error event, as
// it must once the caller has part of an answer; B's route declares its
// fallback continues a prefill, and B finishes the answer there.
func midstream(ctx context.Context, r *report) error {
	alpha := fmt.Sprintf("name=alpha,latency=40ms,jitter=10ms,chunk-delay=15ms,error-rate=0.2,errors=cut,seed=%d", r.seed)
	beta := fmt.Sprintf("name=beta,latency=60ms,jitter=10ms,chunk-delay=15ms,seed=%d", r.seed+1)
	plain, cont, cleanup, err := midstreamRoutes()
	if err != nil {
		return err
	}
	defer cleanup()
	common := []string{"-provider", alpha, "-provider", beta, "-rate=1e6", "-burst=1000000", "-max-concurrent=256", "-max-per-tenant=0",
		"-failure-threshold=1000000"}
	ga, err := startGateway(ctx, append(common, "-routes", plain)...)
	if err != nil {
		return err
	}
	defer ga.stop()
	gb, err := startGateway(ctx, append(common, "-routes", cont)...)
	if err != nil {
		return err
	}
	defer gb.stop()
	a, b := gatewaySide("A: no continuation", ga), gatewaySide("B: beta continues", gb)
	for _, s := range []*side{a, b} {
		s.target = vegeta.Target{Method: http.MethodPost, URL: strings.TrimSuffix(s.metrics, "/metrics") + "/v1/chat/completions",
			Body: []byte(streamBody), Header: http.Header{"Content-Type": {"application/json"}, "X-Tenant-ID": {"load"}}}
	}
	const rate, dur = 20, 30 * time.Second
	r.configure("production_app -provider " + alpha)
	r.configure("               -provider " + beta)
	r.configure("               -failure-threshold 1000000 (the breaker out of reach: every stream starts on alpha)")
	r.configure(`  A: -routes {"model":"chat","targets":[{"provider":"alpha"},{"provider":"beta"}]}`)
	r.configure(`  B: -routes {"model":"chat","targets":[{"provider":"alpha"},{"provider":"beta","continue":true}]}`)
	r.configure(fmt.Sprintf("load: %d streamed requests/s for %s to each, side by side (vegeta)", rate, dur))
	r.progress("%d streamed requests/s for %s to A and to B at once; alpha drops one stream in five halfway", rate, dur)
	start := time.Now()
	stop := watch(start, time.Second, a, b)
	sideBySide(start, rate, dur, a, b)
	stop()
	ends := func(samples []sample, end string) []point {
		per := map[int]float64{}
		last := 0
		for _, s := range samples {
			if s.end == end {
				per[int(s.at)]++
			}
			last = max(last, int(s.at))
		}
		out := make([]point, 0, last+1)
		for i := 0; i <= last; i++ {
			out = append(out, point{float64(i), per[i]})
		}
		return out
	}
	if err := r.chart(chart{Title: "Complete answers per second ([DONE] after the last chunk)", YLabel: "answers per second", Series: []series{
		{Name: "A: no continuation", Color: "#d62728", Points: ends(a.samples, "done")},
		{Name: "B: beta continues", Color: "#2ca02c", Points: ends(b.samples, "done")},
	}}); err != nil {
		return err
	}
	if err := r.chart(chart{Title: "Streams cut after their first byte, ended with an error event", YLabel: "streams per second", Series: []series{
		{Name: "A: no continuation", Color: "#d62728", Points: ends(a.samples, "error")},
		{Name: "B: beta continues", Color: "#2ca02c", Points: ends(b.samples, "error")},
	}}); err != nil {
		return err
	}
	r.text(midstreamTable(a, b))
	return nil
}

// midstreamRoutes writes the two route files: the same route, with and
// without "continue" on the fallback.
func midstreamRoutes() (plain, cont string, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "midstream")
	if err != nil {
		return "", "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(dir) }
	plain, cont = filepath.Join(dir, "plain.json"), filepath.Join(dir, "continue.json")
	const route = `{"routes":[{"model":"chat","targets":[{"provider":"alpha"},{"provider":"beta"%s}]}]}`
	if err := os.WriteFile(plain, fmt.Appendf(nil, route, ""), 0o644); err != nil {
		cleanup()
		return "", "", nil, err
	}
	if err := os.WriteFile(cont, fmt.Appendf(nil, route, `,"continue":true`), 0o644); err != nil {
		cleanup()
		return "", "", nil, err
	}
	return plain, cont, cleanup, nil
}

// midstreamTable is how each side's streams ended.
func midstreamTable(sides ...*side) string {
	var t lines
	t.line("| gateway | streams | complete | cut, with an error event | lost (neither) | refused before the first byte | continued on beta | p50 | p99 |")
	t.line("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, g := range sides {
		n := map[string]int{}
		for _, s := range g.samples {
			if s.code != http.StatusOK {
				n["refused"]++
				continue
			}
			n[s.end]++
		}
		s := summarise(g.samples)
		t.line(fmt.Sprintf("| %s | %d | %d | %d | %d | %d | %.0f | %.0f ms | %.0f ms |", g.name, len(g.samples), n["done"], n["error"],
			n["lost"]+n[""], n["refused"], g.scraper.last().continued, s.p50, s.p99))
	}
	t.line("")
	t.line("(Latency is to the end of each stream. \"Lost\" would be a stream that stopped with neither [DONE] nor an error " +
		"event — a truncated answer a client could take for a whole one; the gateway must never produce one.)")
	return strings.Join(t, "\n")
}
