package router

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	timeouts "github.com/production-go/gateway-lab/solutions/03-timeouts"
	bridge "github.com/production-go/gateway-lab/solutions/06-bridge"
)

// StreamLimits bound a stream where a whole-request timeout cannot: an
// upstream that accepts the connection and then says nothing.
type StreamLimits struct {
	// FirstToken bounds the wait for the first chunk of an attempt
	// (time to first token). Before the first chunk a failure may still
	// fall back to another target.
	FirstToken time.Duration
	// Idle bounds the gap between two chunks.
	Idle time.Duration
}

var (
	// ErrFirstTokenTimeout: no chunk arrived within StreamLimits.FirstToken.
	// It wraps context.DeadlineExceeded: a timeout of the attempt, retryable.
	ErrFirstTokenTimeout = fmt.Errorf("router: no first token in time: %w", context.DeadlineExceeded)
	// ErrStreamIdle: the stream went silent for longer than StreamLimits.Idle.
	ErrStreamIdle = fmt.Errorf("router: stream went idle: %w", context.DeadlineExceeded)
	// ErrAfterFirstByte wraps a failure that happened after the client had
	// received part of the answer and that no continuation finished: the
	// router never starts another answer then, and the caller must end the
	// stream with an error, not a clean end.
	ErrAfterFirstByte = errors.New("router: stream failed after the first byte")
	// ErrNothingSaid: an attempt sent more chunks that say nothing (roles,
	// annotations, running usages) before its first that does than the
	// router holds back; the upstream's failure, like a malformed chunk.
	ErrNothingSaid = errors.New("router: the upstream sent too many chunks that said nothing")
	// ErrUnfinished: a continuation's call ended without error before its
	// answer sent a finish_reason — the rest of the answer did not come.
	ErrUnfinished = errors.New("router: the stream ended before the answer finished")
)

// Stream is Generate for streamed answers: the same admission and retries,
// with one rule more. Until the first chunk reaches emit, a failed attempt
// may fall back to the next target; after it, no other target may start
// an answer of its own. A failure then is continued, where the route
// declares a target that continues an assistant prefill (Route.Continue;
// see continue.go), and otherwise ends the stream with an error wrapping
// ErrAfterFirstByte — never a silent switch mid-answer. A failure after
// the answer's finish reason ends it whole. A provider that cannot stream answers whole,
// and its answer reaches emit as chunks. A provider that does not honour
// its context streams through the bridge and its chunks reach emit once
// its call has returned, so its whole answer must come within the
// first-token limit.
func (r *Router) Stream(ctx context.Context, req Request, limits StreamLimits, emit func(llm.Chunk) error) (Response, error) {
	if limits.FirstToken <= 0 || limits.Idle <= 0 {
		return Response{}, fmt.Errorf("%w: stream limits must be positive", ErrInvalidConfig)
	}
	st := &streamer{limits: limits, emit: emit, keep: mayContinue(req), choices: 1}
	if req.Chat != nil {
		st.choices = min(max(req.Chat.Choices, 1), 64) // Piece.Ended knows the first 64
	}
	// No per-attempt timeout: a healthy stream may run long. The watchdog
	// bounds the silence instead, and TotalTimeout bounds the whole.
	return r.serve(ctx, req, 0, st)
}

// streamer is one streamed request's side of the router: every upstream
// call it makes — its attempts, and the continuations of a broken one —
// runs through once, and each chunk is read once, in pass.
type streamer struct {
	limits   StreamLimits
	emit     func(llm.Chunk) error
	keep     bool // the request may be continued: keep the text the caller read
	choices  int  // the answers the caller asked for (n), each of which must finish
	told     told
	reported llm.Usage // what the upstreams of a continued stream reported, summed
}

// told is what reached the caller, over every upstream call.
type told struct {
	text     strings.Builder // kept only when the request may be continued
	other    bool            // anything but text, or a chunk that could not be read
	finished bool            // every choice's finish_reason reached the caller: the answer is whole
	ended    uint64          // the choices whose finish_reason reached the caller, by index
	sent     bool            // a chunk reached the caller: the fallback window is closed
	pieces   int             // chunks with text that reached the caller
	spliced  bool            // a continuation's chunk reached the caller
}

// leg is one upstream call's part of a stream: an attempt's, or a
// continuation's.
type leg struct {
	from, to  *step // a continuation's broken target and its own; nil for an attempt
	prefill   string
	deciding  bool     // whether the continuation repeats its prefill is not known yet
	heard     string   // what it said while it might be repeating: held back
	held      [][]byte // an attempt's chunks that said nothing yet (the role, an annotation, a usage), sent with the first that does
	heldBytes int
	sent      bool // a chunk of this call reached the caller
	finished  bool // this call sent a finish_reason
	usage     llm.Usage
	prior     llm.Usage // what attempts before this one were charged: added to the usage it tells
	pieces    int       // chunks with text of this call that reached the caller
	bytes     int       // and their text's bytes
}

