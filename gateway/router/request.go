package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	timeouts "github.com/production-go/gateway-lab/solutions/03-timeouts"
	bridge "github.com/production-go/gateway-lab/solutions/06-bridge"
)

// Generate runs one request through the whole path (see the package doc)
// for a whole answer. Errors wrap the sentinels in router.go, the last
// provider error, and context.DeadlineExceeded when the total deadline ran
// out.
func (r *Router) Generate(ctx context.Context, req Request) (Response, error) {
	return r.serve(ctx, req, r.cfg.Retry.AttemptTimeout, nil)
}

// serve is the request skeleton Generate and Stream share, so the two
// cannot drift apart: admission, the retry loop over the plan's targets,
// the Response, and the slot given back whatever happens.
func (r *Router) serve(ctx context.Context, req Request, attemptTimeout time.Duration, st *streamer) (Response, error) {
	run := &run{r: r, req: req, stream: st, caller: ctx}
	if err := r.admitted(ctx, run); err != nil {
		return Response{}, err
	}
	defer run.release() // whatever happens below: success, error, panic, cancellation
	run.deadline = time.Now().Add(r.cfg.Retry.TotalTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(run.deadline) {
		run.deadline = d
	}
	attempts, err := run.retry(ctx, r.policy(run.plan.pinned, attemptTimeout))
	if err == nil && st == nil {
		run.tellPrior()
	}
	resp := Response{Provider: run.used.target.Provider, Model: run.answer.Model, Raw: run.answer.Raw, Usage: run.answer.Usage,
		Attempts: attempts, QueueWait: run.ticket.QueueWait, Latency: time.Since(run.at), Upstream: run.upstream, Backoff: run.backoff}
	if err == nil && resp.Model == "" {
		resp.Model = run.used.target.Model
	}
	return resp, err
}

// retry runs the request's attempts: lab 03's timeouts.Do, with one
// saving on the way in. The first attempt runs under a single context
// whose deadline is the sooner of the attempt's and the total's — the two
// Do would layer, one inside the other — and only a request whose first
// attempt fails hands the loop to Do, under the total deadline, with that
// first outcome replayed as Do's attempt 1: what the failure means, the
// backoff and the attempts after it are Do's. Most requests take one
// attempt; they pay for one context instead of two (BenchmarkGenerate
// direct: 13 allocations to 8; docs/performance.md).
func (run *run) retry(ctx context.Context, p timeouts.Policy) (int, error) {
	if ctx.Err() != nil || !time.Now().Before(run.deadline) {
		return timeouts.Do(ctx, p, run.attempt) // Do says why there is no attempt
	}
	deadline := run.deadline
	if p.AttemptTimeout > 0 {
		if d := time.Now().Add(p.AttemptTimeout); d.Before(deadline) {
			deadline = d
		}
	}
	actx, cancel := context.WithDeadline(ctx, deadline)
	first := run.attempt(actx, 1)
	cancel()
	if first == nil {
		return 1, nil
	}
	total, cancelTotal := context.WithDeadline(ctx, run.deadline)
	defer cancelTotal()
	p.TotalTimeout = 0 // total carries it, counted from the first attempt
	replayed := false
	attempts, err := timeouts.Do(total, p, func(ctx context.Context, n int) error {
		if n == 1 {
			replayed = true
			return first
		}
		return run.attempt(ctx, n)
	})
	if !replayed {
		// The caller left, or the total deadline passed, between the
		// first attempt's end and Do's look before its attempt 1.
		return 1, fmt.Errorf("%w (attempt 1: %w)", err, first)
	}
	return attempts, err
}

// run is one request in flight: what admission gave it, its plan over the
// targets, and its attempts so far. One allocation per request holds it all.
type run struct {
	r      *Router
	req    Request
	stream *streamer       // nil for Generate: Generate and Stream differ only in the attempt
	caller context.Context // the caller's own context, to tell its end from an attempt's

	ticket  *admission.Ticket
	at      time.Time // when the slot was granted: Latency starts here
	plan    plan
	inline  [4]step // the plan's steps, for routes of up to four targets
	tried   [4]bool
	retried [4]bool

	answer            llm.Completion
	used              step
	upstream, backoff time.Duration
	lastEnd           time.Time
	// broke is the failure of a stream another target then finished (see
	// continueAfter): the attempt succeeded for the caller, and failed for
	// its target's health.
	broke         error
	continuedOn   *step     // the target that finished a broken stream
	continuations int       // attempts that continued a broken stream
	brokeAt       time.Time // when the attempt a continuation took over broke
	// prior is what the attempts that failed before the answer were
	// charged (llm.Completion.Charged): the caller is told it with the
	// answer's own usage, so it reads what the tenant pays.
	prior    llm.Usage
	deadline time.Time // the total deadline: TotalTimeout from the first attempt, or the caller's if sooner
}

// tellPrior adds what failed attempts were charged to a whole answer's
// usage in its bytes: the caller of a request that was retried or fell
// back reads the whole cost. Response.Usage stays what the answering
// upstream reported (gateway_tokens_total counts reports); an answer
// whose bytes cannot be edited keeps them as they came.
func (run *run) tellPrior() {
	if run.prior == (llm.Usage{}) {
		return
	}
	if raw, err := chatapi.WithUsageAdded(run.answer.Raw, run.prior); err == nil {
		run.answer.Raw = raw
	}
}

// addUsage is a + b, field by field.
func addUsage(a, b llm.Usage) llm.Usage {
	return llm.Usage{PromptTokens: a.PromptTokens + b.PromptTokens, CompletionTokens: a.CompletionTokens + b.CompletionTokens,
		TotalTokens: a.TotalTokens + b.TotalTokens}
}

func (run *run) release() {
	run.ticket.Release()
	run.r.inflight.leave()
}

// call makes one provider call: a stream's, or Generate's. A provider
// that honours its context is called on the request's goroutine; any other
// goes through the bridge, so that when it ignores the attempt's deadline
// the attempt still ends on time, and the abandoned call keeps its bridge
// permit until it really returns. Either way the provider gets the
// attempt's own context: when the attempt ends — its timeout, or the
// caller gone — the work is told to stop too.
func (run *run) call(ctx context.Context, s step, req llm.Request) (llm.Completion, error) {
	if run.stream != nil {
		return run.stream.attempt(ctx, run, s, req)
	}
	if s.direct {
		return llm.Generate(ctx, s.provider, req)
	}
	return bridge.Call(ctx, run.r.calls, func(context.Context) (llm.Completion, error) {
		return llm.Generate(ctx, s.provider, req)
	})
}

// attempt is the retry loop's op: pick a target, call it, report the
// outcome to the Observer and the target's breaker, and tell the loop what
// to do next.
func (run *run) attempt(ctx context.Context, n int) error {
	start := time.Now()
	if n > 1 {
		run.backoff += start.Sub(run.lastEnd)
	}
	k, done, err := run.plan.pick()
	if err != nil {
		// Every breaker is open: say so now, with when to come back;
		// waiting a backoff would only find them open still.
		return timeouts.Permanent(err)
	}
	s := run.plan.steps[k]
	if n == 1 && run.r.cfg.RetryBudget != nil {
		run.r.cfg.RetryBudget.Deposit(s.target.Provider)
	}
	ctx, span := run.r.attemptSpan(ctx, s.target, n)
	c, err := run.call(ctx, s, llm.Request{Chat: run.req.Chat, Model: s.target.Model, Meter: run.req.Meter})
	outcome := err
	if err == nil && run.broke != nil {
		outcome = run.broke // the caller got its answer; this target did not give it
	}
	endAttemptSpan(span, outcome)
	if err != nil && c.Charged != nil {
		run.prior = addUsage(run.prior, *c.Charged)
	}
	run.lastEnd = time.Now()
	run.upstream += run.lastEnd.Sub(start)
	took := run.lastEnd.Sub(start)
	if !run.brokeAt.IsZero() {
		took = run.brokeAt.Sub(start) // its own call, not the continuations observed on their own
		run.brokeAt = time.Time{}
	}
	run.r.obs.Attempt(s.target, n, took, outcome)
	if outcome == nil {
		done(nil)
		if run.r.cfg.Health.IsolateTenantFailures {
			s.streak.reset()
		}
		run.answer, run.used = c, s
		return nil
	}
	verdict := breakerVerdict(outcome)
	if run.r.cfg.Health.IsolateTenantFailures {
		verdict = s.streak.verdict(run.req.Tenant, outcome, verdict)
	}
	done(verdict)
	if err == nil {
		run.answer, run.used = c, *run.continuedOn // the target that finished the answer
		return nil
	}
	run.plan.last = k
	next := run.plan.decide(run.caller, k, err, run.deadline, run.r.policy(run.plan.pinned, 0).MaxAttempts-n)
	if _, fo := next.(failover); run.r.cfg.RetryBudget != nil && !errors.Is(err, ErrAfterFirstByte) && !errors.Is(err, errClientGone) &&
		(fo || !llm.CallersFault(err) && !errors.Is(err, llm.ErrNotSent)) { // the loop would try again
		next = run.budget(n, next)
	}
	return next
}

// errNeutral is what an attempt that says nothing of its target's health
// tells the breaker: it neither counts as a failure nor resets the count
// (the breaker's IsFailure, see newBreaker, says so).
var errNeutral = errors.New("router: nothing to say of the target's health")

// isFailure is every target breaker's IsFailure: a neutral verdict, or a
// caller that left (lab 04's default), is not the upstream's fault.
func isFailure(err error) bool {
	return !errors.Is(err, errNeutral) && !errors.Is(err, context.Canceled)
}

// breakerVerdict is what a failed attempt tells its target's breaker.
func breakerVerdict(err error) error {
	switch {
	case llm.CallersFault(err):
		return nil // the upstream answered, and refused the request: it is up
	case errors.Is(err, llm.ErrNotSent):
		return errNeutral // the upstream was not asked: nothing to say either way
	case errors.Is(err, llm.ErrPanic):
		// A provider that panics has a bug, and the request that found it
		// fails — but one caller's crafted input must not open the
		// breaker for every tenant, so it does not count either way.
		return errNeutral
	}
	return err
}

// budget asks the retry budget, if there is one, for the attempt after
// attempt n — now, before the loop waits a backoff, so that a refusal ends
// the request at once. The withdrawal goes to the provider the plan would
// pick next. An attempt the loop will not make (the last one, a caller who
// left, a total deadline already past, every breaker open) withdraws
// nothing; one whose backoff then does not fit the deadline has been paid
// for all the same — the budget errs toward fewer retries, never more.
func (run *run) budget(n int, next error) error {
	if n >= run.r.policy(run.plan.pinned, 0).MaxAttempts || run.caller.Err() != nil || !time.Now().Before(run.deadline) {
		return next
	}
	j := run.plan.next()
	if j < 0 {
		return next
	}
	provider := run.plan.steps[j].target.Provider
	if run.r.cfg.RetryBudget.Withdraw(provider) {
		return next
	}
	run.r.obs.RetryRefused(provider)
	return timeouts.Permanent(fmt.Errorf("%w for %s (the last attempt: %w)", ErrRetryBudgetExhausted, provider, next))
}

// decide tells the retry loop what a failed attempt means:
//
//   - cut after its first byte (ErrAfterFirstByte): stop — the caller has
//     part of an answer, and no other target may start one (nor is a
//     retry-budget token spent on the attempt that will not follow);
//   - refused before it was sent (llm.ErrNotSent): stop;
//   - the request's own fault (a 4xx): stop — unless the route falls back
//     on this error and has a target it has not tried;
//   - the route asks for the same target once more (Route.RetrySame for a
//     5xx or a dropped connection, Route.WaitRetryAfter for a short
//     Retry-After that fits the deadline) and it has not had it — and an
//     attempt will still be left for an untried target: back off, or wait
//     the Retry-After, and try it again;
//   - another failure, and the next target is one this request has not
//     tried: go there at once, whatever Retry-After the failed one asked
//     for — a different upstream is not being hammered;
//   - otherwise (the same target is the only way on, or every target has
//     had its turn): the loop backs off, honouring Retry-After.
func (p *plan) decide(caller context.Context, k int, err error, deadline time.Time, attemptsLeft int) error {
	if errors.Is(err, ErrAfterFirstByte) {
		return err // already final (Permanent): the caller has part of an answer, and no other target may start one
	}
	if errors.Is(err, llm.ErrNotSent) {
		return timeouts.Permanent(err) // a middleware ended the request before asking anyone
	}
	if errors.Is(err, errClientGone) {
		return timeouts.Permanent(err) // the caller stopped reading (its emit failed): nobody is left to answer
	}
	if llm.CallersFault(err) {
		if j := p.next(); j >= 0 && !p.tried[j] && fallsBackOn(err, p.fallbackOn) {
			return failover{err}
		}
		return timeouts.Permanent(err)
	}
	if caller.Err() != nil {
		return err // the caller left: the loop stops on its own
	}
	if p.again(k, err, deadline, attemptsLeft) {
		p.retried[k] = true
		p.last = (k + len(p.steps) - 1) % len(p.steps) // so that pick starts at k
		return err                                     // the loop backs off, or waits out the Retry-After
	}
	if j := p.next(); j >= 0 && j != k && !p.tried[j] {
		return failover{err}
	}
	return err
}

// again reports whether the route asks for the target that just failed to
// be tried once more before the next: a short Retry-After it may wait out
// within the deadline (WaitRetryAfter), or a 5xx or dropped connection
// (RetrySame). A Retry-After too long to wait sends the request on.
func (p *plan) again(k int, err error, deadline time.Time, attemptsLeft int) bool {
	if p.retried[k] {
		return false
	}
	if j := p.next(); j >= 0 && j != k && !p.tried[j] && attemptsLeft < 2 {
		return false // the last attempt goes to a target not tried yet
	}
	var ra llm.RetryAfterer
	if errors.As(err, &ra) && ra.RetryAfter() > 0 {
		return ra.RetryAfter() <= p.waitRA && time.Now().Add(ra.RetryAfter()).Before(deadline)
	}
	switch llm.ReasonOf(err) {
	case llm.ReasonServer, llm.ReasonConnection:
		return p.retrySame
	}
	return false
}

// failover marks an error after which the next attempt starts at once, on
// another target (lab 03's timeouts.Immediate).
type failover struct{ err error }

func (f failover) Error() string          { return f.err.Error() }
func (f failover) Unwrap() error          { return f.err }
func (f failover) RetryImmediately() bool { return true }

// policy is the retry policy for one request: a pinned provider gets one
// attempt — an honest fast failure, never a silent fallback.
func (r *Router) policy(pinned bool, attemptTimeout time.Duration) timeouts.Policy {
	p := timeouts.Policy{
		MaxAttempts: r.cfg.Retry.MaxAttempts, BaseBackoff: r.cfg.Retry.BaseBackoff, MaxBackoff: r.cfg.Retry.MaxBackoff,
		AttemptTimeout: attemptTimeout, TotalTimeout: r.cfg.Retry.TotalTimeout, Rand: r.rand,
	}
	if pinned {
		p.MaxAttempts = 1
	}
	return p
}
