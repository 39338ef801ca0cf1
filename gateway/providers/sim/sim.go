// Package sim is a simulated model provider: seeded, replayable latency,
// errors of the kinds real upstreams produce, outage windows and streamed
// chunks. It is the gateway's default upstream, so `make run` needs nothing
// else, and the way to rehearse failures on purpose.
//
// Given a chat request it answers the way an OpenAI-compatible upstream
// would, in the same wire format: a tool call when the request offers tools
// (and the conversation does not end with a tool result), JSON when
// response_format asks for it, text otherwise — so an SDK's tool loop or
// structured-output call runs end to end against `make run`.
package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/providers/spec"
)

// Kind is a failure a simulated call can produce; a spec's errors= names
// them.
type Kind string

// The failure kinds.
const (
	KindTimeout     Kind = "timeout" // accepts the call, then says nothing until the caller gives up
	KindReset       Kind = "reset"   // connection reset before any answer
	KindRateLimited Kind = "429"     // 429 with Retry-After
	KindServer      Kind = "500"     // 500
	KindBadRequest  Kind = "400"     // 400: permanent, never retried
	KindCut         Kind = "cut"     // a stream's connection drops halfway through its answer (a whole answer: reset)

	kindNone   Kind = ""       // the call succeeds
	kindOutage Kind = "outage" // a 503 in an outage window (from Config.Outages, not drawn)
)

// Window is an outage: every call between Start and End (measured from
// New) fails with 503.
type Window struct{ Start, End time.Duration }

// Slowdown is a brown-out window: each call in it is Extra slower with
// probability Share.
type Slowdown struct {
	Window
	Extra time.Duration
	Share float64
}

// Config describes one simulated provider.
type Config struct {
	Name       string
	Model      string        // upstream model name reported in answers; default Name+"-1"
	Latency    time.Duration // time to the first token (or the whole answer)
	Jitter     time.Duration // latency varies uniformly by ± Jitter
	ChunkDelay time.Duration // between streamed chunks
	ErrorRate  float64       // probability a call fails, 0..1
	ErrorKinds []Kind        // which failures, chosen uniformly; default 500
	RetryAfter time.Duration // for 429s; default 1s
	Outages    []Window
	// Slowdowns are brown-outs: during each window, a share of the calls
	// takes Extra longer — the median barely moves while the tail climbs.
	Slowdowns []Slowdown
	// Capacity is how many calls it serves at full speed at once; above
	// that, a call's latency grows in proportion to the calls in flight
	// when it starts (n of them: latency × n/Capacity), as a server that
	// shares its processors does. 0: no limit.
	Capacity int
	Seed     uint64 // the same seed replays the same sequence
}