func (st *streamer) attempt(ctx context.Context, run *run, s step, req llm.Request) (llm.Completion, error) {
	l := &leg{prior: run.prior}
	c, err := st.once(ctx, run.r, s, req, l)
	if err != nil && st.told.finished && !errors.Is(err, errClientGone) {
		return c, nil // the answer had finished; only [DONE] or the usage was still to come
	}
	if err != nil && l.sent {
		// The client has part of an answer: only a target that continues
		// it may add to it, and no other target may start over.
		st.reported = reported(c, l)
		run.brokeAt = time.Now() // this call's own duration ends here, whatever continues it
		if c, err, handled := st.continueAfter(ctx, run, s, err, addUsage(run.prior, spent(c, l))); handled {
			if err != nil {
				return c, timeouts.Permanent(fmt.Errorf("%w: %s: %w", ErrAfterFirstByte, s.target, err))
			}
			return c, nil
		}
		return c, timeouts.Permanent(fmt.Errorf("%w: %s: %w", ErrAfterFirstByte, s.target, err))
	}
	return c, err
}

// The most an attempt's chunks that say nothing are held before its first
// that does: a role and a few annotations take a handful; past these the
// upstream is not starting an answer.
const (
	maxHeld      = 64
	maxHeldBytes = 64 << 10
)

// errClientGone marks an attempt ended because the client stopped reading.
// It wraps context.Canceled, so the provider's breaker does not count it.
var errClientGone = fmt.Errorf("router: client stopped reading: %w", llm.ErrCallerGone)

// once makes one streaming call under the watchdog. Only the request's own
// goroutine ever writes to the client: a provider that honours its context
// streams on it; any other streams through the bridge, where an attempt
// that gives up on it can leave it behind, into a buffer this goroutine
// relays once the call has returned — so the writer is never in its hands.
func (st *streamer) once(ctx context.Context, r *Router, s step, req llm.Request, l *leg) (c llm.Completion, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	w := newWatchdog(st.limits, cancel)
	defer w.stop()
	relay := func(ch llm.Chunk) error {
		if len(ch.Raw) == 0 {
			return nil // nothing for the client: not a first byte
		}
		out, err := st.pass(ctx, l, ch)
		if err != nil {
			return err
		}
		if out.Raw == nil && l.to == nil && !l.sent {
			// Held, saying nothing yet: not the first token, so the
			// first-token limit runs on (an upstream that drips roles and
			// annotations has not started its answer).
			return nil
		}
		if err := w.chunk(ctx); err != nil {
			return err // the watchdog ended this call first
		}
		if out.Raw != nil {
			err = st.flush(l)
		}
		if out.Raw != nil && err == nil {
			err = st.emit(out)
		}
		w.rearm()
		if err != nil {
			cancel(errClientGone)
			return errClientGone
		}
		if out.Raw != nil {
			st.tell(l, *out.Piece)
		}
		return nil
	}
	if s.direct {
		c, err = llm.Stream(ctx, s.provider, req, relay)
	} else {
		var kept []llm.Chunk // the bridge's goroutine writes it; this one reads it only once that call has returned
		c, err = bridge.Call(ctx, r.calls, func(context.Context) (llm.Completion, error) {
			return llm.Stream(ctx, s.provider, req, func(ch llm.Chunk) error { kept = append(kept, ch); return nil })
		})
		for i := 0; err == nil && i < len(kept); i++ {
			err = relay(kept[i])
		}
	}
	if err == nil && len(l.held) > 0 { // an answer of a role alone is still an answer
		if err = st.flush(l); err != nil {
			err = errClientGone
		}
	}
	if cause := context.Cause(ctx); cause != nil && errors.Is(err, context.Canceled) {
		// The provider saw only "canceled"; the cause says why. A watchdog
		// timeout is the provider's failure (its breaker counts it); a
		// client that left is not (errClientGone wraps Canceled).
		err = cause
	}
	return c, err
}

// flush sends the chunks l held back, in order.
func (st *streamer) flush(l *leg) error {
	for _, raw := range l.held {
		if err := st.emit(llm.Chunk{Raw: raw}); err != nil {
			return err
		}
	}
	l.held = nil
	return nil
}

// tell records what a chunk that reached the caller said.
func (st *streamer) tell(l *leg, p chatapi.Piece) {
	l.sent = true
	l.finished = l.finished || p.Finish != ""
	if p.Text != "" {
		l.pieces++
		l.bytes += len(p.Text)
	}
	t := &st.told
	t.sent = true
	if st.keep && p.Text != "" {
		t.text.WriteString(p.Text)
		t.pieces++
	}
	t.other = t.other || p.Other
	t.ended |= p.Ended
	t.finished = bits.OnesCount64(t.ended) >= st.choices
}

