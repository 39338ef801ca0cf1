package router

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	streaming "github.com/production-go/gateway-lab/solutions/11-streaming"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A stream that breaks after its first byte — cut, stalled, or sending
// garbage — is continued, when its route allows, on the route's next
// target that declared it continues an assistant prefill: that target is
// sent the caller's request plus the answer so far as a last, assistant
// message, and the caller reads its chunks on as one answer (lab 11's
// Relay does the splice and drops a repeat of the prefill). Never:
//
//   - on a target the route did not declare (one that rejects the prefill
//     would turn a clean failure into its 400);
//   - when the answer so far holds anything but text (tool calls, a
//     refusal, reasoning, a second choice): a continuation would return
//     prose where a tool call was being written;
//   - when the request opted out (Request.NoContinue), is pinned to one
//     provider, asked for n > 1 answers, or ends with its own assistant
//     prefill;
//   - with an injected system prompt, or anything else the caller did not
//     send but the prefill itself.
//
// When no continuation completes, the caller's stream ends with the
// original failure (ErrAfterFirstByte), not with what a continuation said.

// ContinueOutcome is how a stream that broke after its first byte ended.
type ContinueOutcome string

// The outcomes Observer.Continued is given.
const (
	// ContinueCompleted: a continuation finished the answer.
	ContinueCompleted ContinueOutcome = "completed"
	// ContinueFailed: continuations were tried and none finished the answer.
	ContinueFailed ContinueOutcome = "failed"
	// ContinueNoTarget: the route has no healthy target after the broken
	// one that declared it continues a prefill.
	ContinueNoTarget ContinueOutcome = "no_target"
	// ContinueNotText: the answer so far held more than text.
	ContinueNotText ContinueOutcome = "not_text"
	// ContinueOptedOut: the request asked not to be continued.
	ContinueOptedOut ContinueOutcome = "opted_out"
)

// ContinueOutcomes lists every ContinueOutcome, for metrics that start
// each series at 0.
var ContinueOutcomes = []ContinueOutcome{ContinueCompleted, ContinueFailed, ContinueNoTarget, ContinueNotText, ContinueOptedOut}

// sofar is what reached the caller of a stream that may be continued.
type sofar struct {
	text     strings.Builder
	other    bool // anything but text, or a chunk that could not be read
	finished bool // a finish_reason reached the caller: the answer is whole
}

func (s *sofar) add(raw []byte) {
	p, err := chatapi.ReadPiece(raw)
	if err != nil || p.Other {
		s.other = true
		return
	}
	s.text.WriteString(p.Text)
	s.finished = s.finished || p.Finish != ""
}

// mayContinue reports whether a broken stream of req could be continued
// at all, so the streamer keeps the text it relays only when it might.
func mayContinue(req Request) bool {
	return len(req.Continue) > 0 && req.Provider == "" && req.Chat != nil && req.Chat.Choices <= 1 && req.Chat.Continuable()
}

// continueAfter tries to finish, on another target, the answer step s
// broke off with err after part of it reached the caller. handled is
// false when the request may not be continued (the caller's stream then
// ends as it would have); otherwise the error, if any, is what the
// caller's stream ends with.
func (st *streamer) continueAfter(ctx context.Context, run *run, s step, broke error) (c llm.Completion, err error, handled bool) {
	if st.sofar == nil || errors.Is(broke, errClientGone) || ctx.Err() != nil {
		return llm.Completion{}, nil, false
	}
	obs := run.r.obs
	switch {
	case run.req.NoContinue:
		obs.Continued(s.target, ContinueOptedOut)
		return llm.Completion{}, nil, false
	case st.sofar.other:
		obs.Continued(s.target, ContinueNotText)
		return llm.Completion{}, nil, false
	}
	targets := st.continuations(run, s)
	if len(targets) == 0 {
		obs.Continued(s.target, ContinueNoTarget)
		return llm.Completion{}, nil, false
	}
	sp := &splice{st: st, ctx: ctx, from: s}
	all := sp.targets(run, targets, broke)
	res, err := streaming.Relay(ctx, streaming.Config{FirstToken: st.limits.FirstToken, Idle: st.limits.Idle}, all, sp.emit)
	continued, last := len(res.Served) > 1, sp.last
	switch {
	case sp.gone:
		return llm.Completion{}, errClientGone, true // the caller left: not the continuation's failure
	case err == nil:
		obs.Continued(s.target, ContinueCompleted)
		u := usageOf(sp.opened, res.Usage)
		if run.req.Chat.IncludeUsage {
			if err := st.emit(llm.Chunk{Raw: chatapi.NewFrame(last.model).UsageChunk(u)}); err != nil {
				return llm.Completion{}, errClientGone, true
			}
		}
		run.broke, run.continuedOn = broke, &last.step
		return llm.Completion{Model: last.model, Usage: &u}, nil, true
	case ctx.Err() != nil && !continued:
		obs.Continued(s.target, ContinueFailed)
		return llm.Completion{}, broke, true // the caller left, or the deadline passed, during the attempts
	}
	obs.Continued(s.target, ContinueFailed)
	if !continued {
		err = broke // what the caller's stream was cut by, not what a continuation refused
	}
	return llm.Completion{}, err, true
}

