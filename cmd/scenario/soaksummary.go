package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// soakSummary is summary.json: what the soak counted, and its verdict.
type soakSummary struct {
	Seed     uint64   `json:"seed"`
	Duration string   `json:"duration"`
	Passed   bool     `json:"passed"`
	Failures []string `json:"failures"`

	Sent     int                `json:"sent"`
	Accepted int                `json:"accepted"`
	Answered int                `json:"answered"`
	Refused  int                `json:"refused"`
	Lost     int                `json:"lost"`
	P99ms    map[string]float64 `json:"p99_ms"` // by phase
	Phases   []soakPhase        `json:"phases"`

	// Summed over the replicas that lived through the whole run; each
	// one's own numbers, which the verdict compares, are in Replicas.
	GoroutinesBefore float64      `json:"goroutines_before"`
	GoroutinesAfter  float64      `json:"goroutines_after"`
	HeapBefore       float64      `json:"heap_before"`
	HeapAfter        float64      `json:"heap_after"`
	Replicas         []soakLevels `json:"replicas"`

	TokensCharged  int64 `json:"tokens_charged"`         // gateway_tokens_total, every replica instance, during the soak
	TokensReported int64 `json:"tokens_reported"`        // usage in the answers the upstreams sent whole
	TokensSeen     int64 `json:"tokens_seen_by_clients"` // usage in the answers the clients got complete
	TokensBound    int64 `json:"tokens_bound"`           // the most charged and reported may differ by
	UpstreamProbes int64 `json:"upstream_probes"`        // the gateways' health probes, not tenants' calls: in neither count

	RedisKeysAfterLoad float64 `json:"redis_keys_after_load"` // a few seconds after the load stopped
	RedisKeysAtEnd     float64 `json:"redis_keys_at_end"`     // at the end of the settle
}

// soakPhase is one phase's counts and latency (answered requests).
type soakPhase struct {
	Name      string         `json:"name"`
	FromS     float64        `json:"from_s"`
	ToS       float64        `json:"to_s"`
	Sent      int            `json:"sent"`
	Accepted  int            `json:"accepted"`
	Answered  int            `json:"answered"`
	Refused   int            `json:"refused"`
	Lost      int            `json:"lost"`
	RefusedBy map[string]int `json:"refused_by,omitempty"`
	LostBy    map[string]int `json:"lost_by,omitempty"`
	P50ms     float64        `json:"p50_ms"`
	P95ms     float64        `json:"p95_ms"`
	P99ms     float64        `json:"p99_ms"`
}

// soakLevels is one replica's idle goroutines and heap, after the warm-up
// and after the settle. Heap is the live heap, in bytes, right after a
// forced GC (go_memstats_heap_alloc_bytes then): what the run left
// behind, less the buffers of its Redis connections (redisConnBuffers
// each), whose number the Redis client's pool sets — up to its size, for
// as long as its idle timeout — and a Redis stall or restart moves. Heap
// in use (its spans, fragmentation included) is shown, not judged.
type soakLevels struct {
	Replica          string  `json:"replica"`
	RedisConnsBefore int     `json:"redis_conns_before"`
	RedisConnsAfter  int     `json:"redis_conns_after"`
	GoroutinesBefore float64 `json:"goroutines_before"`
	GoroutinesAfter  float64 `json:"goroutines_after"`
	HeapBefore       float64 `json:"heap_before"`
	HeapAfter        float64 `json:"heap_after"`
	InUseBefore      float64 `json:"heap_inuse_before"`
	InUseAfter       float64 `json:"heap_inuse_after"`
}

// redisConnBuffers is what one go-redis connection holds: a 32 KiB
// reader and a 32 KiB writer (its defaults, which secure_app keeps).
const redisConnBuffers = 64 << 10

// levelsTolerance is how far above its level before the run a replica's
// goroutines or heap may be after it.
const levelsTolerance = 0.10

