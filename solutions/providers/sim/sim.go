// Package sim is a simulated model provider: seeded, replayable latency,
// errors of the kinds real upstreams produce, outage windows and streamed
// chunks. It is the gateway's default upstream, so `make run` needs nothing
// else, and the way to rehearse failures on purpose.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/providers/spec"
)

// Failure kinds a simulated call can produce.
const (
	KindTimeout     = "timeout" // accepts the call, then says nothing until the caller gives up
	KindReset       = "reset"   // connection reset before any answer
	KindRateLimited = "429"     // 429 with Retry-After
	KindServer      = "500"     // 500
	KindBadRequest  = "400"     // 400: permanent, never retried
)

// Window is an outage: every call between Start and End (measured from
// New) fails with 503.
type Window struct{ Start, End time.Duration }

// Config describes one simulated provider.
type Config struct {
	Name       string
	Model      string        // upstream model name reported in answers; default Name+"-1"
	Latency    time.Duration // time to the first token (or the whole answer)
	Jitter     time.Duration // latency varies uniformly by ± Jitter
	ChunkDelay time.Duration // between streamed chunks
	ErrorRate  float64       // probability a call fails, 0..1
	ErrorKinds []string      // which failures, chosen uniformly; default 500
	RetryAfter time.Duration // for 429s; default 1s
	Outages    []Window
	Seed       uint64 // the same seed replays the same sequence
}

// Error is a simulated upstream failure, shaped like an HTTP error.
type Error struct {
	Provider   string
	Status     int // 0 for a connection-level failure
	Kind       string
	retryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("%s: %s", e.Provider, e.Kind)
	}
	return fmt.Sprintf("%s: HTTP %d (%s)", e.Provider, e.Status, e.Kind)
}

// StatusCode is the HTTP status the upstream answered (0: no answer).
func (e *Error) StatusCode() int { return e.Status }

// RetryAfter is the server's Retry-After (429 only); the retry loop honours it.
func (e *Error) RetryAfter() time.Duration { return e.retryAfter }

// Provider is a simulated upstream. Safe for concurrent use.
type Provider struct {
	cfg   Config
	start time.Time
	mu    sync.Mutex
	rng   *rand.Rand
}

// ErrInvalidConfig is returned by New for settings that cannot work.
var ErrInvalidConfig = errors.New("sim: invalid config")

// New returns a simulated provider.
func New(cfg Config) (*Provider, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: a provider needs a name", ErrInvalidConfig)
	}
	if cfg.ErrorRate < 0 || cfg.ErrorRate > 1 {
		return nil, fmt.Errorf("%w: error rate %v must be within 0..1", ErrInvalidConfig, cfg.ErrorRate)
	}
	if cfg.Latency < 0 || cfg.Jitter < 0 || cfg.ChunkDelay < 0 {
		return nil, fmt.Errorf("%w: durations must not be negative", ErrInvalidConfig)
	}
	for _, k := range cfg.ErrorKinds {
		switch k {
		case KindTimeout, KindReset, KindRateLimited, KindServer, KindBadRequest:
		default:
			return nil, fmt.Errorf("%w: unknown error kind %q (want timeout, reset, 429, 500 or 400)", ErrInvalidConfig, k)
		}
	}
	if len(cfg.ErrorKinds) == 0 {
		cfg.ErrorKinds = []string{KindServer}
	}
	if cfg.Model == "" {
		cfg.Model = cfg.Name + "-1"
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = time.Second
	}
	return &Provider{cfg: cfg, start: time.Now(), rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x5eed))}, nil
}

// Name is the provider's name.
func (p *Provider) Name() string { return p.cfg.Name }

// Model is the upstream model it reports.
func (p *Provider) Model() string { return p.cfg.Model }

// Generate answers in one piece.
func (p *Provider) Generate(ctx context.Context, req gateway.Request) (gateway.Completion, error) {
	var b strings.Builder
	c, err := p.Stream(ctx, req, func(chunk string) error {
		b.WriteString(chunk)
		return nil
	})
	c.Text = b.String()
	return c, err
}

