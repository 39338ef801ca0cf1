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
	for _, n := range []string{"brownout", "outage", "burst", "rolling-deploy", "redis-outage", "replicas", "hedging", "retry-budget", "adaptive"} {
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
