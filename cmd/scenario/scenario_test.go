package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBySecondBucketsOutcomesAndWindowsLatency(t *testing.T) {
	var samples []sample
	for i := range 100 { // one second of fast answers, then one of slow ones and refusals
		samples = append(samples, sample{at: float64(i) / 100, lat: 10 * time.Millisecond, code: 200, model: "a"})
	}
	for i := range 10 {
		samples = append(samples, sample{at: 1 + float64(i)/10, lat: time.Second, code: 200, model: "b"},
			sample{at: 1.05, code: 429}, sample{at: 1.05, code: 503}, sample{at: 1.05, code: 502})
	}
	secs := bySecond(samples)
	require.Len(t, secs, 2)
	assert.Equal(t, 100, secs[0].ok)
	assert.Equal(t, 10.0, secs[0].p99)
	assert.Equal(t, map[string]int{"b": 10}, secs[1].models)
	assert.Equal(t, [4]int{10, 10, 10, 10}, [4]int{secs[1].ok, secs[1].limited, secs[1].shed, secs[1].failed})
	assert.Equal(t, 10.0, secs[1].p50, "second 1's quantiles cover the window ending at it: 100 fast, 10 slow")
	assert.Equal(t, 1000.0, secs[1].p99)
}

func TestChartIsWellFormedSVG(t *testing.T) {
	svg := chart{Title: "a < b & c", YLabel: "ms", Bands: []band{{From: 1, To: 2, Label: "fault"}},
		Series: []series{{Name: "p50", Color: "#000", Points: []point{{0, 1}, {1, 12.5}, {2, 3}}}}}.svg()
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err, "the SVG parses as XML")
	}
	assert.Contains(t, svg, "a &lt; b &amp; c", "text is escaped")
	assert.NotContains(t, svg, `>12<`, "y ticks are round numbers, not 12.5 printed as 12")
}

func TestListNamesEveryScenario(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"-list"}, &out, &errOut))
	for _, n := range []string{"brownout", "outage", "burst", "rolling-deploy", "redis-outage", "replicas", "hedging", "retry-budget", "adaptive", "midstream", "soak"} {
		assert.Contains(t, out.String(), n)
	}
	assert.Equal(t, 2, run(t.Context(), []string{"-name", "nope"}, &out, &errOut))
}

func TestPhaseTableHasARowPerPhaseOverItsSeconds(t *testing.T) {
	secs := []second{
		{t: 0, p50: 10, p95: 20, p99: 30, ok: 5, limited: 1},
		{t: 1, p50: 12, p95: 22, p99: 32, ok: 5, shed: 2},
		{t: 2, ok: 0, failed: 3}, // no answers: no latency to count
		{t: 3, p50: 40, p95: 50, p99: 60, ok: 4},
	}
	table := phaseTable(secs, []band{{From: 0, To: 2, Label: "first"}, {From: 2, To: 4, Label: "second"}})
	rows := strings.Split(table, "\n")
	require.Len(t, rows, 6)
	assert.Equal(t, "| first | 12 ms | 22 ms | 32 ms | 10 | 1 | 2 | 0 |", rows[2], "a phase covers [From, To)")
	assert.Equal(t, "| second | 40 ms | 50 ms | 60 ms | 4 | 0 | 0 | 3 |", rows[3], "a second without answers adds counts, not a zero latency")
}

func TestScenarioTableNamesEachOnceAndFillsEveryField(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range scenarios {
		assert.False(t, seen[s.name], "%s is in the table twice: -name would only ever find the first", s.name)
		seen[s.name] = true
		assert.NotEmpty(t, s.title, s.name)
		assert.NotEmpty(t, s.lesson, s.name)
		assert.NotNil(t, s.run, s.name)
		found, ok := lookup(s.name)
		require.True(t, ok, s.name)
		assert.Equal(t, s.title, found.title)
	}
}

