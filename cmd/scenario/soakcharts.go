package main

import (
	"net/http"
)

// soakBands are the faults, shaded on the charts.
func soakBands(plan soakPlan) []band {
	return []band{plan.slow, plan.outage,
		{From: plan.stall, To: plan.stall + soakStall.Seconds(), Label: "stall"},
		{From: plan.restart, To: plan.restart + 1, Label: "restart"},
		{From: plan.term, To: plan.term + 4, Label: "r1 → r1′"},
		plan.burst}
}

// soakCharts are the report's charts: outcomes and latency over time,
// each replica's goroutines, heap and open descriptors, Redis' keys.
func soakCharts(plan soakPlan, run *soakRun) []chart {
	bands := soakBands(plan)
	withSettle := append(bands, band{From: run.stopped, To: run.end, Label: "settle"})
	n := int(run.stopped) + 1
	ans, ref, lst := make([]point, n), make([]point, n), make([]point, n)
	for i := range n {
		ans[i], ref[i], lst[i] = point{float64(i), 0}, point{float64(i), 0}, point{float64(i), 0}
	}
	var asSamples []sample
	for _, s := range run.samples {
		i := min(max(int(s.at), 0), n-1)
		code := http.StatusServiceUnavailable
		switch s.outcome {
		case answered:
			ans[i].Y++
			code = http.StatusOK
		case refused:
			ref[i].Y++
		case lost:
			lst[i].Y++
		}
		asSamples = append(asSamples, sample{at: s.at, lat: s.lat, code: code})
	}
	secs := bySecond(asSamples)
	replica := func(title, ylabel string, f func(replicaSample) float64) chart {
		return chart{Title: title, YLabel: ylabel, Bands: withSettle, Series: replicaSeries(run, f)}
	}
	var keys []point
	for _, k := range run.keys {
		if t := k.at.Sub(run.start).Seconds(); t >= 0 {
			keys = append(keys, point{t, k.v})
		}
	}
	return []chart{
		{Title: "Outcomes per second: answered, refused cleanly, lost", YLabel: "requests per second", Bands: bands, Series: []series{
			{Name: "answered", Color: "#2ca02c", Points: ans}, {Name: "refused", Color: "#ff7f0e", Points: ref}, {Name: "lost", Color: "#d62728", Points: lst}}},
		{Title: "Latency of answered requests (over the 5 s ending at each second)", YLabel: "milliseconds", Bands: bands, Series: []series{
			{Name: "p50", Color: "#1f77b4", Points: pointsOf(secs, func(s second) float64 { return s.p50 })},
			{Name: "p95", Color: "#ff7f0e", Points: pointsOf(secs, func(s second) float64 { return s.p95 })},
			{Name: "p99", Color: "#d62728", Points: pointsOf(secs, func(s second) float64 { return s.p99 })}}},
		replica("Goroutines per replica", "goroutines", func(s replicaSample) float64 { return s.goroutines }),
		replica("Heap in use per replica", "MiB", func(s replicaSample) float64 { return s.heap / (1 << 20) }),
		replica("Open file descriptors per replica (client, upstream and Redis connections)", "descriptors", func(s replicaSample) float64 { return s.fds }),
		{Title: "Redis keys (DBSIZE each second; a stalled or restarting Redis is a gap)", YLabel: "keys", Bands: withSettle, Series: []series{
			{Name: "keys", Color: "#9467bd", Points: keys}}},
	}
}

// replicaColors tell the replicas apart: r1, r2, r3, then r1's replacement.
var replicaColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"}

// replicaSeries is one line a replica instance, on the soak's clock.
func replicaSeries(run *soakRun, f func(replicaSample) float64) []series {
	var out []series
	for i, rp := range run.replicas {
		var pts []point
		for _, s := range rp.samples() {
			if t := s.at.Sub(run.start).Seconds(); t >= 0 && t <= run.end {
				pts = append(pts, point{t, f(s)})
			}
		}
		out = append(out, series{Name: rp.name, Color: replicaColors[i%len(replicaColors)], Points: pts})
	}
	return out
}