// spent is what one call of a continued stream cost, as the caller is to
// be told it: what a billing middleware charged for it, where one did
// (llm.Completion.Charged); else the usage its upstream reported, or that
// its chunks said, with never fewer completion tokens than the caller had
// from it.
func spent(c llm.Completion, l *leg) llm.Usage {
	if c.Charged != nil {
		return *c.Charged
	}
	u := l.usage
	if c.Usage != nil {
		u = *c.Usage
	}
	u.CompletionTokens = max(u.CompletionTokens, tokens(l.pieces, l.bytes))
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// reported is what a call's upstream said it used: its report, or what its
// chunks said; the metrics count reports (gateway_tokens_total), where the
// caller is told what was spent.
func reported(c llm.Completion, l *leg) llm.Usage {
	u := l.usage
	if c.Usage != nil {
		u = *c.Usage
	}
	return u
}

// tokens is how many tokens of answer pieces chunks of text bytes hold,
// counted high, so that what a continuation is allowed never takes the
// caller past its limit and the usage it is told is never short of what
// it read: upstreams stream about a token a chunk, and English text runs
// about four bytes a token; the larger of the two.
func tokens(pieces, bytes int) int {
	return max(pieces, (bytes+3)/4)
}

// tokens is how many tokens of answer the caller has been sent.
func (t *told) tokens() int { return tokens(t.pieces, t.text.Len()) }

// pass reads a chunk, once, and says what of it the caller gets: the
// chunk, a chunk rewritten, or nothing (Raw nil). An attempt passes every
// chunk on as it came; a chunk it cannot read marks the answer as one
// that cannot be continued. A continuation passes on only what adds to
// the answer (see splice).
func (st *streamer) pass(ctx context.Context, l *leg, ch llm.Chunk) (llm.Chunk, error) {
	p, err := llm.PieceOf(ch)
	switch {
	case l.to != nil && err != nil:
		return llm.Chunk{}, fmt.Errorf("%w: %s", chatapi.ErrMalformedChunk, l.to.target)
	case err != nil:
		p = chatapi.Piece{Other: true}
	}
	if p.Usage != nil {
		l.usage = *p.Usage
	}
	if l.to != nil {
		return st.splice(ctx, l, ch.Raw, p)
	}
	raw := ch.Raw
	if p.Usage != nil && l.prior != (llm.Usage{}) { // the caller is told the request's whole cost
		if told, err := chatapi.WithUsageAdded(raw, l.prior); err == nil {
			raw = told
			u := addUsage(*p.Usage, l.prior)
			p.Usage = &u
		}
	}
	if !st.told.sent && p.Text == "" && !p.Other && p.Finish == "" {
		// A chunk that says nothing (the role, an annotation, a usage so
		// far) does not close the fallback window: it is held, with any
		// before it, until one that does, and lost with an attempt that
		// fails first.
		if l.heldBytes += len(ch.Raw); len(l.held) >= maxHeld || l.heldBytes > maxHeldBytes {
			return llm.Chunk{}, fmt.Errorf("%w: more than %d chunks or %d bytes", ErrNothingSaid, maxHeld, maxHeldBytes)
		}
		l.held = append(l.held, raw)
		return llm.Chunk{}, nil
	}
	return llm.Chunk{Raw: raw, Piece: &p}, nil
}

// watchdog ends a streaming attempt that goes silent: no first chunk within
// FirstToken, or no next chunk within Idle of the last. Each chunk and the
// timer race for one lock, and whichever takes it first decides: a chunk
// that wins moves the deadline (the timer, if it fired meanwhile, finds the
// deadline not reached and does nothing); a timer that wins cancels the
// attempt, and the chunk is never sent. So a chunk is never sent and then
// cut for being late.
type watchdog struct {
	limits StreamLimits
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	deadline time.Time // zero while a chunk is being sent: the client's pace is not the upstream's silence
	spoke    bool      // a chunk came: the idle limit applies, not the first-token one
	timer    *time.Timer
}

func newWatchdog(limits StreamLimits, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{limits: limits, cancel: cancel, deadline: time.Now().Add(limits.FirstToken)}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = time.AfterFunc(limits.FirstToken, w.fire)
	return w
}

func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.deadline.IsZero() || time.Now().Before(w.deadline) {
		return // a chunk got the lock first and moved the deadline
	}
	if w.spoke {
		w.cancel(ErrStreamIdle)
	} else {
		w.cancel(ErrFirstTokenTimeout)
	}
}

// chunk claims the right to send one chunk, unless the timer already cut
// the call; a chunk the caller is not sent claims it too (the upstream
// spoke), and rearm follows at once.
func (w *watchdog) chunk(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	w.spoke = true
	w.deadline = time.Time{}
	return nil
}

// rearm starts the idle limit after a chunk went out.
func (w *watchdog) rearm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deadline = time.Now().Add(w.limits.Idle)
	w.timer.Reset(w.limits.Idle)
}

func (w *watchdog) stop() { w.timer.Stop() }
