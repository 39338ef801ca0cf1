package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/production-go/gateway-lab/solutions/03-timeouts"
	"github.com/production-go/gateway-lab/solutions/06-bridge"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Generate runs one request through the whole path (see the package doc).
// Errors wrap the sentinels in gateway.go, the last provider error, and
// context.DeadlineExceeded when the total deadline ran out.
func (g *Gateway) Generate(ctx context.Context, req Request) (Response, error) {
	return g.serve(ctx, req, g.cfg.AttemptTimeout, nil)
}

// ContextHonourer is a Provider that returns promptly once its context
// ends (an HTTP client does). The gateway calls it on the request's own
// goroutine; any other provider is called through the bridge, so that one
// that ignores its context cannot hold the request past its deadline.
type ContextHonourer interface{ HonoursContext() bool }

// generateOnce is one attempt of Generate. A provider that ignores its
// context goes through the bridge: the caller is let go at the attempt's
// deadline, and the abandoned call keeps its bridge permit until it really
// returns. Either way the provider gets the attempt's own context, so when
// the attempt ends — its timeout, or the caller gone — the work is told to
// stop too.
func (g *Gateway) generateOnce(ctx context.Context, s step, req Request) (Completion, error) {
	if s.direct {
		return direct(ctx, s.provider, req)
	}
	return bridge.Call(ctx, g.calls, func(context.Context) (Completion, error) {
		return s.provider.Generate(ctx, req)
	})
}

// direct calls a provider that honours its context, turning a panic into
// an error as the bridge does.
func direct(ctx context.Context, p Provider, req Request) (c Completion, err error) {
	defer recovered(p, &err)
	return p.Generate(ctx, req)
}

// recovered turns a panic in a provider call into an error wrapping
// bridge.ErrPanic (deferred by every call that runs a provider on the
// request's own goroutine).
func recovered(p Provider, err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("gateway: provider %s: %w: %v", p.Name(), bridge.ErrPanic, v)
	}
}

// serve is the request skeleton Generate and Stream share, so the two
// cannot drift apart: admission, the retry loop over the plan's targets,
// the Response, and the slot given back whatever happens.
func (g *Gateway) serve(ctx context.Context, req Request, attemptTimeout time.Duration, st *streamer) (Response, error) {
	r := &run{g: g, req: req, stream: st, caller: ctx}
	actx, span := g.span(ctx, "gateway.admission")
	err := g.enter(actx, r)
	if span != nil {
		span.SetAttributes(attribute.Int64("gateway.queue_wait_us", r.queueWait().Microseconds()))
		endSpan(span, err)
	}
	if err != nil {
		return Response{}, err
	}
	defer r.release() // whatever happens below: success, error, panic, cancellation
	r.deadline = time.Now().Add(g.cfg.TotalTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(r.deadline) {
		r.deadline = d
	}
	attempts, err := timeouts.Do(ctx, g.policy(r.plan.pinned, attemptTimeout), r.attempt)
	resp := Response{Provider: r.used.target.Provider, Model: r.answer.Model, Text: r.answer.Text, Usage: r.answer.Usage,
		Raw: r.answer.Raw, Attempts: attempts, QueueWait: r.ticket.QueueWait, Latency: time.Since(r.at),
		Upstream: r.upstream, Backoff: r.backoff}
	if err == nil && resp.Model == "" {
		resp.Model = r.used.target.Model
	}
	return resp, err
}

// run is one request in flight: what admission gave it, its plan over the
// targets, and its attempts so far. One allocation per request holds it all.
type run struct {
	g      *Gateway
	req    Request
	stream *streamer       // nil for Generate: Generate and Stream differ only in the attempt
	caller context.Context // the caller's own context, to tell its end from an attempt's

	ticket *admission.Ticket
	at     time.Time // when the slot was granted: Latency starts here
	plan   plan
	inline [4]step // the plan's steps, for routes of up to four targets
	tried  [4]bool

	answer            Completion
	used              step
	upstream, backoff time.Duration
	lastEnd           time.Time
	deadline          time.Time // the total deadline: TotalTimeout from the first attempt, or the caller's if sooner
}

// queueWait is the time the request waited for its slot (0 if refused).
func (r *run) queueWait() time.Duration {
	if r.ticket == nil {
		return 0
	}
	return r.ticket.QueueWait
}

// span starts a child span of ctx's, or returns (ctx, nil) when tracing is
// off — so a gateway without a tracer pays nothing for it.
func (g *Gateway) span(ctx context.Context, name string) (context.Context, trace.Span) {
	if g.tracer == nil {
		return ctx, nil
	}
	return g.tracer.Start(ctx, name)
}

// endSpan ends a span, marking it failed with err's reason if there is one.
// The error's text is not recorded: an upstream's message may quote the
// prompt, and spans never carry prompt text.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, string(ReasonOf(err)))
	}
	span.End()
}

