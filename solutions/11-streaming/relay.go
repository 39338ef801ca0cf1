// Package streaming relays a streamed LLM answer from its upstreams to a
// caller: the streaming fallback problem.
//
// Before the first chunk reaches the caller, a failed or silent upstream
// may be replaced by the next one, and nobody can tell. After it, the
// caller holds part of an answer and the HTTP status line is long sent:
// the relay must never splice another upstream's answer onto it. It either
// continues the answer on an upstream that can continue an assistant
// prefill, so the caller reads one answer, or it ends with an error the
// caller's stream reports in-band — never with a clean end that passes a
// truncated answer off as a whole one.
package streaming

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

var (
	// ErrFirstToken: no chunk within Config.FirstToken of opening a stream.
	ErrFirstToken = errors.New("streaming: no first chunk in time")
	// ErrIdle: no chunk within Config.Idle of the last one.
	ErrIdle = errors.New("streaming: the stream went idle")
	// ErrMalformed is what a Stream returns for a chunk it cannot read; the
	// relay passes nothing of it on and treats it as the stream breaking.
	ErrMalformed = errors.New("streaming: malformed chunk")
	// ErrTruncated: the stream ended before any chunk said it finished.
	ErrTruncated = errors.New("streaming: the stream ended before it finished")
	// ErrBroken wraps the failure of a stream that had already sent the
	// caller part of its answer, when no upstream could continue it: the
	// caller's stream must end with an error, and no [DONE].
	ErrBroken = errors.New("streaming: the answer broke after its first chunk")
	// ErrNoTargets: Relay was given no upstream to ask.
	ErrNoTargets = errors.New("streaming: no targets")
	// ErrInvalidConfig: a limit that is not positive.
	ErrInvalidConfig = errors.New("streaming: invalid config")
)

// Chunk is one event of a streamed answer, as the relay reads it.
type Chunk struct {
	Text         string // the text it adds (delta.content)
	Other        bool   // it carries something besides text: tool calls, a refusal, audio
	FinishReason string // why the answer ended; "" until its last chunk
	Usage        *Usage // what the stream used, on the chunk that reports it
	// Raw is the event as the upstream sent it, for a caller's stream to
	// pass on as it came; the relay sets it to nil on a chunk whose Text
	// it changed, which the caller's stream then writes from the fields.
	Raw []byte
}

// Usage is what an upstream says a stream used.
type Usage struct {
	PromptTokens, CompletionTokens int
}

// Stream is one upstream's answer, being streamed.
type Stream interface {
	// Next returns the next chunk. It returns io.EOF when the upstream ends
	// the stream, ErrMalformed for a chunk it cannot read, and ctx's error
	// soon after ctx ends.
	Next(ctx context.Context) (Chunk, error)
	// Close releases the stream. The relay closes every stream it opens,
	// once.
	Close() error
}

// Target is an upstream the relay may ask.
type Target struct {
	Name string
	// CanContinue says the upstream continues an assistant prefill — the
	// answer so far, sent as the last assistant message — instead of
	// starting over. Only such a target may take over a broken answer.
	CanContinue bool
	// Open starts a stream: a fresh answer for prefill "", or the rest of
	// the answer that begins with prefill.
	Open func(ctx context.Context, prefill string) (Stream, error)
}

// Config bounds the silence of an upstream.
type Config struct {
	// FirstToken bounds the wait for a stream's first chunk, from Open.
	FirstToken time.Duration
	// Idle bounds the gap between two chunks.
	Idle time.Duration
	// NoContinue: the request opted out of continuation; an answer that
	// breaks after its first chunk ends with ErrBroken.
	NoContinue bool
}

// Result is what the caller received.
type Result struct {
	Text         string   // the answer's text, as the caller read it
	FinishReason string   // why it ended
	Usage        Usage    // the last usage each stream reported, summed over the streams
	Served       []string // the targets whose chunks reached the caller, in order
}