// splice is one continuation of a broken stream, as lab 11's Relay runs
// it: the targets it is given and the caller's side of what it emits.
type splice struct {
	st   *streamer
	ctx  context.Context
	from step // the target that broke

	last    *continuation   // the stream whose chunk is being relayed
	opened  []*continuation // every continuation started, for their usage
	spliced bool            // a continuation's chunk reached the caller
	gone    bool            // the caller left
}

// targets are what the relay is given. The relay is told the caller
// already holds the text so far: a first "target" replays it (to the
// relay, not to the caller) and then fails as the broken stream did, so
// every later target is asked to continue.
func (sp *splice) targets(run *run, steps []step, broke error) []streaming.Target {
	all := make([]streaming.Target, 0, len(steps)+1)
	all = append(all, streaming.Target{Name: sp.from.target.String(), Open: func(context.Context, string) (streaming.Stream, error) {
		return &replayed{text: sp.st.sofar.text.String(), err: broke}, nil
	}})
	for _, t := range steps {
		all = append(all, streaming.Target{Name: t.target.String(), CanContinue: true,
			Open: func(ctx context.Context, prefill string) (streaming.Stream, error) {
				cs, err := sp.st.open(ctx, run, t, prefill)
				if err == nil {
					sp.last = cs
					sp.opened = append(sp.opened, cs)
				}
				return cs, err
			}})
	}
	return all
}

// emit passes a continuation's chunk to the caller: never the replay, nor
// a second role chunk; with its text rewritten where the relay changed it;
// a span event at the first one.
func (sp *splice) emit(ch streaming.Chunk) error {
	if bytes.Equal(ch.Raw, replayMarker) {
		return nil // the caller has it already
	}
	if ch.Text == "" && !ch.Other && ch.FinishReason == "" {
		return nil // a second role chunk: the caller had one from the broken stream
	}
	raw := ch.Raw
	if raw == nil { // the relay changed this chunk's text (a repeat of the prefill dropped, or held text added)
		var err error
		if raw, err = chatapi.WithDeltaText(sp.last.raw, ch.Text); err != nil {
			return err
		}
	}
	if !sp.spliced {
		sp.spliced = true
		trace.SpanFromContext(sp.ctx).AddEvent("gateway.stream.continued", trace.WithAttributes(
			attribute.String("gateway.continued.from", sp.from.target.String()),
			attribute.String("gateway.continued.to", sp.last.step.target.String()),
			attribute.Int("gateway.continued.at_chars", sp.st.sofar.text.Len())))
	}
	if err := sp.st.emit(llm.Chunk{Raw: raw}); err != nil {
		sp.gone = true
		return errClientGone
	}
	return nil
}