// Provider is a simulated upstream. Safe for concurrent use.
type Provider struct {
	cfg      Config
	start    time.Time
	mu       sync.Mutex
	rng      *rand.Rand
	inFlight atomic.Int64 // calls waiting out their latency, for Capacity
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
	if cfg.Latency < 0 || cfg.Jitter < 0 || cfg.ChunkDelay < 0 || cfg.Capacity < 0 {
		return nil, fmt.Errorf("%w: durations and capacity must not be negative", ErrInvalidConfig)
	}
	for _, k := range cfg.ErrorKinds {
		switch k {
		case KindTimeout, KindReset, KindRateLimited, KindServer, KindBadRequest, KindCut:
		default:
			return nil, fmt.Errorf("%w: unknown error kind %q (want timeout, reset, 429, 500, 400 or cut)", ErrInvalidConfig, k)
		}
	}
	if len(cfg.ErrorKinds) == 0 {
		cfg.ErrorKinds = []Kind{KindServer}
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

// HonoursContext says every call returns promptly once its context ends,
// so the gateway need not run it on a goroutine of its own.
func (p *Provider) HonoursContext() bool { return true }

// Probe fails during an outage, as a health check of the upstream would.
func (p *Provider) Probe(ctx context.Context, _ string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.inOutage() {
		return p.failure(kindOutage)
	}
	return nil
}

// DefaultModel is the model it reports when a request names none.
func (p *Provider) DefaultModel() string { return p.cfg.Model }

// Generate answers in one piece, after the latency and every chunk delay a
// stream of the same answer would take.
func (p *Provider) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	a, err := p.begin(ctx, req)
	if err != nil {
		return llm.Completion{}, err
	}
	if err := sleep(ctx, time.Duration(max(len(a.words)-1, 0))*p.cfg.ChunkDelay); err != nil {
		return llm.Completion{}, err
	}
	if a.cut {
		return llm.Completion{}, p.failure(KindReset)
	}
	u := a.usage()
	return llm.Completion{Raw: chatapi.NewFrame(a.model).Completion(a.text(), a.calls, a.finish(), &u), Model: a.model, Usage: &u}, nil
}

// Stream answers word by word, ChunkDelay apart, in OpenAI chunks that
// each name the same model: a first chunk with the role (and any tool
// call), one per word, one with the finish reason, and the usage when the
// caller asked for it. A request whose last message is an assistant's is
// a prefill to continue: the answer is the rest of what it would have
// said, after as many words as the prefill has.
func (p *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	a, err := p.begin(ctx, req)
	if err != nil {
		return llm.Completion{}, err
	}
	f := chatapi.NewFrame(a.model)
	send := func(raw []byte) error { return emit(llm.Chunk{Raw: raw}) }
	empty := ""
	if err := send(f.Chunk(chatapi.Delta{Role: "assistant", Content: &empty, ToolCalls: a.calls}, "")); err != nil {
		return llm.Completion{}, err
	}
	for i, w := range a.words {
		if a.cut && i == len(a.words)/2 {
			return llm.Completion{}, p.failure(KindReset)
		}
		if i > 0 || a.continued {
			if err := sleep(ctx, p.cfg.ChunkDelay); err != nil {
				return llm.Completion{}, err
			}
			w = " " + w
		}
		if err := send(f.Chunk(chatapi.Delta{Content: &w}, "")); err != nil {
			return llm.Completion{}, err
		}
	}
	if err := send(f.Chunk(chatapi.Delta{}, a.finish())); err != nil {
		return llm.Completion{}, err
	}
	u := a.usage()
	if req.Chat.IncludeUsage {
		if err := send(f.UsageChunk(u)); err != nil {
			return llm.Completion{}, err
		}
	}
	return llm.Completion{Model: a.model, Usage: &u}, nil
}

// begin waits out the call's latency and fails it if the draw or an outage
// says so; otherwise it composes the answer.
func (p *Provider) begin(ctx context.Context, req llm.Request) (simAnswer, error) {
	latency, failure := p.draw()
	if p.inOutage() {
		failure = kindOutage
	}
	if failure == KindTimeout {
		<-ctx.Done()
		return simAnswer{}, ctx.Err()
	}
	n := p.inFlight.Add(1)
	if c := int64(p.cfg.Capacity); c > 0 && n > c {
		latency = time.Duration(float64(latency) * float64(n) / float64(c))
	}
	err := sleep(ctx, latency)
	p.inFlight.Add(-1)
	if err != nil {
		return simAnswer{}, err
	}
	cut := failure == KindCut
	if !cut {
		if err := p.failure(failure); err != nil {
			return simAnswer{}, err
		}
	}
	model := p.cfg.Model
	if req.Model != "" {
		model = req.Model // a route asked for a specific upstream model
	}
	a := compose(p.cfg.Name, model, req)
	a.cut = cut
	return a, nil
}

// ErrReset is the simulated connection reset; it wraps syscall.ECONNRESET
// as a real one would.
var ErrReset = fmt.Errorf("sim: connection reset by peer: %w", syscall.ECONNRESET)

// failure is the error a drawn failure kind stands for, shaped like a real
// upstream's: status, OpenAI error type and code.
func (p *Provider) failure(kind Kind) error {
	up := func(f chatapi.Failure, msg string, retryAfter time.Duration) error {
		return chatapi.NewUpstreamError(p.cfg.Name, f.Status, f.New(msg).JSON(), retryAfter)
	}
	switch kind {
	case kindNone:
		return nil
	case kindOutage:
		return up(chatapi.UpstreamUnavailable, "the simulated upstream is in an outage window", 0)
	case KindReset:
		return fmt.Errorf("%s: %w", p.cfg.Name, ErrReset)
	case KindRateLimited:
		return up(chatapi.UpstreamRateLimit, "simulated rate limit", p.cfg.RetryAfter)
	case KindBadRequest:
		return up(chatapi.ContextTooLong, "simulated: the prompt is longer than the model's context", 0)
	}
	return up(chatapi.UpstreamInternal, "simulated server error", 0)
}

// draw picks this call's latency and failure (if any) from the seeded source.
func (p *Provider) draw() (time.Duration, Kind) {
	p.mu.Lock()
	defer p.mu.Unlock()
	latency := p.cfg.Latency
	if p.cfg.Jitter > 0 {
		latency += time.Duration(p.rng.Int64N(2*int64(p.cfg.Jitter)+1)) - p.cfg.Jitter
	}
	failure := kindNone
	if p.cfg.ErrorRate > 0 && p.rng.Float64() < p.cfg.ErrorRate {
		failure = p.cfg.ErrorKinds[p.rng.IntN(len(p.cfg.ErrorKinds))]
	}
	since := time.Since(p.start)
	for _, s := range p.cfg.Slowdowns {
		if since >= s.Start && since < s.End && p.rng.Float64() < s.Share {
			latency += s.Extra
		}
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

// parseSlowdown reads start-end:extra@share, e.g. 20s-40s:800ms@0.1 (a
// tenth of the calls between 20 s and 40 s take 800 ms more).
func parseSlowdown(v string) (Slowdown, error) {
	bad := errors.New("want start-end:extra@share, e.g. 20s-40s:800ms@0.1")
	window, rest, ok := strings.Cut(v, ":")
	extra, share, ok2 := strings.Cut(rest, "@")
	from, to, ok3 := strings.Cut(window, "-")
	if !ok || !ok2 || !ok3 {
		return Slowdown{}, bad
	}
	var (
		s   Slowdown
		err error
	)
	if s.Start, err = time.ParseDuration(from); err != nil {
		return s, bad
	}
	if s.End, err = time.ParseDuration(to); err != nil {
		return s, bad
	}
	if s.Extra, err = time.ParseDuration(extra); err != nil {
		return s, bad
	}
	if s.Share, err = strconv.ParseFloat(share, 64); err != nil || s.Share < 0 || s.Share > 1 {
		return s, bad
	}
	return s, nil
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
//	name=alpha,latency=80ms,jitter=40ms,chunk-delay=15ms,error-rate=0.05,errors=500|429,outage=30s-60s,capacity=8,seed=7
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
			for _, k := range strings.Split(v, "|") {
				cfg.ErrorKinds = append(cfg.ErrorKinds, Kind(k))
			}
		case "retry-after":
			cfg.RetryAfter, err = time.ParseDuration(v)
		case "seed":
			cfg.Seed, err = strconv.ParseUint(v, 10, 64)
		case "capacity":
			cfg.Capacity, err = strconv.Atoi(v)
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
		case "slow":
			sd, perr := parseSlowdown(v)
			cfg.Slowdowns, err = append(cfg.Slowdowns, sd), perr
		default:
			return errors.New("unknown field (want name, model, latency, jitter, chunk-delay, error-rate, errors, retry-after, outage, slow, capacity, seed)")
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
