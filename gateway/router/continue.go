package router

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// A stream that breaks after its first byte — cut, stalled, or sending
// garbage — is continued, when its route allows, on the route's next
// target that declared it continues an assistant prefill: that target is
// sent the caller's request plus the answer so far as a last, assistant
// message, and the caller reads its chunks on as one answer, with a
// repeat of the prefill dropped — lab 11's lesson, in the router's own
// stream engine (stream.go), where every upstream call of a stream runs
// through one watchdog and each chunk is read once. Never:
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
	// ContinueAtLimit: the caller had its max_tokens of answer already;
	// the answer ends there, with finish_reason "length", as it would have.
	ContinueAtLimit ContinueOutcome = "at_limit"
)

// ContinueOutcomes lists every ContinueOutcome, for metrics that start
// each series at 0.
var ContinueOutcomes = []ContinueOutcome{ContinueCompleted, ContinueFailed, ContinueNoTarget, ContinueNotText, ContinueOptedOut, ContinueAtLimit}

// mayContinue reports whether a broken stream of req could be continued
// at all, so the streamer keeps the text it relays only when it might.
func mayContinue(req Request) bool {
	return req.Route != nil && len(req.Route.Continue) > 0 && req.Provider == "" && req.Chat != nil && req.Chat.Choices <= 1 && req.Chat.Continuable()
}

// continueAfter tries to finish, on another target, the answer step s
// broke off with err after part of it reached the caller. handled is
// false when the request may not be continued (the caller's stream then
// ends as it would have); otherwise the error, if any, is what the
// caller's stream ends with. Each continuation starts from all the caller
// has read, so one that breaks in turn is continued by the next.
func (st *streamer) continueAfter(ctx context.Context, run *run, s step, broke error, cost llm.Usage) (c llm.Completion, err error, handled bool) {
	if !st.keep || errors.Is(broke, errClientGone) || ctx.Err() != nil {
		return llm.Completion{}, nil, false
	}
	obs := run.r.obs
	switch {
	case run.req.NoContinue:
		obs.Continued(s.target, ContinueOptedOut)
		return llm.Completion{}, nil, false
	case st.told.other:
		obs.Continued(s.target, ContinueNotText)
		return llm.Completion{}, nil, false
	}
	targets := st.continuations(run, s)
	if len(targets) == 0 {
		obs.Continued(s.target, ContinueNoTarget)
		return llm.Completion{}, nil, false
	}
	used := []llm.Usage{cost} // what each call that ran used: the broken one, then each continuation
	if limit := run.req.Chat.AnswerLimit(); limit > 0 && st.told.tokens() >= limit {
		return st.atLimit(run, s, broke, used)
	}
	last := broke
	outcome := ContinueNoTarget // until a target's breaker lets a continuation through
	for i := 0; i < len(targets) && ctx.Err() == nil && !st.told.other; i++ {
		if limit := run.req.Chat.AnswerLimit(); i > 0 && limit > 0 && st.told.tokens() >= limit {
			return st.atLimit(run, s, broke, used) // a continuation wrote up to the limit, then broke
		}
		t := &targets[i]
		c, u, err := st.continueOn(ctx, run, s, t)
		used = append(used, u...)
		switch {
		case errors.Is(err, errClientGone):
			return llm.Completion{}, errClientGone, true // the caller left: not the continuation's failure
		case err == nil:
			return st.finish(run, s, t, broke, c, used)
		case !errors.Is(err, breaker.ErrOpen):
			outcome = ContinueFailed
		}
		last = err
	}
	obs.Continued(s.target, outcome)
	if !st.told.spliced {
		last = broke // what the caller's stream was cut by, not what a continuation refused
	}
	return llm.Completion{}, last, true
}