func (r *run) release() {
	r.ticket.Release()
	r.g.tenants.leave(r.req.Tenant)
	r.g.inflight.Leave()
}

// call makes one provider call: a stream's, or Generate's.
func (r *run) call(ctx context.Context, s step, req Request) (Completion, error) {
	if r.stream != nil {
		return r.stream.attempt(ctx, s, req)
	}
	return r.g.generateOnce(ctx, s, req)
}

// attempt is the retry loop's op: pick a target, call it, report the
// outcome to the Observer and the target's breaker, and tell the loop what
// to do next.
func (r *run) attempt(ctx context.Context, n int) error {
	start := time.Now()
	if n > 1 {
		r.backoff += start.Sub(r.lastEnd)
	}
	k, done, err := r.plan.pick()
	if err != nil {
		// Every breaker is open: say so now, with when to come back;
		// waiting a backoff would only find them open still.
		return timeouts.Permanent(err)
	}
	s := r.plan.steps[k]
	if n == 1 && r.g.cfg.RetryBudget != nil {
		r.g.cfg.RetryBudget.Deposit(s.target.Provider)
	}
	req := r.req
	req.Model = s.target.Model
	ctx, span := r.g.span(ctx, "gateway.attempt")
	c, err := r.call(ctx, s, req)
	if span != nil {
		span.SetAttributes(attribute.Int("gateway.attempt", n),
			semconv.GenAIProviderNameKey.String(s.target.Provider), semconv.GenAIRequestModelKey.String(s.target.Model),
			attribute.String("gateway.outcome", Outcome(err)))
		if err != nil {
			span.SetAttributes(attribute.String("gateway.failure_reason", string(ReasonOf(err))))
		}
		endSpan(span, err)
	}
	r.lastEnd = time.Now()
	took := r.lastEnd.Sub(start)
	r.upstream += took
	r.g.observeAttempt(s.target, n, took, err)
	if err == nil {
		done(nil)
		r.answer, r.used = c, s
		return nil
	}
	switch {
	case callersFault(err):
		done(nil) // the upstream answered, and refused the request: it is up
	case errors.Is(err, bridge.ErrPanic):
		// A provider that panics has a bug, and the request that found it
		// fails — but one caller's crafted input must not open the
		// breaker for every tenant, so it does not count either way.
		done(context.Canceled)
	default:
		done(err)
	}
	r.plan.last = k
	next := r.plan.decide(r.caller, k, err)
	if _, fo := next.(failover); r.g.cfg.RetryBudget != nil && (fo || !callersFault(err)) { // the loop would try again
		next = r.budget(n, next)
	}
	return next
}

// budget asks the retry budget, if there is one, for the attempt after
// attempt n — now, before the loop waits a backoff, so that a refusal ends
// the request at once. The withdrawal goes to the provider the plan would
// pick next. An attempt the loop will not make (the last one, a caller who
// left, a total deadline already past, every breaker open) withdraws
// nothing; one whose backoff then does not fit the deadline has been paid
// for all the same — the budget errs toward fewer retries, never more.
func (r *run) budget(n int, next error) error {
	b := r.g.cfg.RetryBudget
	if n >= r.g.policy(r.plan.pinned, 0).MaxAttempts || r.caller.Err() != nil || !time.Now().Before(r.deadline) {
		return next
	}
	j := r.plan.next()
	if j < 0 {
		return next
	}
	provider := r.plan.steps[j].target.Provider
	if b.Withdraw(provider) {
		return next
	}
	if o, ok := r.g.obs.(RetryBudgetObserver); ok {
		o.RetryRefused(provider)
	}
	return timeouts.Permanent(fmt.Errorf("%w for %s (the last attempt: %w)", ErrRetryBudgetExhausted, provider, next))
}