// Relay streams an answer from targets, in order, to emit, and returns
// what the caller received — when it returns an error too.
//
// Until a chunk has reached emit, a target that fails to open, errs, sends
// a malformed chunk, ends early or stays silent past FirstToken or Idle is
// replaced by the next one, never opened again. After it, a failure goes
// to the next target that CanContinue, with the text so far as its
// prefill — unless the answer so far holds anything but text, or
// Config.NoContinue — and the caller reads on as if nothing happened; a
// continuation that starts by repeating the prefill has the repeat
// dropped. With no such target the error wraps ErrBroken and the failure.
//
// The first-token limit runs from Open to a stream's first chunk that says
// something (text, anything besides text, a finish reason — a repeat of the
// prefill that a continuation drops counts too), the idle limit between
// chunks after it; a limit that runs out is reported as ErrFirstToken
// or ErrIdle (not as a bare context.DeadlineExceeded). A chunk that says
// nothing yet — no text, nothing else, no finish reason: the role — does
// not count as the first to reach the caller: it is held back, with any
// others like it, until one that does, and they go with it, in order.
//
// A chunk with a finish reason ends the answer: what follows it is read
// only for the usage (with it, the relay is done), and an end of any
// kind after it (EOF, silence, an error) is the answer finishing, not
// breaking. Usage-only chunks are not passed to emit: Result.Usage has
// each stream's last report, summed over the streams.
//
// A config with a limit that is not positive, or no targets, is refused
// before anything is opened. An error from emit means the caller has gone,
// and the caller's context ending means the same: the relay stops at once
// and returns it — and a caller gone before Relay is called opens nothing. Every stream opened is closed before Relay returns.
func Relay(ctx context.Context, cfg Config, targets []Target, emit func(Chunk) error) (Result, error) {
	switch {
	case cfg.FirstToken <= 0 || cfg.Idle <= 0:
		return Result{}, fmt.Errorf("%w: the first-token and idle limits must be positive", ErrInvalidConfig)
	case len(targets) == 0:
		return Result{}, ErrNoTargets
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err // an upstream call, billed, for nobody
	}
	r := &relay{cfg: cfg, targets: targets, emit: emit}
	err := r.run(ctx)
	return r.res, err
}

type relay struct {
	cfg     Config
	targets []Target
	emit    func(Chunk) error
	res     Result
	sent    bool // a chunk has reached the caller
	other   bool // one of them carried more than text
}

func (r *relay) run(ctx context.Context) error {
	var last error
	for i := 0; i < len(r.targets); i++ {
		t := r.targets[i]
		if r.sent && !t.CanContinue {
			continue
		}
		err := r.attempt(ctx, t)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, errCallerGone), ctx.Err() != nil:
			return callersReason(ctx, err)
		}
		last = err
		if r.sent && (r.other || r.cfg.NoContinue) {
			break // never continued: ends as broken below
		}
	}
	if r.sent {
		return fmt.Errorf("%w: %w", ErrBroken, last)
	}
	return last
}

// callersReason is err, said to be the caller's own reason when its
// context ended: a read on a closed connection says only that it failed.
func callersReason(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", cerr, err)
	}
	return err
}

// errCallerGone wraps the error emit returned.
var errCallerGone = errors.New("streaming: the caller has gone")

// attempt reads one target's stream to its end.
func (r *relay) attempt(ctx context.Context, t Target) (err error) {
	prefill := ""
	if r.sent {
		prefill = r.res.Text
	}
	// The first-token limit runs from Open (a connection, a request, the
	// upstream's queue) to the first chunk, and ends the stream's context
	// — the one Open was given — when it runs out.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	firstToken := time.AfterFunc(r.cfg.FirstToken, func() { cancel(ErrFirstToken) })
	defer firstToken.Stop()
	s, err := t.Open(ctx, prefill)
	if err != nil {
		return fmt.Errorf("%s: %w", t.Name, limitOr(ctx, err))
	}
	defer s.Close()
	return r.read(ctx, t, s, firstToken, prefill)
}