// finish ends a stream a continuation on t finished: the caller is told
// the usage once, if it asked, and the attempt on s is recorded as broken.
func (st *streamer) finish(run *run, s step, t *step, broke error, c llm.Completion, used []llm.Usage) (llm.Completion, error, bool) {
	run.r.obs.Continued(s.target, ContinueCompleted)
	return st.whole(run, broke, t, cmp.Or(c.Model, t.target.Model), used)
}

// atLimit ends an answer that broke once the caller had all the answer it
// asked for: with the finish the upstream would have sent.
func (st *streamer) atLimit(run *run, s step, broke error, used []llm.Usage) (llm.Completion, error, bool) {
	run.r.obs.Continued(s.target, ContinueAtLimit)
	if err := st.emit(llm.Chunk{Raw: chatapi.NewFrame(s.target.Model).Chunk(chatapi.Delta{}, "length")}); err != nil {
		return llm.Completion{}, errClientGone, true
	}
	return st.whole(run, broke, &s, s.target.Model, used)
}

// whole ends a broken stream as a whole answer from the caller's side:
// the caller is told, if it asked, the usage of every call that wrote it,
// summed — what the tenant is charged (see streamer.cost) — and the
// attempt is recorded as broken, the answer as finished on t.
func (st *streamer) whole(run *run, broke error, t *step, model string, used []llm.Usage) (llm.Completion, error, bool) {
	u := sumUsage(used)
	if run.req.Chat.IncludeUsage {
		if err := st.emit(llm.Chunk{Raw: chatapi.NewFrame(model).UsageChunk(u)}); err != nil {
			return llm.Completion{}, errClientGone, true
		}
	}
	run.broke, run.continuedOn = broke, t
	r := st.reported
	r.TotalTokens = r.PromptTokens + r.CompletionTokens
	return llm.Completion{Model: model, Usage: &r}, nil, true // what the upstreams reported, for the metrics
}

// continueOn asks t for the rest of the answer the caller holds: its
// breaker and the retry budget must allow it, and its outcome goes to
// both, the Observer and a span. It returns the usage the call reported,
// if it ran.
func (st *streamer) continueOn(ctx context.Context, run *run, from step, t *step) (llm.Completion, []llm.Usage, error) {
	r := run.r
	done, err := t.health.Allow()
	if err != nil {
		return llm.Completion{}, nil, err
	}
	if r.cfg.RetryBudget != nil && !r.cfg.RetryBudget.Withdraw(t.target.Provider) {
		done(errNeutral) // not asked: nothing to say of its health
		r.obs.RetryRefused(t.target.Provider)
		return llm.Completion{}, nil, fmt.Errorf("%w for %s", ErrRetryBudgetExhausted, t.target.Provider)
	}
	prefill := st.told.text.String()
	chat := run.req.Chat // nothing reached the caller but a role: a fresh answer
	if prefill != "" {
		if chat, err = chat.WithPrefill(prefill, llm.PrefillStyle(t.provider)); err != nil {
			done(errNeutral)
			return llm.Completion{}, nil, err
		}
		// The rest of the answer, not a second one: what is left of the
		// caller's max_tokens.
		chat = chat.WithAnswerSent(st.told.tokens())
	}
	run.continuations++
	n := run.continuations
	// A call of its own: its span is the request's child, like every
	// attempt's, not the broken attempt's.
	actx, span := r.attemptSpan(trace.ContextWithSpan(ctx, trace.SpanFromContext(run.caller)), t.target, n)
	start := time.Now()
	l := &leg{from: &from, to: t, prefill: prefill, deciding: prefill != ""}
	c, err := st.once(actx, r, *t, llm.Request{Chat: chat, Model: t.target.Model, Meter: run.req.Meter}, l)
	switch {
	case err != nil && l.finished && !errors.Is(err, errClientGone):
		err = nil // the answer was whole; only [DONE] or the usage was still to come
	case err == nil && !l.finished:
		err = fmt.Errorf("%w: %s", ErrUnfinished, t.target)
	}
	endAttemptSpan(span, err)
	r.obs.Attempt(t.target, n, time.Since(start), err)
	verdict := breakerVerdict(err)
	if r.cfg.Health.IsolateTenantFailures {
		if err == nil {
			t.streak.reset()
		} else {
			verdict = t.streak.verdict(run.req.Tenant, err, verdict)
		}
	}
	done(verdict)
	st.reported = addUsage(st.reported, reported(c, l))
	return c, []llm.Usage{spent(c, l)}, err
}