// heapFloor is the least the live heap may grow by before the run fails:
// a replica's live heap is about 2 MiB at rest, so 10 % of it is less
// than what grows once and then keeps its size — a metric series for
// each new refusal reason and upstream error, the HTTP and Redis clients'
// pools after a burst or a stall, encoding/json's type cache. Measured:
// +0.1 MiB after 2 minutes (exact heap profiles, diffed), −1.3 to +0.6 MiB
// after 10. A leak of a few hundred bytes a request is past it within
// minutes at this load.
const heapFloor = 1 << 20

// keysSettleDelay is how long after the load stops the first Redis key
// count the verdict compares is taken: the requests still running by
// then have ended.
const keysSettleDelay = 3 * time.Second

// phaseStats counts each phase's requests, by the phase they were sent in.
func phaseStats(plan soakPlan, samples []soakSample) []soakPhase {
	out := make([]soakPhase, len(plan.phases))
	lats := make([][]float64, len(plan.phases))
	for i, ph := range plan.phases {
		out[i] = soakPhase{Name: ph.Label, FromS: ph.From, ToS: ph.To, RefusedBy: map[string]int{}, LostBy: map[string]int{}}
	}
	for _, s := range samples {
		i := plan.phaseOf(s.at)
		p := &out[i]
		p.Sent++
		if s.accepted() {
			p.Accepted++
		}
		switch s.outcome {
		case answered:
			p.Answered++
			lats[i] = append(lats[i], float64(s.lat.Microseconds())/1000)
		case refused:
			p.Refused++
			p.RefusedBy[s.reason]++
		case lost:
			p.Lost++
			p.LostBy[s.reason]++
		}
	}
	for i := range out {
		out[i].P50ms, out[i].P95ms, out[i].P99ms = quantile(lats[i], 0.50), quantile(lats[i], 0.95), quantile(lats[i], 0.99)
	}
	return out
}

// levelsOf pairs the levels of each replica measured both before and
// after: those that lived through the whole run.
func levelsOf(before, after map[string]replicaSample) []soakLevels {
	var out []soakLevels
	for _, name := range slices.Sorted(maps.Keys(before)) {
		a, ok := after[name]
		if !ok {
			continue
		}
		b := before[name]
		out = append(out, soakLevels{Replica: name, GoroutinesBefore: b.goroutines, GoroutinesAfter: a.goroutines,
			HeapBefore: b.live - redisConnBuffers*float64(b.redisConns), HeapAfter: a.live - redisConnBuffers*float64(a.redisConns),
			InUseBefore: b.heap, InUseAfter: a.heap, RedisConnsBefore: b.redisConns, RedisConnsAfter: a.redisConns})
	}
	return out
}

// keysAround is Redis' key count keysSettleDelay after the load stopped,
// and the last count by the end (-1 when there is none).
func keysAround(keys []timed, start time.Time, stopped, end float64) (afterLoad, atEnd float64) {
	afterLoad, atEnd = -1, -1
	for _, k := range keys {
		t := k.at.Sub(start).Seconds()
		if afterLoad < 0 && t >= stopped+keysSettleDelay.Seconds() {
			afterLoad = k.v
		}
		if t <= end {
			atEnd = k.v
		}
	}
	return afterLoad, atEnd
}

// tokensCharged is gateway_tokens_total over every replica instance
// during the soak: each one's last scrape (for one that exited, its last
// before it did) less its count before the soak.
func tokensCharged(replicas []replicaTokens) int64 {
	var n float64
	for _, r := range replicas {
		n += r.last - r.before
	}
	return int64(n)
}

// replicaTokens is one replica instance's token counter.
type replicaTokens struct{ before, last float64 }

// tokenBound is how far the tokens charged may be from those reported:
// by one answer's usage (the largest seen) for each request that may have
// reached an upstream and not ended answered — a lost request, or one
// refused after admission. With neither, charged must equal reported.
func tokenBound(samples []soakSample) int64 {
	var most, n int64
	for _, s := range samples {
		most = max(most, int64(s.tokens))
		if s.outcome == lost || (s.outcome == refused && s.accepted()) {
			n++
		}
	}
	return most * n
}

