package main

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/tidwall/gjson"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// sample is one request's outcome.
type sample struct {
	at    float64 // seconds since the scenario started, when it was sent
	lat   time.Duration
	code  int
	model string // the model that answered ("" on an error)
	// end is how a streamed answer ended: "done" ([DONE] after the last
	// chunk), "error" (an error event: cut, and said so), or "lost" (the
	// stream stopped with neither); "" for a whole answer.
	end string
}

// streamEnd reads how an event stream ended; "" for a body that is not one.
func streamEnd(body []byte) string {
	switch {
	case !bytes.HasPrefix(body, []byte("data: ")):
		return ""
	case bytes.Contains(body, []byte("data: [DONE]")):
		return "done"
	case bytes.Contains(body, []byte(`data: {"error"`)):
		return "error"
	}
	return "lost"
}

// load is one stream of requests at a constant rate, driven by vegeta.
type load struct {
	name    string
	targets []vegeta.Target // round-robin
	rate    int             // requests per second
	dur     time.Duration
}

// run sends the load and returns every outcome, relative to start.
func (l load) run(start time.Time) []sample {
	atk := vegeta.NewAttacker(vegeta.Timeout(30*time.Second), vegeta.KeepAlive(true), vegeta.MaxBody(64<<10),
		vegeta.Workers(16), vegeta.MaxWorkers(512))
	var out []sample
	for res := range atk.Attack(vegeta.NewStaticTargeter(l.targets...), vegeta.Rate{Freq: l.rate, Per: time.Second}, l.dur, l.name) {
		out = append(out, sample{at: res.Timestamp.Sub(start).Seconds(), lat: res.Latency, code: int(res.Code),
			model: gjson.GetBytes(res.Body, "model").Str, end: streamEnd(res.Body)})
	}
	return out
}

// second is the outcomes of requests sent in one second of the scenario.
type second struct {
	t             float64
	p50, p95, p99 float64 // milliseconds, over the answered (2xx) requests
	ok, limited   int     // 2xx; 429
	shed, failed  int     // 503; anything else (5xx, 504, network errors)
	models        map[string]int
}

// window is how many seconds of answers each point's latency quantiles
// cover: one second of 40 requests is too few for a p99.
const window = 5

// bySecond buckets samples by the second they were sent in; latency
// quantiles are over the window ending at that second.
func bySecond(samples []sample) []second {
	buckets := map[int][]sample{}
	last := 0
	for _, s := range samples {
		i := int(s.at)
		buckets[i] = append(buckets[i], s)
		last = max(last, i)
	}
	out := make([]second, 0, last+1)
	for i := 0; i <= last; i++ {
		sec := second{t: float64(i), models: map[string]int{}}
		var lats []float64
		for j := max(0, i-window+1); j <= i; j++ {
			for _, s := range buckets[j] {
				if s.code >= 200 && s.code < 300 {
					lats = append(lats, float64(s.lat.Microseconds())/1000)
				}
			}
		}
		for _, s := range buckets[i] {
			switch {
			case s.code >= 200 && s.code < 300:
				sec.ok++
				sec.models[s.model]++
			case s.code == http.StatusTooManyRequests:
				sec.limited++
			case s.code == http.StatusServiceUnavailable:
				sec.shed++
			default:
				sec.failed++
			}
		}
		sec.p50, sec.p95, sec.p99 = quantile(lats, 0.50), quantile(lats, 0.95), quantile(lats, 0.99)
		out = append(out, sec)
	}
	return out
}

func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sort.Float64s(v)
	return v[min(len(v)-1, int(q*float64(len(v))))]
}

// scrape is what the gateway's /metrics said at one instant.
type scrape struct {
	t        float64
	breakers map[upstream]float64 // 0 closed, 1 open, 2 half-open
	// Counters and gauges summed over their labels.
	inFlight      float64 // gateway_requests_in_flight
	attempts      float64 // gateway_provider_attempts_total: provider calls the retry loop made
	hedgesStarted float64 // gateway_hedges_total
	hedgesWon     float64 // gateway_hedge_wins_total
	refused       float64 // gateway_retry_budget_exhausted_total
	limit         float64 // gateway_provider_concurrency_limit
	continued     float64 // gateway_stream_continuations_total{outcome="completed"}
}

// upstream is a provider and one of its models: what a breaker guards, and
// the labels of gateway_breaker_state.
type upstream struct{ provider, model string }

// scraper polls a gateway's /metrics every interval until ctx ends.
type scraper struct {
	mu   sync.Mutex
	seen []scrape
}

func (s *scraper) run(ctx context.Context, url string, start time.Time, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if sc, err := scrapeOnce(ctx, url); err == nil { // else a missed point
			sc.t = time.Since(start).Seconds()
			s.record(sc)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *scraper) record(sc scrape) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, sc)
}

func (s *scraper) scrapes() []scrape {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// last is the final scrape (zero if there was none).
func (s *scraper) last() scrape {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) == 0 {
		return scrape{}
	}
	return s.seen[len(s.seen)-1]
}

// The scenario's own calls to a service's admin endpoints. Each has a
// timeout, so a service that hangs costs a missed point or a failed check,
// never a stuck run.
var (
	// probeClient asks /readyz: an answer slower than this is a no, as a
	// load balancer's or a kubelet's probe would take it.
	probeClient = &http.Client{Timeout: time.Second}
	// scrapeClient reads /metrics, which a loaded gateway may be slow to
	// render: a scrape that takes longer is a missed point.
	scrapeClient = &http.Client{Timeout: 5 * time.Second}
)

// metricFamilies reads and parses a /metrics page. It asks for it
// uncompressed: a gzip writer is a megabyte the service's pool would keep,
// and the soak measures that service's heap.
func metricFamilies(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := scrapeClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// scrapeOnce reads a /metrics page.
func scrapeOnce(ctx context.Context, url string) (scrape, error) {
	mfs, err := metricFamilies(ctx, url)
	if err != nil {
		return scrape{}, err
	}
	sc := scrape{breakers: map[upstream]float64{}}
	for _, m := range mfs["gateway_breaker_state"].GetMetric() {
		var u upstream
		for _, l := range m.Label {
			switch l.GetName() {
			case "provider":
				u.provider = l.GetValue()
			case "model":
				u.model = l.GetValue()
			}
		}
		sc.breakers[u] = m.GetGauge().GetValue()
	}
	sum := func(name string) float64 { // a counter's or a gauge's series, summed
		var v float64
		for _, m := range mfs[name].GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		return v
	}
	sc.inFlight = sum("gateway_requests_in_flight")
	sc.attempts = sum("gateway_provider_attempts_total")
	sc.hedgesStarted = sum("gateway_hedges_total")
	sc.hedgesWon = sum("gateway_hedge_wins_total")
	sc.refused = sum("gateway_retry_budget_exhausted_total")
	sc.limit = sum("gateway_provider_concurrency_limit")
	for _, m := range mfs["gateway_stream_continuations_total"].GetMetric() {
		for _, l := range m.Label {
			if l.GetName() == "outcome" && l.GetValue() == "completed" {
				sc.continued += m.GetCounter().GetValue()
			}
		}
	}
	return sc, nil
}
