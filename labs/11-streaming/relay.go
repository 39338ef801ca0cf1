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
	"time"
)

// ErrNotImplemented is what the stub returns until you write it.
var ErrNotImplemented = errors.New("lab 11: not implemented yet")

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
	// TODO(lab 11): write it. The comment above is the contract.
	return Result{}, ErrNotImplemented
}