// verdict is every criterion the run failed, in words; none is a pass.
func verdict(s soakSummary) []string {
	var out []string
	if s.Lost > 0 {
		out = append(out, fmt.Sprintf("%d request(s) lost (%s)", s.Lost, lostReasons(s.Phases)))
	}
	if len(s.Replicas) == 0 {
		out = append(out, "no replica's levels were read both before and after the run")
	}
	for _, r := range s.Replicas {
		if r.GoroutinesAfter > r.GoroutinesBefore*(1+levelsTolerance) {
			out = append(out, fmt.Sprintf("replica %s: %.0f goroutines after the run, %.0f before (more than 10 %% above)", r.Replica, r.GoroutinesAfter, r.GoroutinesBefore))
		}
		if r.HeapAfter > r.HeapBefore+max(r.HeapBefore*levelsTolerance, heapFloor) {
			out = append(out, fmt.Sprintf("replica %s: live heap %.0f bytes after the run, %.0f before (more than 10 %% and 1 MiB above)", r.Replica, r.HeapAfter, r.HeapBefore))
		}
	}
	switch {
	case s.RedisKeysAfterLoad < 0 || s.RedisKeysAtEnd < 0:
		out = append(out, "Redis' keys were not counted after the load")
	case s.RedisKeysAtEnd > s.RedisKeysAfterLoad:
		out = append(out, fmt.Sprintf("Redis keys kept growing after the load stopped (%.0f, then %.0f at the end of the settle)", s.RedisKeysAfterLoad, s.RedisKeysAtEnd))
	}
	if d := s.TokensCharged - s.TokensReported; d > s.TokensBound || -d > s.TokensBound {
		out = append(out, fmt.Sprintf("tokens charged %d differ from tokens the upstreams reported %d by %d, more than the bound %d", s.TokensCharged, s.TokensReported, d, s.TokensBound))
	}
	return out
}

// lostReasons is "reason: n, …" over the phases.
func lostReasons(phases []soakPhase) string {
	n := map[string]int{}
	for _, p := range phases {
		for r, c := range p.LostBy {
			n[r] += c
		}
	}
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s: %d", r, n[r]))
	}
	return strings.Join(parts, ", ")
}

// summariseSoak counts a run and judges it.
func summariseSoak(plan soakPlan, run *soakRun) soakSummary {
	s := soakSummary{Phases: phaseStats(plan, run.samples), P99ms: map[string]float64{}}
	for _, p := range s.Phases {
		s.Sent, s.Accepted, s.Answered, s.Refused, s.Lost = s.Sent+p.Sent, s.Accepted+p.Accepted, s.Answered+p.Answered, s.Refused+p.Refused, s.Lost+p.Lost
		s.P99ms[p.Name] = p.P99ms
	}
	s.Replicas = levelsOf(run.before, run.after)
	for _, r := range s.Replicas {
		s.GoroutinesBefore, s.GoroutinesAfter = s.GoroutinesBefore+r.GoroutinesBefore, s.GoroutinesAfter+r.GoroutinesAfter
		s.HeapBefore, s.HeapAfter = s.HeapBefore+r.HeapBefore, s.HeapAfter+r.HeapAfter
	}
	var counts []replicaTokens
	for _, rp := range run.replicas {
		if last, ok := rp.last(); ok {
			counts = append(counts, replicaTokens{before: run.before[rp.name].tokens, last: last.tokens})
		}
	}
	s.TokensCharged, s.TokensReported, s.UpstreamProbes = tokensCharged(counts), run.reported, run.probes
	for _, x := range run.samples {
		s.TokensSeen += int64(x.tokens)
	}
	s.TokensBound = tokenBound(run.samples)
	s.RedisKeysAfterLoad, s.RedisKeysAtEnd = keysAround(run.keys, run.start, run.stopped, run.end)
	s.Failures = verdict(s)
	s.Passed = len(s.Failures) == 0
	return s
}
