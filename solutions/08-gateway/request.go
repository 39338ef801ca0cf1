package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/production-go/gateway-lab/solutions/03-timeouts"
	"github.com/production-go/gateway-lab/solutions/06-bridge"
)

// Generate runs one request through the whole path (see the package doc).
// Errors wrap the sentinels above, the last provider error, and
// context.DeadlineExceeded when the total deadline ran out.
func (g *Gateway) Generate(ctx context.Context, req Request) (Response, error) {
	return g.serve(ctx, req, g.cfg.AttemptTimeout, g.generateOnce)
}

// generateOnce is one attempt of Generate, through the bridge: a provider
// that ignores its context still loses the caller at the attempt's
// deadline, and keeps its bridge permit until it really returns. It is
// given the attempt's own context, so when the attempt ends — its
// timeout, or the caller gone — the work is told to stop too.
func (g *Gateway) generateOnce(ctx context.Context, s step, req Request) (Completion, error) {
	return bridge.Call(ctx, g.calls, func(context.Context) (Completion, error) {
		return s.provider.Generate(ctx, req)
	})
}

// attemptFunc makes one provider call for a request; Generate and Stream
// differ only in theirs.
type attemptFunc func(ctx context.Context, s step, req Request) (Completion, error)

// serve is the request skeleton Generate and Stream share, so the two
// cannot drift apart: admission, the retry loop over the plan's targets,
// the Response, and the slot given back whatever happens.
func (g *Gateway) serve(ctx context.Context, req Request, attemptTimeout time.Duration, call attemptFunc) (Response, error) {
	a, err := g.enter(ctx, req)
	if err != nil {
		return Response{}, err
	}
	defer a.release() // whatever happens below: success, error, panic, cancellation
	r := run{g: g, plan: a.plan, req: req, call: call, caller: ctx}
	attempts, err := timeouts.Do(ctx, g.policy(a.plan.pinned, attemptTimeout), r.attempt)
	resp := Response{Provider: r.used.target.Provider, Model: r.answer.Model, Text: r.answer.Text, Usage: r.answer.Usage,
		Raw: r.answer.Raw, Attempts: attempts, QueueWait: a.ticket.QueueWait, Latency: time.Since(a.at),
		Upstream: r.upstream, Backoff: r.backoff}
	if err == nil && resp.Model == "" {
		resp.Model = r.used.target.Model
	}
	return resp, err
}

// run is one request's attempts in progress.
type run struct {
	g      *Gateway
	plan   *plan
	req    Request
	call   attemptFunc
	caller context.Context // the caller's own context, to tell its end from an attempt's

	answer            Completion
	used              step
	upstream, backoff time.Duration
	lastEnd           time.Time
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
	req := r.req
	req.Model = s.target.Model
	c, err := r.call(ctx, s, req)
	r.lastEnd = time.Now()
	took := r.lastEnd.Sub(start)
	r.upstream += took
	r.g.observeAttempt(s.target, n, took, err)
	if callersFault(err) {
		done(nil) // the upstream answered, and refused the request: it is up
	} else {
		done(err)
	}
	if err == nil {
		r.answer, r.used = c, s
		return nil
	}
	r.plan.last = k
	return r.plan.decide(r.caller, k, err)
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

// admitted is a request past the checks and admission: it holds a slot and
// counts as in flight until release.
type admitted struct {
	g      *Gateway
	tenant string
	plan   *plan
	ticket *admission.Ticket
	leave  func()
	at     time.Time // when the slot was granted: Latency starts here
}

func (a *admitted) release() {
	a.ticket.Release()
	a.g.tenants.leave(a.tenant)
	a.leave()
}

// enter runs everything before the first provider call: request checks,
// in-flight accounting (refused once closing), the tenant's in-flight cap,
// its rate limit, and a slot within MaxQueueWait. The caller must defer
// release.
func (g *Gateway) enter(ctx context.Context, req Request) (*admitted, error) {
	pinned, err := g.check(req)
	if err != nil {
		return nil, err
	}
	p, err := g.plan(req, pinned)
	if err != nil {
		return nil, err
	}
	leave, err := g.inflight.Enter()
	if err != nil {
		g.obs.Rejected(req.Tenant, RejectClosed)
		return nil, ErrClosed
	}
	if !g.tenants.enter(req.Tenant) {
		leave()
		g.obs.Rejected(req.Tenant, RejectTenantBusy)
		return nil, &RateLimitError{RetryAfter: time.Second, busy: true}
	}
	ticket, err := g.admit.Admit(ctx, req.Tenant)
	if err != nil {
		g.tenants.leave(req.Tenant)
		leave()
		return nil, g.rejected(req.Tenant, err)
	}
	g.obs.Admitted(req.Tenant, ticket.QueueWait)
	return &admitted{g: g, tenant: req.Tenant, plan: p, ticket: ticket, leave: leave, at: time.Now()}, nil
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
	}
	g.obs.Rejected(tenant, RejectCancelled)
	return err
}
