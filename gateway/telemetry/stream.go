package telemetry

import (
	"strconv"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/prometheus/client_golang/prometheus"
)

// StreamCut says why a stream ended with an error after its first chunk.
type StreamCut string

// The reasons.
const (
	CutClientClosed StreamCut = "client_closed" // the client went away
	CutShutdown     StreamCut = "shutdown"      // the drain grace ended
	CutUpstream     StreamCut = "upstream"      // the upstream failed or went silent
)

// streamMetrics time streams as the client sees them.
type streamMetrics struct {
	firstChunk prometheus.Histogram
	chunkGap   prometheus.Histogram
	streamTime prometheus.Histogram
	cuts       *prometheus.CounterVec
}

func newStreamMetrics() streamMetrics {
	h := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	}
	return streamMetrics{
		firstChunk: h("gateway_stream_first_chunk_seconds",
			"From a stream's start at the gateway to its first chunk to the client: time to first token as the client sees it, queue wait included.",
			latencyBuckets),
		chunkGap:   h("gateway_stream_chunk_gap_seconds", "Time between two chunks of a stream (inter-token latency).", gapBuckets),
		streamTime: h("gateway_stream_duration_seconds", "From a stream's first chunk to its end.", latencyBuckets),
		cuts: counter("gateway_stream_cuts_total",
			"Streams ended by an error after their first chunk, by reason: client_closed, shutdown, upstream.", "reason"),
	}
}

func (m streamMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.firstChunk, m.chunkGap, m.streamTime, m.cuts}
}

// FirstChunk records the time from a stream's start to its first chunk.
func (m *Metrics) FirstChunk(d time.Duration) { m.firstChunk.Observe(d.Seconds()) }

// ChunkGap records the time between two chunks of a stream.
func (m *Metrics) ChunkGap(d time.Duration) { m.chunkGap.Observe(d.Seconds()) }

// StreamDuration records how long a stream ran after its first chunk.
func (m *Metrics) StreamDuration(d time.Duration) { m.streamTime.Observe(d.Seconds()) }

// StreamCut counts a stream cut after its first chunk.
func (m *Metrics) StreamCut(reason StreamCut) { m.cuts.WithLabelValues(string(reason)).Inc() }

// Tokens counts an answer's tokens as its upstream reported them (an
// upstream that reported none adds nothing: no guess is counted).
func (m *Metrics) Tokens(u *llm.Usage) {
	if u == nil {
		return
	}
	m.tokens.WithLabelValues("input").Add(float64(max(u.PromptTokens, 0)))
	m.tokens.WithLabelValues("output").Add(float64(max(u.CompletionTokens, 0)))
}

func itoa(n int) string { return strconv.Itoa(n) }
