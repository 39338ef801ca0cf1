package main

import "context"

// scenario is one experiment.
type scenario struct {
	name, title string
	lesson      string // what the charts show, in a sentence or two
	run         func(ctx context.Context, r *report) error
}

// scenarios is every experiment, in the order docs/scenarios/README.md
// lists them; -list prints them by name.
var scenarios = []scenario{
	{name: "brownout", title: "a brown-out: one provider slows for some calls",
		lesson: "Between 15 s and 35 s, 2% of the provider's calls take 700 ms more. The median does not " +
			"move, nor does p95; p99 jumps. A dashboard of averages or p50 shows a healthy service while one " +
			"request in twelve is slow — which is why the gateway exports histograms, and why alerts watch p99.",
		run: brownout},
	{name: "outage", title: "an outage and its recovery",
		lesson: "The primary provider answers 503 from 15 s to 30 s. Its breaker opens after three failures " +
			"and the fallback carries the traffic (the requests that found the primary failing still succeed, " +
			"one attempt later). While it is open the gateway probes alpha's upstream in the background — no " +
			"user's request is spent on it — at doubling intervals up to 2 s; the first probe after alpha " +
			"recovers closes the breaker, and traffic is back within about 2 s — where the 60 s recovery " +
			"timeout alone would have kept alpha out until 75 s, and then spent a user's request to find out.",
		run: outage},
	{name: "burst", title: "a burst against the rate limiter vs the semaphore alone",
		lesson: "One tenant sends 120 requests a second at a provider that takes 200 ms, to two gateways " +
			"with 16 slots each. With a per-tenant rate limit (20/s) the excess is refused at once (429, in " +
			"microseconds) and what is admitted is fast. With only the semaphore, everything queues: the " +
			"queue fills, waits reach the 1 s limit, and requests are shed with 503 after waiting — slow " +
			"failures instead of fast ones, and every answer a second late. A's 20/s is this tenant's quota, " +
			"not the gateway's capacity (80/s here): the slots it leaves free are other tenants' to use.",
		run: burst},
	{name: "rolling-deploy", title: "a rolling deploy under load: SIGTERM one of two replicas",
		lesson: "Two production_app replicas behind a load balancer that follows /readyz. At 10 s replica A " +
			"gets SIGTERM: its /readyz turns 503 at once, the balancer stops sending it new requests within " +
			"its next check, and A drains what it holds before it exits. At 13 s its replacement A′ starts " +
			"and joins when ready. Nothing is lost: no request fails.",
		run: rollingDeploy},
	{name: "redis-outage", title: "Redis goes down under secure_app: fail closed vs fail open",
		lesson: "Redis holds secure_app's shared limits. From 10 s to 20 s it is down. Failing closed (the " +
			"default) refuses every request with a 503 that says why, at once; failing open (-ratelimit-fail-open) " +
			"keeps serving with no limits enforced — and every request pays each limit's Redis timeout on the way, " +
			"so latency rises by that much. Both recover by themselves when Redis returns. The choice is " +
			"availability against budget, made in advance.",
		run: redisOutage},
	{name: "replicas", title: "three replicas, one tenant: in-process limits vs Redis",
		lesson: "One tenant's traffic is spread over three replicas, each with a 10 requests/s limit for it. " +
			"With production_app's in-process token buckets each replica grants its own 10/s: the tenant gets " +
			"about 30/s, three times its quota. With secure_app the buckets are one, on Redis: about 10/s, " +
			"whatever the number of replicas.",
		run: replicas},
	{name: "adaptive", title: "an adaptive concurrency limit through a brown-out (lab 09)",
		lesson: "The provider serves 8 calls at full speed; above that each call slows in proportion, so it " +
			"answers at most 8 calls per call-time. From 15 s to 35 s every call takes 150 ms more: 40 answers a " +
			"second at most, against 60 offered. No gateway can make that fit, and neither does: A and B answer " +
			"as many and shed as many. What the adaptive limit changes is where the queue is. B's gradient " +
			"limiter finds the provider's capacity — its limit falls from 32 to 8 — and the rest wait at the " +
			"gateway, where they can be shed, prioritised or sent elsewhere; A pushes all 64 into the provider, " +
			"where each call takes 64/8 times as long and every other client of that provider waits with them. " +
			"Before the brown-out the limit stays put (4 of 32 in use is no evidence for more); after it, it " +
			"climbs only as far as the traffic asks.",
		run: adaptiveScenario},
	{name: "hedging", title: "hedged calls against a slow tail (lab 10)",
		lesson: "One call in twenty-five takes 800 ms more; the rest take 30–50 ms. Two gateways take the same " +
			"load side by side: A waits for every call; B sends a second call to the provider when the first " +
			"has taken 100 ms (-hedge-delay), takes whichever answers first and cancels the other. B's p99 " +
			"falls to about the hedge delay plus an ordinary call (from about 850 ms to about 150 ms with seed 1), for about " +
			"3 % more upstream calls — and its retry budget (10 % of its requests plus 10 a second) caps " +
			"how many more there can ever be.",
		run: hedgingScenario},
	{name: "retry-budget", title: "retries during an outage, with and without a retry budget (lab 10)",
		lesson: "The provider answers 503 from 10 s to 25 s. Both gateways retry up to twice; their breakers are " +
			"set out of reach, to show what retries alone do. A sends every request three times: the outage " +
			"triples the load on the provider that is down. B's retry budget (10 % of the last 10 s of " +
			"requests, plus 1 a second) refuses the rest at once with the upstream's error: the load stays " +
			"near the traffic itself (1.2 calls a request instead of 2.9 with seed 1), and the callers learn " +
			"of the outage without the retries' backoffs.",
		run: retryBudgetScenario},
	{name: "midstream", title: "streams cut mid-answer, with and without continuation (lab 11)",
		lesson: "The primary drops one stream in five halfway through its answer; the caller already holds half " +
			"of it and its 200. Both gateways refuse to splice a fresh answer onto it. A ends those streams with an " +
			"error event and no [DONE] — honest, but one answer in five is lost to the caller. B's route declares " +
			"that its fallback continues an assistant prefill: B sends it the text so far and relays the rest, and " +
			"every stream ends complete. Neither ever ends a cut stream as if it were whole.",
		run: midstream},
	{name: "soak", title: "a soak: three secure_app replicas through every fault at once (DURATION, 10m by default)",
		lesson: "Three secure_app replicas share one Redis behind a balancer that follows /readyz, in front of two upstreams, " +
			"under an open loop of three tenants on three tiers for DURATION, through a seeded schedule: alpha browns out, then " +
			"fails and beta carries; Redis stalls for 2 s, then restarts empty; a replica gets SIGTERM with streams in flight and " +
			"is replaced; one tenant bursts. Every request ends answered completely or refused with a reason — none is lost; the " +
			"surviving replicas' goroutines and heap come back to their level before the run; Redis' keys stop growing when the " +
			"load stops; and the tokens secure_app counted are the tokens the upstreams reported. The run fails (exit 1) otherwise.",
		run: soak},
}

// lookup finds a scenario by name.
func lookup(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}