// decide tells the retry loop what a failed attempt means:
//
//   - the request's own fault (a 4xx, Permanent): stop — unless the route
//     falls back on this error and has a target it has not tried;
//   - another failure, and the next target is one this request has not
//     tried: go there at once, whatever Retry-After the failed one asked
//     for — a different upstream is not being hammered;
//   - otherwise (the same target is the only way on, or every target has
//     had its turn): the loop backs off, honouring Retry-After.
func (p *plan) decide(caller context.Context, k int, err error) error {
	if callersFault(err) {
		if j := p.next(); j >= 0 && !p.tried[j] && fallsBackOn(err, p.fallbackOn) {
			return failover{err}
		}
		return timeouts.Permanent(err)
	}
	if caller.Err() != nil {
		return err // the caller left: the loop stops on its own
	}
	if j := p.next(); j >= 0 && j != k && !p.tried[j] {
		return failover{err}
	}
	return err
}

// failover marks an error after which the next attempt starts at once, on
// another target.
type failover struct{ err error }

func (f failover) Error() string          { return f.err.Error() }
func (f failover) Unwrap() error          { return f.err }
func (f failover) RetryImmediately() bool { return true }

func (g *Gateway) observeAttempt(t Target, n int, took time.Duration, err error) {
	if g.tobs != nil {
		g.tobs.TargetAttempt(t, n, took, err)
		return
	}
	g.obs.Attempt(t.Provider, n, took, err)
}

// enter runs everything before the first provider call: request checks,
// the plan, in-flight accounting (refused once closing), the tenant's
// in-flight cap, its rate limit, and a slot within MaxQueueWait. On success
// the caller must defer r.release.
func (g *Gateway) enter(ctx context.Context, r *run) error {
	req := r.req
	pinned, err := g.check(req)
	if err != nil {
		return err
	}
	if err := g.plan(r, pinned); err != nil {
		return err
	}
	if !g.inflight.Join() {
		g.obs.Rejected(req.Tenant, RejectClosed)
		return ErrClosed
	}
	if !g.tenants.enter(req.Tenant) {
		g.inflight.Leave()
		g.obs.Rejected(req.Tenant, RejectTenantBusy)
		return &RateLimitError{RetryAfter: time.Second, busy: true}
	}
	ticket, err := g.admit.Admit(ctx, req.Tenant)
	if err != nil {
		g.tenants.leave(req.Tenant)
		g.inflight.Leave()
		return g.rejected(req.Tenant, err)
	}
	g.obs.Admitted(req.Tenant, ticket.QueueWait)
	r.ticket, r.at = ticket, time.Now()
	return nil
}

// check validates a request and resolves its pinned provider.
func (g *Gateway) check(req Request) (pinned Provider, err error) {
	if req.Tenant == "" || (req.Prompt == "" && req.Chat == nil) {
		return nil, fmt.Errorf("%w: tenant and prompt are required", ErrInvalidRequest)
	}
	for _, t := range req.Route {
		if g.byName[t.Provider] == nil {
			return nil, fmt.Errorf("%w: route target %q (have %v)", ErrUnknownProvider, t.Provider, g.Providers())
		}
	}
	if req.Provider == "" {
		return nil, nil
	}
	if pinned = g.byName[req.Provider]; pinned == nil {
		return nil, fmt.Errorf("%w: %q (have %v)", ErrUnknownProvider, req.Provider, g.Providers())
	}
	return pinned, nil
}

// policy is the retry policy for one request: a pinned provider gets one
// attempt — an honest fast failure, never a silent fallback.
func (g *Gateway) policy(pinned bool, attemptTimeout time.Duration) timeouts.Policy {
	p := timeouts.Policy{
		MaxAttempts: g.cfg.MaxAttempts, BaseBackoff: g.cfg.BaseBackoff, MaxBackoff: g.cfg.MaxBackoff,
		AttemptTimeout: attemptTimeout, TotalTimeout: g.cfg.TotalTimeout, Rand: g.rand,
	}
	if pinned {
		p.MaxAttempts = 1
	}
	return p
}

// rejected maps an admission error to the gateway's own, and counts it.
func (g *Gateway) rejected(tenant string, err error) error {
	var rl *admission.RateLimitError
	switch {
	case errors.As(err, &rl):
		g.obs.Rejected(tenant, RejectRateLimited)
		return &RateLimitError{RetryAfter: rl.RetryAfter}
	case errors.Is(err, admission.ErrOverloaded):
		g.obs.Rejected(tenant, RejectOverloaded)
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	case errors.Is(err, admission.ErrClosed):
		g.obs.Rejected(tenant, RejectClosed)
		return ErrClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		g.obs.Rejected(tenant, RejectCancelled)
		return err
	}
	// The limiter could not decide (its Redis is down, and it fails closed).
	g.obs.Rejected(tenant, RejectLimiterFailed)
	return fmt.Errorf("%w: %w", ErrLimiterFailed, err)
}