func TestBalancerSendsOnlyToReadyBackends(t *testing.T) {
	backend := func(name string, readyz int) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/readyz" {
				w.WriteHeader(readyz)
				return
			}
			_, _ = io.WriteString(w, name)
		}))
		t.Cleanup(s.Close)
		return s
	}
	up, draining := backend("up", http.StatusOK), backend("draining", http.StatusServiceUnavailable)
	b := &balancer{}
	front := httptest.NewServer(b)
	defer front.Close()
	get := func() (int, string) {
		resp, err := front.Client().Get(front.URL + "/v1/chat/completions")
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}

	code, _ := get()
	assert.Equal(t, http.StatusBadGateway, code, "no backend has been checked yet")
	require.NoError(t, b.add(up.URL, up.URL+"/readyz"))
	require.NoError(t, b.add(draining.URL, draining.URL+"/readyz"))
	require.Error(t, b.add("http://[::1", "http://[::1/readyz"), "a backend URL that does not parse is refused when it is added")
	b.refresh(t.Context())
	for range 4 {
		code, body := get()
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "up", body, "a backend whose /readyz is not 200 gets nothing")
	}
}

func TestPollStopsAtTheFirstYesOrSaysWhyNot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		require.NoError(t, poll(t.Context(), 10*time.Second, 50*time.Millisecond, nil, func() bool { calls++; return calls == 3 }))
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "asked at once, then on each tick")

		no := func() bool { return false }
		start = time.Now()
		assert.ErrorIs(t, poll(t.Context(), time.Second, 50*time.Millisecond, nil, no), errTimedOut)
		assert.Equal(t, time.Second, time.Since(start), "the deadline bounds the wait")

		exited := make(chan struct{})
		close(exited)
		assert.ErrorIs(t, poll(t.Context(), time.Hour, 50*time.Millisecond, exited, no), errExited, "no waiting out the deadline for a process that has died")

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		assert.ErrorIs(t, poll(ctx, time.Hour, 50*time.Millisecond, nil, no), context.Canceled)
	})
}

func TestAtWaitsForItsPlaceInTheSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		require.NoError(t, at(t.Context(), start, 10*time.Second))
		assert.Equal(t, 10*time.Second, time.Since(start))
		require.NoError(t, at(t.Context(), start, 5*time.Second), "a time already past is now")
		assert.Equal(t, 10*time.Second, time.Since(start))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		assert.ErrorIs(t, at(ctx, start, time.Hour), context.Canceled)
	})
}

func TestScrapeReadsBreakersByUpstreamAndSumsOverLabels(t *testing.T) {
	metrics := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `# TYPE gateway_breaker_state gauge
gateway_breaker_state{provider="alpha",model="alpha-1"} 1
gateway_breaker_state{provider="beta",model="beta-1"} 0
# TYPE gateway_requests_in_flight gauge
gateway_requests_in_flight 7
# TYPE gateway_provider_attempts_total counter
gateway_provider_attempts_total{provider="alpha",outcome="ok"} 10
gateway_provider_attempts_total{provider="alpha",outcome="error"} 5
`)
	}))
	defer metrics.Close()
	sc, err := scrapeOnce(t.Context(), metrics.URL)
	require.NoError(t, err)
	assert.Equal(t, map[upstream]float64{{"alpha", "alpha-1"}: 1, {"beta", "beta-1"}: 0}, sc.breakers)
	assert.Equal(t, 7.0, sc.inFlight)
	assert.Equal(t, 15.0, sc.attempts, "a counter is summed over its labels")
	_, err = scrapeOnce(t.Context(), "http://[::1")
	assert.Error(t, err, "a URL that does not parse is an error, not a panic")
}