// Stream answers word by word, ChunkDelay apart.
func (p *Provider) Stream(ctx context.Context, req gateway.Request, emit func(string) error) (gateway.Completion, error) {
	latency, failure := p.draw()
	if p.inOutage() {
		failure = "outage"
	}
	if failure == KindTimeout {
		<-ctx.Done()
		return gateway.Completion{}, ctx.Err()
	}
	if err := sleep(ctx, latency); err != nil {
		return gateway.Completion{}, err
	}
	switch failure {
	case "":
	case "outage":
		return gateway.Completion{}, &Error{Provider: p.cfg.Name, Status: http.StatusServiceUnavailable, Kind: "outage"}
	case KindReset:
		return gateway.Completion{}, &Error{Provider: p.cfg.Name, Kind: "connection reset by peer"}
	case KindRateLimited:
		return gateway.Completion{}, &Error{Provider: p.cfg.Name, Status: http.StatusTooManyRequests, Kind: "rate limited", retryAfter: p.cfg.RetryAfter}
	case KindBadRequest:
		return gateway.Completion{}, gateway.Permanent(&Error{Provider: p.cfg.Name, Status: http.StatusBadRequest, Kind: "context_length_exceeded"})
	default:
		return gateway.Completion{}, &Error{Provider: p.cfg.Name, Status: http.StatusInternalServerError, Kind: "server error"}
	}
	words := strings.Fields(answer(p.cfg.Name, req.Prompt))
	for i, w := range words {
		if i > 0 {
			if err := sleep(ctx, p.cfg.ChunkDelay); err != nil {
				return gateway.Completion{}, err
			}
			w = " " + w
		}
		if err := emit(w); err != nil {
			return gateway.Completion{}, err
		}
	}
	model := p.cfg.Model
	if req.Model != "" {
		model = req.Model // a route asked for a specific upstream model
	}
	return gateway.Completion{Model: model}, nil
}

// draw picks this call's latency and failure (if any) from the seeded source.
func (p *Provider) draw() (time.Duration, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	latency := p.cfg.Latency
	if p.cfg.Jitter > 0 {
		latency += time.Duration(p.rng.Int64N(2*int64(p.cfg.Jitter)+1)) - p.cfg.Jitter
	}
	var failure string
	if p.cfg.ErrorRate > 0 && p.rng.Float64() < p.cfg.ErrorRate {
		failure = p.cfg.ErrorKinds[p.rng.IntN(len(p.cfg.ErrorKinds))]
	}
	return max(latency, 0), failure
}

func (p *Provider) inOutage() bool {
	since := time.Since(p.start)
	for _, w := range p.cfg.Outages {
		if since >= w.Start && since < w.End {
			return true
		}
	}
	return false
}

// answer is a deterministic reply, so tests and demos can check it.
func answer(name, prompt string) string {
	words := strings.Fields(prompt)
	if len(words) > 12 {
		words = words[:12]
	}
	return fmt.Sprintf("[%s] You asked about: %s. Here is a simulated answer of %d words.", name, strings.Join(words, " "), len(words)+9)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Parse reads a provider spec from the command line:
//
//	name=alpha,latency=80ms,jitter=40ms,chunk-delay=15ms,error-rate=0.05,errors=500|429,outage=30s-60s,seed=7
//
// Every field but name is optional; outage may repeat.
func Parse(s string) (Config, error) {
	var cfg Config
	err := spec.Each(s, func(k, v string) error {
		var err error
		switch k {
		case "name":
			cfg.Name = v
		case "model":
			cfg.Model = v
		case "latency":
			cfg.Latency, err = time.ParseDuration(v)
		case "jitter":
			cfg.Jitter, err = time.ParseDuration(v)
		case "chunk-delay":
			cfg.ChunkDelay, err = time.ParseDuration(v)
		case "error-rate":
			cfg.ErrorRate, err = strconv.ParseFloat(v, 64)
		case "errors":
			cfg.ErrorKinds = strings.Split(v, "|")
		case "retry-after":
			cfg.RetryAfter, err = time.ParseDuration(v)
		case "seed":
			cfg.Seed, err = strconv.ParseUint(v, 10, 64)
		case "outage":
			from, to, ok := strings.Cut(v, "-")
			if !ok {
				return errors.New("want start-end, e.g. 30s-60s")
			}
			var w Window
			if w.Start, err = time.ParseDuration(from); err == nil {
				w.End, err = time.ParseDuration(to)
			}
			cfg.Outages = append(cfg.Outages, w)
		default:
			return errors.New("unknown field (want name, model, latency, jitter, chunk-delay, error-rate, errors, retry-after, outage, seed)")
		}
		return err
	})
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if cfg.Name == "" {
		return Config{}, fmt.Errorf("%w: %q has no name=", ErrInvalidConfig, s)
	}
	return cfg, nil
}
