package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// writeSoak adds the soak's tables and charts to the report and writes
// summary.json next to it.
func writeSoak(r *report, plan soakPlan, run *soakRun, sum soakSummary) error {
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.dir, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	soakConfig(r, plan)
	r.text(soakVerdictText(sum))
	r.text(soakDefinitions)
	r.text(soakScheduleText(plan, run))
	r.text(soakPhaseTable(sum.Phases))
	for _, c := range soakCharts(plan, run) {
		if err := r.chart(c); err != nil {
			return err
		}
	}
	r.text(soakLevelsText(sum))
	r.text(soakTokensText(sum, run))
	return nil
}

func soakConfig(r *report, plan soakPlan) {
	r.configure(fmt.Sprintf("this run: DURATION=%s make scenario NAME=soak SEED=%d", plan.dur, r.seed))
	r.configure("3 × secure_app -redis-url <its own redis-server> -tiers <gold, silver, bronze> (built from ./solutions/secure_app)")
	r.configure("              -upstream name=alpha,… -upstream name=beta,… (alpha first; beta the fail-over), other flags at their defaults")
	r.configure("balancer: round-robin over the replicas whose /readyz is 200, checked every 100 ms (in-process)")
	r.configure("upstreams (in-process, on loopback, their clock the soak's): " + plan.alphaSpec(r.seed, true))
	r.configure("                                                             " + betaSpec(r.seed))
	var ts []string
	for _, t := range soakTenants() {
		ts = append(ts, fmt.Sprintf("%s (%s) %d/s", t.name, t.tier, t.rate))
	}
	r.configure(fmt.Sprintf("load: %s for %s, open loop (vegeta), each a third streamed; %s +%d/s in the burst", strings.Join(ts, ", "), plan.dur, soakBurstTenant, soakBurstRate))
	r.configure(strings.TrimSpace(soakTiers))
}

func soakVerdictText(s soakSummary) string {
	if s.Passed {
		return fmt.Sprintf("**Verdict: PASSED.** %d requests sent, %d accepted, %d answered completely, %d refused cleanly, **0 lost**; "+
			"the replicas' goroutines and heap came back; Redis' keys stopped growing when the load did; tokens charged %d, reported %d. "+
			"The numbers are in [summary.json](summary.json).", s.Sent, s.Accepted, s.Answered, s.Refused, s.TokensCharged, s.TokensReported)
	}
	return "**Verdict: FAILED.**\n\n- " + strings.Join(s.Failures, "\n- ") + "\n\nThe numbers are in [summary.json](summary.json)."
}

const soakDefinitions = `How each request is counted (by the client, on what it received):

- **answered**: a 200 with a complete body — a JSON answer with choices, or a stream whose events
  are all JSON, one of them with a finish_reason, ending with ` + "`data: [DONE]`" + `;
- **refused** (cleanly): a non-2xx carrying the gateway's JSON error (the reason is its code), or a
  stream ended by an error event;
- **lost**: anything else — no status (a transport error, a connection reset, no answer within the
  client's 35 s deadline), a stream cut without [DONE] or an error event, a 200 whose body is not a
  complete answer;
- **accepted**: admitted by the gateway — answered, lost, or refused after admission (an upstream's
  error, a deadline, a stream's error event). Refusals at admission (rate limits, in-flight caps, token
  quotas, limits unavailable while Redis is, overload, a draining replica) are not accepted.

A request belongs to the phase it was sent in. Latency quantiles are over its answered requests.`

// soakScheduleText is the plan and what happened, on the soak's clock.
func soakScheduleText(plan soakPlan, run *soakRun) string {
	var t lines
	t.line("| at | fault |")
	t.line("| ---: | --- |")
	t.line(fmt.Sprintf("| %.0f–%.0f s | alpha's brown-out: 30 %% of its calls take 600 ms more |", plan.slow.From, plan.slow.To))
	t.line(fmt.Sprintf("| %.0f–%.0f s | alpha's outage: every call answers 503; beta carries |", plan.outage.From, plan.outage.To))
	t.line(fmt.Sprintf("| %.0f–%.0f s | %s bursts: +%d requests/s |", plan.burst.From, plan.burst.To, soakBurstTenant, soakBurstRate))
	for _, e := range run.events {
		t.line(fmt.Sprintf("| %.1f s | %s |", e.at, e.what))
	}
	t.line(fmt.Sprintf("| %.1f s | the load's last answer; then %s of settle |", run.stopped, plan.settle))
	return "The schedule, and the process faults as they happened:\n\n" + strings.Join(t, "\n")
}

