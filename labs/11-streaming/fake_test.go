package streaming

import (
	"context"
	"errors"
	"sync"
	"time"
)

// step is what a fake stream does on one Next: wait, then return a chunk
// or an error.
type step struct {
	after time.Duration
	chunk Chunk
	err   error
}

// say is a step that sends text after a wait.
func say(after time.Duration, text string) step {
	return step{after: after, chunk: Chunk{Text: text, Raw: []byte("raw:" + text)}}
}

// finish is a step that ends the answer.
func finish(after time.Duration, reason string) step {
	return step{after: after, chunk: Chunk{FinishReason: reason, Raw: []byte("raw:finish")}}
}

// usage is a step that reports usage, as the last chunk of a stream does.
func usage(after time.Duration, prompt, completion int) step {
	return step{after: after, chunk: Chunk{Usage: &Usage{PromptTokens: prompt, CompletionTokens: completion}, Raw: []byte("raw:usage")}}
}

// fail is a step that returns err.
func fail(after time.Duration, err error) step { return step{after: after, err: err} }

// fakeStream plays its steps, then says nothing until its context ends.
type fakeStream struct {
	u     *upstream
	steps []step
	i     int
}

func (s *fakeStream) Next(ctx context.Context) (Chunk, error) {
	s.u.mu.Lock()
	s.u.nexts++
	s.u.mu.Unlock()
	if s.i >= len(s.steps) {
		<-ctx.Done() // silent
		return Chunk{}, ctx.Err()
	}
	st := s.steps[s.i]
	s.i++
	t := time.NewTimer(st.after)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return Chunk{}, ctx.Err()
	}
	return st.chunk, st.err
}

func (s *fakeStream) Close() error {
	s.u.mu.Lock()
	defer s.u.mu.Unlock()
	s.u.closes++
	return nil
}

// upstream is a scripted target: each Open plays the steps script gives
// for its prefill, and every call is recorded.
type upstream struct {
	name        string
	canContinue bool
	openErr     error
	script      func(prefill string) []step

	mu       sync.Mutex
	prefills []string // one per Open, in order
	closes   int
	nexts    int
}

func (u *upstream) target() Target {
	return Target{Name: u.name, CanContinue: u.canContinue, Open: func(ctx context.Context, prefill string) (Stream, error) {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.prefills = append(u.prefills, prefill)
		if u.openErr != nil {
			return nil, u.openErr
		}
		return &fakeStream{u: u, steps: u.script(prefill)}, nil
	}}
}

func (u *upstream) opened() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.prefills...)
}

func (u *upstream) closed() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.closes
}

// plays is an upstream that answers every Open with steps.
func plays(name string, steps ...step) *upstream {
	return &upstream{name: name, script: func(string) []step { return steps }}
}

// continues is an upstream that can continue a prefill and answers every
// Open with steps.
func continues(name string, steps ...step) *upstream {
	u := plays(name, steps...)
	u.canContinue = true
	return u
}

// caller records what reaches it, and when.
type caller struct {
	mu     sync.Mutex
	start  time.Time
	chunks []Chunk
	at     []time.Duration
	failAt int // emit fails on this chunk (1-based); 0: never
}

func newCaller() *caller { return &caller{start: time.Now()} }

func (c *caller) emit(ch Chunk) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chunks = append(c.chunks, ch)
	c.at = append(c.at, time.Since(c.start))
	if len(c.chunks) == c.failAt {
		return errGone
	}
	return nil
}

var errGone = errors.New("the caller hung up")

func (c *caller) text() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := ""
	for _, ch := range c.chunks {
		s += ch.Text
	}
	return s
}

func targets(us ...*upstream) []Target {
	out := make([]Target, len(us))
	for i, u := range us {
		out[i] = u.target()
	}
	return out
}

// limits: a first chunk within 2 s, then one at least every second.
var limits = Config{FirstToken: 2 * time.Second, Idle: time.Second}