// read reads one opened stream to its end: each chunk under the right
// limit (firstToken until the upstream says something, then the idle
// limit), its usage kept, a repeat of the prefill dropped, and what is left
// passed to the caller.
func (r *relay) read(ctx context.Context, t Target, s Stream, firstToken *time.Timer, prefill string) (err error) {
	deciding := prefill != "" // whether the continuation repeats the prefill is not known yet
	heard := ""               // what it said while it might be repeating: held back
	var limit time.Duration   // none of its own before the first chunk: firstToken is the limit
	served := false
	var held []Chunk // chunks that say nothing yet (the role), kept until one does
	var used *Usage  // the stream's last report: a running usage (vLLM's) is cumulative
	defer func() {
		if used != nil {
			r.res.Usage.PromptTokens += used.PromptTokens
			r.res.Usage.CompletionTokens += used.CompletionTokens
		}
	}()
	for {
		c, err := next(ctx, s, limit)
		switch {
		case err != nil && r.res.FinishReason != "" && ctx.Err() == nil:
			return nil // the answer had finished: only the usage was still to come
		case errors.Is(err, io.EOF):
			return fmt.Errorf("%s: %w", t.Name, ErrTruncated)
		case err != nil:
			return fmt.Errorf("%s: %w", t.Name, err)
		}
		if c.Text != "" || c.Other || c.FinishReason != "" {
			if !firstToken.Stop() && limit == 0 { // the limit ran out as this chunk came: it is late
				return fmt.Errorf("%s: %w", t.Name, ErrFirstToken)
			}
			limit = r.cfg.Idle // the upstream has said something: from now on, the idle limit
		}
		hadUsage := c.Usage != nil
		if hadUsage {
			u := *c.Usage
			used = &u
			c.Usage = nil // the caller is told the total, once (Result.Usage)
		}
		if r.res.FinishReason != "" && (c.Text != "" || c.Other || c.FinishReason != "") {
			if hadUsage {
				return nil // the usage after the finish: the answer is whole
			}
			continue // after the finish, a chunk is read only for its usage: what else it says is dropped
		}
		if deciding {
			var text string
			text, heard, deciding = dropEcho(prefill, heard, c)
			if text != c.Text {
				c.Text, c.Raw = text, nil // the upstream's bytes say other than the caller may read
			}
		}
		if c.Text == "" && !c.Other && c.FinishReason == "" {
			switch {
			case hadUsage && r.res.FinishReason != "":
				return nil // the usage after the last choice: the answer is whole
			case !hadUsage && !r.sent:
				held = append(held, c) // the role chunk: sent with the first that says something
			}
			continue // or a usage-only chunk, or one the echo used up
		}
		if err := r.release(t, held, &served); err != nil {
			return err
		}
		held = nil
		if err := r.emit(c); err != nil {
			return fmt.Errorf("%w: %w", errCallerGone, err)
		}
		if !served {
			r.res.Served = append(r.res.Served, t.Name)
			served = true
		}
		r.sent = true
		r.other = r.other || c.Other
		r.res.Text += c.Text
		if c.FinishReason != "" {
			r.res.FinishReason = c.FinishReason
		}
		if hadUsage && r.res.FinishReason != "" {
			return nil // the usage came with the finish: nothing is left to read
		}
	}
}

// release sends the chunks held back before t's first that says something
// (only ever before the first chunk reached the caller); once one is taken,
// t has served.
func (r *relay) release(t Target, held []Chunk, served *bool) error {
	for _, h := range held {
		if err := r.emit(h); err != nil {
			return fmt.Errorf("%w: %w", errCallerGone, err)
		}
		if !*served { // its role reached the caller, whatever comes next
			r.res.Served = append(r.res.Served, t.Name)
			*served = true
		}
	}
	return nil
}

// next reads one chunk, within the idle limit if there is one.
func next(ctx context.Context, s Stream, idle time.Duration) (Chunk, error) {
	if idle > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, idle, ErrIdle)
		defer cancel()
	}
	c, err := s.Next(ctx)
	if err == nil {
		err = ctx.Err() // a stream that answers after its context ended: the end comes first
	}
	if err != nil {
		return Chunk{}, limitOr(ctx, err)
	}
	return c, nil
}

// limitOr is the limit that ended ctx, if one did, or else err: a
// stream's error after its context ended says only that it ended.
func limitOr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrFirstToken) || errors.Is(cause, ErrIdle) {
		return cause
	}
	return err
}

// dropEcho reads the next chunk c of a continuation that may be repeating
// its prefill; heard is what it said so far, all of it a start of the
// prefill, held back. It returns the text to pass on, what is still held,
// and whether it is still undecided. A repeat is dropped only once it has
// covered the whole prefill: a continuation that merely begins like the
// prefill ("The" after "The cat sat.") gets what was held back, and its
// own text, passed on.
func dropEcho(prefill, heard string, c Chunk) (text, held string, undecided bool) {
	seen := heard + c.Text
	switch {
	case len(seen) < len(prefill) && strings.HasPrefix(prefill, seen) && c.FinishReason == "" && !c.Other:
		return "", seen, true // so far a repeat: hold it
	case strings.HasPrefix(seen, prefill):
		return seen[len(prefill):], "", false // the whole prefill repeated: drop it
	}
	return seen, "", false // not a repeat: pass on what was held too
}