// soakPhaseTable is a row a phase: counts, refusal reasons, latency.
func soakPhaseTable(phases []soakPhase) string {
	var t lines
	t.line("| phase | sent | accepted | answered | refused (reasons) | lost | p50 | p95 | p99 |")
	t.line("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
	for _, p := range phases {
		lostCell := fmt.Sprint(p.Lost)
		if p.Lost > 0 {
			lostCell = fmt.Sprintf("**%d** (%s)", p.Lost, reasons(p.LostBy))
		}
		t.line(fmt.Sprintf("| %s (%.0f–%.0f s) | %d | %d | %d | %d %s | %s | %.0f ms | %.0f ms | %.0f ms |", p.Name, p.FromS, p.ToS,
			p.Sent, p.Accepted, p.Answered, p.Refused, paren(reasons(p.RefusedBy)), lostCell, p.P50ms, p.P95ms, p.P99ms))
	}
	return strings.Join(t, "\n")
}

func reasons(n map[string]int) string {
	var parts []string
	for _, r := range slices.Sorted(maps.Keys(n)) {
		parts = append(parts, fmt.Sprintf("%s %d", r, n[r]))
	}
	return strings.Join(parts, ", ")
}

func paren(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

func soakLevelsText(s soakSummary) string {
	var t lines
	t.line("Each replica that lived through the whole run, idle (the balancer's idle connections closed, the upstreams' closed by their 2 s idle timeout, a GC forced through `/debug/pprof/heap?gc=1`), after the warm-up and after the settle. The live heap is `go_memstats_heap_alloc_bytes` right after that GC — what the run left reachable — less 64 KiB for each of the replica's Redis connections (counted in /proc): go-redis' buffers, whose number its pool sets (up to its size, kept for its 30 min idle time) and a Redis stall or restart moves, so they are shown apart; heap in use (`go_memstats_heap_inuse_bytes`, its spans, fragmentation included) is what the chart above follows. The run fails if goroutines are more than 10 % above their level before, or the live heap more than 10 % and more than 1 MiB above it (at about 2 MiB at rest, 10 % is less than what grows once and keeps its size: a metric series per new refusal reason, the clients' pools after a burst or a stall):")
	t.line("")
	t.line("| replica | goroutines before | after | live heap before | after | Redis connections before | after | heap in use before (not judged) | after |")
	t.line("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	mib := func(b float64) string { return fmt.Sprintf("%.2f MiB", b/(1<<20)) }
	for _, r := range s.Replicas {
		t.line(fmt.Sprintf("| %s | %.0f | %.0f | %s | %s | %d | %d | %s | %s |", r.Replica, r.GoroutinesBefore, r.GoroutinesAfter,
			mib(r.HeapBefore), mib(r.HeapAfter), r.RedisConnsBefore, r.RedisConnsAfter, mib(r.InUseBefore), mib(r.InUseAfter)))
	}
	t.line("")
	t.line(fmt.Sprintf("Redis keys %.0f s after the load stopped: %.0f; at the end of the settle: %.0f (the run fails if the second is higher: keys that outlive their requests).",
		keysSettleDelay.Seconds(), s.RedisKeysAfterLoad, s.RedisKeysAtEnd))
	return strings.Join(t, "\n")
}

func soakTokensText(s soakSummary, run *soakRun) string {
	var t lines
	t.line("| tokens | count |")
	t.line("| --- | ---: |")
	t.line(fmt.Sprintf("| charged: `gateway_tokens_total` (input + output), every replica instance's last scrape less its count before the soak | %d |", s.TokensCharged))
	t.line(fmt.Sprintf("| reported by the upstreams: `usage` of every chat answer they sent whole (alpha %d answers, beta %d) | %d |", run.answersBy["alpha"], run.answersBy["beta"], s.TokensReported))
	t.line(fmt.Sprintf("| seen by the clients: `usage` of the answered requests | %d |", s.TokensSeen))
	t.line(fmt.Sprintf("| the bound on \\|charged − reported\\| | %d |", s.TokensBound))
	t.line("")
	t.line(fmt.Sprintf("The bound: one answer's usage (the largest seen) for each request that may have reached an upstream and not been answered — "+
		"a lost request, or one refused after admission; with none, charged must equal reported exactly. A replica's last scrape is "+
		"its count: the SIGTERMed one is scraped every 100 ms while it drains, until it exits. The upstreams' answers to the "+
		"gateways' background probes (%d, a one-token `ping` while a breaker is open) are no tenant's and in neither count. "+
		"`gateway_tokens_total` is the usage secure_app accounted per request — the same usage its meter settles against the tenant's "+
		"token quota in Redis; a settle lost to the Redis stall or restart is the quota's loss, which this count cannot see.", s.UpstreamProbes))
	return strings.Join(t, "\n")
}