// usageOf is what the continued answer used: the sum of what each
// continuation's upstream reported for its call (an upstream reports it
// even when the usage chunk is not the caller's to read), or, if none did,
// what the relay read in chunks. The broken stream reported nothing: its
// reservation pays for it (see guard.Meter).
func usageOf(opened []*continuation, read streaming.Usage) llm.Usage {
	var u llm.Usage
	for _, c := range opened {
		if r := c.res.Usage; r != nil {
			u.PromptTokens += r.PromptTokens
			u.CompletionTokens += r.CompletionTokens
		}
	}
	if u.PromptTokens+u.CompletionTokens == 0 {
		u.PromptTokens, u.CompletionTokens = read.PromptTokens, read.CompletionTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// continuations are the route's other targets that declared they continue
// a prefill, in route order starting after s, leaving out any this request
// has tried already (one that just failed it is a poor place to go on).
func (st *streamer) continuations(run *run, s step) []step {
	steps := run.plan.steps
	at := 0
	for i := range steps {
		if steps[i].target == s.target {
			at = i
		}
	}
	var out []step
	for i := 1; i < len(steps); i++ {
		k := (at + i) % len(steps)
		if t := steps[k]; t.continues && t.direct && t.target != s.target && !run.plan.tried[k] {
			out = append(out, t)
		}
	}
	return out
}

// open starts a continuation on t: its breaker and the retry budget must
// allow it; its outcome goes to both, the Observer and a span, when the
// relay closes it.
func (st *streamer) open(ctx context.Context, run *run, t step, prefill string) (*continuation, error) {
	r := run.r
	done, err := t.health.Allow()
	if err != nil {
		return nil, err
	}
	if r.cfg.RetryBudget != nil && !r.cfg.RetryBudget.Withdraw(t.target.Provider) {
		done(context.Canceled) // not asked: nothing to say of its health
		r.obs.RetryRefused(t.target.Provider)
		return nil, fmt.Errorf("%w for %s", ErrRetryBudgetExhausted, t.target.Provider)
	}
	chat := run.req.Chat // nothing reached the caller but a role: a fresh answer
	if prefill != "" {
		if chat, err = chat.WithPrefill(prefill, llm.PrefillStyle(t.provider)); err != nil {
			done(context.Canceled)
			return nil, err
		}
	}
	run.continuations++
	n := run.continuations
	ctx, span := r.attemptSpan(ctx, t.target, n)
	ctx, cancel := context.WithCancel(ctx)
	c := &continuation{step: t, model: t.target.Model, chunks: make(chan []byte), ended: make(chan struct{}), cancel: cancel, start: time.Now()}
	c.report = func(err error) {
		endAttemptSpan(span, err)
		r.obs.Attempt(t.target, n, time.Since(c.start), err)
		verdict := breakerVerdict(err)
		if r.cfg.IsolateTenantFailures {
			if err == nil {
				t.streak.reset()
			} else {
				verdict = t.streak.verdict(run.req.Tenant, err, verdict)
			}
		}
		done(verdict)
	}
	go func() {
		defer close(c.ended)
		res, err := llm.Stream(ctx, t.provider, llm.Request{Chat: chat, Model: t.target.Model}, func(ch llm.Chunk) error {
			select {
			case c.chunks <- ch.Raw:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		c.res, c.err = res, err
	}()
	return c, nil
}

// continuation is one continuing target's stream, as lab 11's Relay reads
// it: the provider pushes chunks from a goroutine of its own, which Close
// ends and waits for.
type continuation struct {
	step   step
	model  string
	chunks chan []byte
	ended  chan struct{} // closed when the provider's call has returned
	cancel context.CancelFunc
	start  time.Time
	report func(error)

	raw       []byte         // the chunk last returned by Next
	res       llm.Completion // the call's, once ended is closed
	err       error
	nextErr   error // what Next last failed with: the relay's limits
	sawFinish bool  // a chunk with a finish reason came: the answer was whole
	closed    bool
}

func (c *continuation) Next(ctx context.Context) (streaming.Chunk, error) {
	select {
	case raw := <-c.chunks:
		p, err := chatapi.ReadPiece(raw)
		if err != nil {
			c.nextErr = fmt.Errorf("%w: %s", streaming.ErrMalformed, c.step.target)
			return streaming.Chunk{}, c.nextErr
		}
		c.raw = raw
		c.sawFinish = c.sawFinish || p.Finish != ""
		ch := streaming.Chunk{Text: p.Text, Other: p.Other, FinishReason: p.Finish, Raw: raw}
		if p.Usage != nil {
			ch.Usage = &streaming.Usage{PromptTokens: p.Usage.PromptTokens, CompletionTokens: p.Usage.CompletionTokens}
		}
		return ch, nil
	case <-c.ended:
		if c.err != nil {
			return streaming.Chunk{}, c.err
		}
		return streaming.Chunk{}, io.EOF
	case <-ctx.Done():
		c.nextErr = context.Cause(ctx)
		return streaming.Chunk{}, c.nextErr
	}
}

// Close ends the provider's call, waits for its goroutine and reports how
// the attempt went.
func (c *continuation) Close() error {
	if c.closed {
		return nil
	}
	c.closed = true
	c.cancel()
	<-c.ended
	err := c.err
	switch {
	case errors.Is(c.nextErr, streaming.ErrFirstToken):
		err = fmt.Errorf("%w: %s", ErrFirstTokenTimeout, c.step.target)
	case errors.Is(c.nextErr, streaming.ErrIdle):
		err = fmt.Errorf("%w: %s", ErrStreamIdle, c.step.target)
	case c.nextErr != nil && !errors.Is(c.nextErr, context.Canceled):
		err = c.nextErr
	case c.sawFinish && errors.Is(err, context.Canceled):
		err = nil // the relay had the whole answer and hung up on the rest ([DONE], say)
	}
	if c.res.Model != "" {
		c.model = c.res.Model
	}
	c.report(err)
	return nil
}

// replayMarker is the Raw of the chunk replayed stands for: the text the
// caller already has, which the relay must count and the caller must not
// be sent again.
var replayMarker = []byte("\x00replayed")

// replayed is the broken stream as the relay sees it: the text the caller
// already read, as one chunk, then the failure that broke it.
type replayed struct {
	text string
	err  error
	done bool
}

func (r *replayed) Next(context.Context) (streaming.Chunk, error) {
	if r.done {
		return streaming.Chunk{}, r.err
	}
	r.done = true
	return streaming.Chunk{Text: r.text, Raw: replayMarker}, nil
}

func (r *replayed) Close() error { return nil }