// splice is pass for a continuation: a chunk reaches the caller only if
// it adds to the answer — never a role (the caller has one), a chunk that
// says nothing, a usage of the continuation's own call (the caller is told
// the whole, once: a chunk that carries one with text has it nulled), or a
// repeat of the prefill; text held back while the continuation might be
// repeating it is sent with the first chunk that shows it is not.
func (st *streamer) splice(ctx context.Context, l *leg, raw []byte, p chatapi.Piece) (llm.Chunk, error) {
	if l.deciding {
		var text string
		text, l.heard, l.deciding = dropEcho(l.prefill, l.heard, p)
		if text != p.Text {
			var err error
			if raw, err = withText(raw, text, p, l.to.target.Model); err != nil {
				return llm.Chunk{}, fmt.Errorf("%w: %s", err, l.to.target)
			}
			p.Text = text
		}
	}
	if p.Text == "" && !p.Other && p.Finish == "" {
		return llm.Chunk{}, nil
	}
	if p.Usage != nil { // the caller is told the whole answer's usage, once, at the end
		var err error
		if raw, err = chatapi.WithoutUsage(raw); err != nil {
			return llm.Chunk{}, fmt.Errorf("%w: %s", err, l.to.target)
		}
		p.Usage = nil
	}
	if !st.told.spliced {
		st.told.spliced = true
		trace.SpanFromContext(ctx).AddEvent("gateway.stream.continued", trace.WithAttributes(
			attribute.String("gateway.continued.from", l.from.target.String()),
			attribute.String("gateway.continued.to", l.to.target.String()),
			attribute.Int("gateway.continued.at_chars", len(l.prefill))))
	}
	return llm.Chunk{Raw: raw, Piece: &p}, nil
}

// withText is raw with its text replaced: in place where it has a string
// delta.content, or rebuilt as a text chunk with raw's finish where it has
// none (held text that comes out with a bare finish).
func withText(raw []byte, text string, p chatapi.Piece, model string) ([]byte, error) {
	if p.Text != "" || p.Other {
		return chatapi.WithDeltaText(raw, text) // never drop what else it carries
	}
	return chatapi.NewFrame(model).Chunk(chatapi.Delta{Content: &text}, p.Finish), nil
}

// dropEcho reads the next piece p of a continuation that may be repeating
// its prefill; heard is what it said so far, all of it a start of the
// prefill, held back. It returns the text to pass on, what is still held,
// and whether it is still undecided. A repeat is dropped only once it has
// covered the whole prefill: a continuation that merely begins like the
// prefill ("The" after "The cat sat.") gets what was held back, and its
// own text, passed on.
func dropEcho(prefill, heard string, p chatapi.Piece) (text, held string, undecided bool) {
	seen := heard + p.Text
	switch {
	case len(seen) < len(prefill) && strings.HasPrefix(prefill, seen) && p.Finish == "" && !p.Other:
		return "", seen, true
	case strings.HasPrefix(seen, prefill):
		return seen[len(prefill):], "", false
	}
	return seen, "", false
}

// sumUsage is what the continued answer used: the sum over its calls of
// what each upstream reported for its call (an upstream reports it even
// when the usage chunk is not the caller's to read), or, where one did not,
// what its chunks said; for the call that broke, see streamer.cost.
func sumUsage(used []llm.Usage) llm.Usage {
	var u llm.Usage
	for _, r := range used {
		u.PromptTokens += r.PromptTokens
		u.CompletionTokens += r.CompletionTokens
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