func TestClassifySortsAnsweredRefusedAndLost(t *testing.T) {
	whole := `{"choices":[{"message":{"content":"hi"}}],"usage":{"total_tokens":16}}`
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"total_tokens\":12}}\n\ndata: [DONE]\n\n"
	for _, c := range []struct {
		name   string
		code   int
		body   string
		err    string
		want   outcome
		reason string
		tokens int
	}{
		{"a whole answer", 200, whole, "", answered, "", 16},
		{"a complete stream", 200, stream, "", answered, "", 12},
		{"a stream ended by an error event", 200, "data: {\"choices\":[]}\n\ndata: {\"error\":{\"code\":\"upstream_error\"}}\n\n", "", refused, "stream error event: upstream_error", 0},
		{"a stream cut with neither", 200, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", "", lost, "stream cut without [DONE] or an error event", 0},
		{"[DONE] without a finish", 200, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n", "", lost, "stream with [DONE] but no finish_reason", 0},
		{"[DONE] after a broken event", 200, "data: {\"choi\n\ndata: [DONE]\n\n", "", lost, "stream with [DONE] and a broken event", 0},
		{"a 200 with a broken body", 200, `{"choices":[`, "", lost, "200 with a broken body", 0},
		{"a 200 without choices", 200, `{"id":"x"}`, "", lost, "200 with a broken body", 0},
		{"a refusal with the gateway's error", 429, `{"error":{"type":"rate_limit_error","code":"rate_limited"}}`, "429 Too Many Requests", refused, "rate_limited", 0},
		{"a refusal with a type only", 503, `{"error":{"type":"server_error"}}`, "", refused, "server_error", 0},
		{"a proxy's 502 without the gateway's error", 502, "", "502 Bad Gateway", lost, "status 502 without the gateway's JSON error", 0},
		{"a hang past the deadline", 0, "", "Post \"http://x\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)", lost, "no answer within the client's deadline", 0},
		{"a reset", 0, "", "read: connection reset by peer", lost, "connection reset", 0},
		{"a body cut short", 0, "data: {", "unexpected EOF", lost, "connection closed (EOF)", 0},
	} {
		o, reason, tokens := classify(c.code, []byte(c.body), c.err)
		assert.Equal(t, c.want, o, c.name)
		assert.Equal(t, c.reason, reason, c.name)
		assert.Equal(t, c.tokens, tokens, c.name)
	}
}

func TestAcceptedCountsRefusalsAfterAdmissionOnly(t *testing.T) {
	assert.True(t, soakSample{outcome: answered}.accepted())
	assert.True(t, soakSample{outcome: lost, reason: "connection reset"}.accepted(), "a lost request was taken, then lost")
	assert.True(t, soakSample{outcome: refused, reason: "upstream_error"}.accepted(), "the upstream failed it after admission")
	assert.True(t, soakSample{outcome: refused, reason: "stream error event: upstream_error"}.accepted())
	for _, r := range []string{"rate_limited", "limits_unavailable", "rate_limiter_unavailable", "too_many_concurrent_requests", "tokens_per_minute", "draining", "overloaded"} {
		assert.False(t, soakSample{outcome: refused, reason: r}.accepted(), r)
	}
}

func TestSoakDurationDefaultsAndBounds(t *testing.T) {
	d, err := soakDuration("")
	require.NoError(t, err)
	assert.Equal(t, 10*time.Minute, d)
	d, err = soakDuration("2m")
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, d)
	for _, bad := range []string{"30s", "3h", "soon"} {
		_, err := soakDuration(bad)
		assert.Error(t, err, bad)
	}
}

func TestPlanSoakScalesWithTheDurationAndKeepsEveryFault(t *testing.T) {
	for _, d := range []time.Duration{time.Minute, 2 * time.Minute, 10 * time.Minute} {
		p := planSoak(d)
		require.Len(t, p.phases, 7, d)
		assert.Equal(t, 0.0, p.phases[0].From, d)
		assert.Equal(t, d.Seconds(), p.phases[len(p.phases)-1].To, "the phases cover the whole load")
		for i := 1; i < len(p.phases); i++ {
			assert.Equal(t, p.phases[i-1].To, p.phases[i].From, "%s: phases are contiguous", d)
			assert.Less(t, p.phases[i].From, p.phases[i].To, d)
		}
		in := func(t0 float64, label string) bool { return p.phases[p.phaseOf(t0)].Label == label }
		assert.True(t, in(p.slow.From, "brown-out") && in(p.slow.To-1, "brown-out"), d)
		assert.True(t, in(p.outage.From, "outage") && in(p.outage.To-1, "outage"), d)
		assert.True(t, in(p.stall, "redis-stall") && in(p.stall+soakStall.Seconds(), "redis-stall"), "%s: the stall stays 2 s and in its phase", d)
		assert.True(t, in(p.restart, "redis-restart") && in(p.term, "replica-restart"), d)
		assert.True(t, in(p.burst.From, "burst") && in(p.burst.To-1, "burst"), d)
		assert.Equal(t, len(p.phases)-1, p.phaseOf(d.Seconds()+0.5), "a request sent at the very end counts in the last phase")
	}
	assert.Equal(t, 2*planSoak(time.Minute).outage.From, planSoak(2*time.Minute).outage.From, "the schedule scales")
	assert.Contains(t, planSoak(2*time.Minute).alphaSpec(1, true), "slow=12s-30s:600ms@0.3,outage=36s-50s")
	assert.NotContains(t, planSoak(2*time.Minute).alphaSpec(1, false), "outage", "the warm-up has no faults")
}

func TestPhaseStatsCountsEachPhaseByWhenItsRequestsWereSent(t *testing.T) {
	plan := soakPlan{phases: []band{{From: 0, To: 10, Label: "a"}, {From: 10, To: 20, Label: "b"}}}
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	samples := []soakSample{
		{at: 1, lat: ms(100), outcome: answered, tokens: 10},
		{at: 2, lat: ms(200), outcome: answered, tokens: 10},
		{at: 3, outcome: refused, reason: "rate_limited"},
		{at: 11, outcome: refused, reason: "upstream_error"},
		{at: 12, outcome: lost, reason: "connection reset"},
		{at: 20.5, lat: ms(300), outcome: answered},
	}
	got := phaseStats(plan, samples)
	require.Len(t, got, 2)
	assert.Equal(t, soakPhase{Name: "a", FromS: 0, ToS: 10, Sent: 3, Accepted: 2, Answered: 2, Refused: 1,
		RefusedBy: map[string]int{"rate_limited": 1}, LostBy: map[string]int{}, P50ms: 200, P95ms: 200, P99ms: 200}, got[0])
	assert.Equal(t, 3, got[1].Sent)
	assert.Equal(t, 3, got[1].Accepted, "refused after admission and lost are accepted")
	assert.Equal(t, map[string]int{"connection reset": 1}, got[1].LostBy)
	assert.Equal(t, 300.0, got[1].P99ms)
	assert.Equal(t, int64(10*2), tokenBound(samples), "the largest answer's usage for each of the two that may have reached an upstream unanswered")
}

func TestVerdictNamesEveryFailedCriterion(t *testing.T) {
	good := soakSummary{Replicas: []soakLevels{{Replica: "r2", GoroutinesBefore: 100, GoroutinesAfter: 110, HeapBefore: 1000, HeapAfter: 900}},
		RedisKeysAfterLoad: 5, RedisKeysAtEnd: 3, TokensCharged: 100, TokensReported: 100}
	assert.Empty(t, verdict(good), "exactly 10 % above, fewer keys, equal tokens: a pass")
	for _, c := range []struct {
		before, after float64
		fails         bool
	}{
		{2 << 20, 3 << 20, false},       // +1 MiB on 2 MiB: the floor, not 10 %
		{2 << 20, 3<<20 + 1, true},      // a byte past the floor
		{20 << 20, 22 << 20, false},     // 10 % of 20 MiB is past the floor
		{20 << 20, 22<<20 + 1024, true}, // and a KiB more is past 10 %
	} {
		heap := good
		heap.Replicas = []soakLevels{{Replica: "r3", GoroutinesBefore: 10, GoroutinesAfter: 10, HeapBefore: c.before, HeapAfter: c.after}}
		assert.Equal(t, c.fails, len(verdict(heap)) > 0, "heap %.0f then %.0f", c.before, c.after)
	}

	bad := good
	bad.Lost = 2
	bad.Phases = []soakPhase{{LostBy: map[string]int{"connection reset": 2}}}
	bad.Replicas = []soakLevels{{Replica: "r2", GoroutinesBefore: 100, GoroutinesAfter: 111, HeapBefore: 1000, HeapAfter: 1000 + heapFloor + 1}}
	bad.RedisKeysAtEnd = 6
	bad.TokensCharged, bad.TokensBound = 130, 20
	got := strings.Join(verdict(bad), "\n")
	for _, want := range []string{"2 request(s) lost (connection reset: 2)", "replica r2: 111 goroutines", "replica r2: live heap 1049577",
		"Redis keys kept growing", "tokens charged 130 differ from tokens the upstreams reported 100 by 30, more than the bound 20"} {
		assert.Contains(t, got, want)
	}
	assert.NotEmpty(t, verdict(soakSummary{RedisKeysAfterLoad: 1, RedisKeysAtEnd: 1}), "no levels to compare is a failure, not a pass")
	assert.NotEmpty(t, verdict(soakSummary{Replicas: good.Replicas, RedisKeysAfterLoad: -1, RedisKeysAtEnd: -1}), "no key count is a failure")
}

func TestKeysAroundTakesTheCountAfterTheLoadAndTheLast(t *testing.T) {
	start := time.Unix(1000, 0)
	keys := []timed{{start.Add(50 * time.Second), 40}, {start.Add(61 * time.Second), 30}, {start.Add(63 * time.Second), 20},
		{start.Add(80 * time.Second), 4}, {start.Add(90 * time.Second), 99}}
	afterLoad, atEnd := keysAround(keys, start, 60, 85)
	assert.Equal(t, 20.0, afterLoad, "the first count 3 s after the load stopped")
	assert.Equal(t, 4.0, atEnd, "the last count by the end")
}

func TestTokensChargedAddsEveryInstanceSinceItsCountBefore(t *testing.T) {
	assert.Equal(t, int64(15+20+7), tokensCharged([]replicaTokens{{before: 5, last: 20}, {before: 0, last: 20}, {before: 3, last: 10}}))
	assert.Equal(t, 2, len(levelsOf(map[string]replicaSample{"r1": {}, "r2": {}, "r3": {}}, map[string]replicaSample{"r2": {}, "r3": {}, "r1′": {}})),
		"only the replicas measured before and after are compared")
}

func TestSoakUpstreamCountsWholeAnswersButNotProbes(t *testing.T) {
	u, err := startUpstream("alpha", "name=alpha,latency=1ms,jitter=0s,chunk-delay=0s,seed=1")
	require.NoError(t, err)
	defer u.close()
	post := func(body string) []byte {
		resp, err := http.Post(u.url+"/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return b
	}
	whole := post(`{"model":"alpha-1","messages":[{"role":"user","content":"hello there"}]}`)
	streamed := post(`{"model":"alpha-1","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hello there"}]}`)
	post(`{"model":"alpha-1","max_completion_tokens":1,"messages":[{"role":"user","content":"ping"}]}`)
	assert.Equal(t, int64(usageIn(whole)+usageIn(streamed)), u.tokens.Load())
	assert.Positive(t, usageIn(streamed))
	assert.Equal(t, int64(2), u.answers.Load())
	assert.Equal(t, int64(1), u.probes.Load(), "a gateway's probe is counted apart")
	http.DefaultClient.CloseIdleConnections()
}
