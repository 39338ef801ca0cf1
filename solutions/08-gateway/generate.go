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
	a, err := g.enter(ctx, req)
	if err != nil {
		return Response{}, err
	}
	defer a.release() // whatever happens below: success, error, panic, cancellation
	pinned := a.pinned

	var (
		answer Completion
		used   string
		last   string // the provider that failed last: the next attempt starts after it
	)
	callerCtx := ctx
	attempts, err := timeouts.Do(ctx, g.policy(pinned != nil, g.cfg.AttemptTimeout), func(ctx context.Context, attempt int) error {
		c, p, err := g.try(pinned, req, &last, attempt, func(p Provider, req Request) (Completion, error) {
			return g.call(ctx, p, req)
		})
		if err != nil {
			return failOverNow(callerCtx, err)
		}
		answer, used = c, p.Name()
		return nil
	})
	resp := Response{Provider: used, Model: answer.Model, Text: answer.Text, Usage: answer.Usage, Attempts: attempts,
		QueueWait: a.ticket.QueueWait, Latency: time.Since(a.at)}
	if err != nil {
		return resp, err
	}
	return resp, nil
}

// admitted is a request past the checks and admission: it holds a slot and
// counts as in flight until release.
type admitted struct {
	pinned Provider // nil: any healthy provider
	ticket *admission.Ticket
	leave  func()
	at     time.Time // when the slot was granted: Latency starts here
}

func (a *admitted) release() {
	a.ticket.Release()
	a.leave()
}

// enter runs everything before the first provider call: request checks,
// in-flight accounting (refused once closing), the tenant's rate limit, and
// a slot within MaxQueueWait. The caller must defer release.
func (g *Gateway) enter(ctx context.Context, req Request) (*admitted, error) {
	pinned, err := g.check(req)
	if err != nil {
		return nil, err
	}
	leave, err := g.inflight.Enter()
	if err != nil {
		g.obs.Rejected(req.Tenant, "closed")
		return nil, ErrClosed
	}
	ticket, err := g.admit.Admit(ctx, req.Tenant)
	if err != nil {
		leave()
		return nil, g.rejected(req.Tenant, err)
	}
	g.obs.Admitted(req.Tenant, ticket.QueueWait)
	return &admitted{pinned: pinned, ticket: ticket, leave: leave, at: time.Now()}, nil
}

// check validates a request and resolves its pinned provider.
func (g *Gateway) check(req Request) (pinned Provider, err error) {
	if req.Tenant == "" || req.Prompt == "" {
		return nil, fmt.Errorf("%w: tenant and prompt are required", ErrInvalidRequest)
	}
	for _, t := range req.Route {
		if g.provider(t.Provider) == nil {
			return nil, fmt.Errorf("%w: route target %q (have %v)", ErrUnknownProvider, t.Provider, g.Providers())
		}
	}
	if req.Provider == "" {
		return nil, nil
	}
	if pinned = g.provider(req.Provider); pinned == nil {
		return nil, fmt.Errorf("%w: %q (have %v)", ErrUnknownProvider, req.Provider, g.Providers())
	}
	return pinned, nil
}

// policy is the retry policy for one request: a pinned provider gets one
// attempt — an honest fast failure, never a silent fallback.
func (g *Gateway) policy(pinned bool, attemptTimeout time.Duration) timeouts.Policy {
	p := timeouts.Policy{
		MaxAttempts: g.cfg.MaxAttempts, BaseBackoff: g.cfg.BaseBackoff, MaxBackoff: g.cfg.MaxBackoff,
		AttemptTimeout: attemptTimeout, TotalTimeout: g.cfg.TotalTimeout, Rand: g.cfg.Rand,
	}
	if pinned {
		p.MaxAttempts = 1
	}
	return p
}

// try runs one attempt on the provider pick chooses, with the route
// target's upstream model set on the request, and reports the outcome to the
// Observer and to that provider's breaker. On failure it records the
// provider in *last, so the next attempt starts after it. Generate and
// Stream share it, so their attempt bookkeeping cannot drift apart.
func (g *Gateway) try(pinned Provider, req Request, last *string, attempt int,
	call func(Provider, Request) (Completion, error)) (Completion, Provider, error) {
	p, model, done, err := g.pick(pinned, req.Route, *last)
	if err != nil {
		return Completion{}, nil, err
	}
	req.Model = model
	start := time.Now()
	c, err := call(p, req)
	g.obs.Attempt(p.Name(), attempt, time.Since(start), err)
	done(err)
	if err != nil {
		*last = p.Name()
	}
	return c, p, err
}

// silentRoute wraps an attempt that ran out of its own time with no answer:
// the next attempt fails over to the next provider at once, because waiting
// before retrying a silent route only multiplies the wait.
type silentRoute struct{ err error }

func (s silentRoute) Error() string          { return s.err.Error() }
func (s silentRoute) Unwrap() error          { return s.err }
func (s silentRoute) RetryImmediately() bool { return true }

// failOverNow marks err as a silent route when a deadline ended the attempt
// but the caller is still waiting. (If the request's total deadline ended
// it, the retry loop stops anyway.)
func failOverNow(callerCtx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) && callerCtx.Err() == nil {
		return silentRoute{err}
	}
	return err
}

// call runs one provider attempt through the bridge: if the provider ignores
// its context, the attempt still ends at its deadline, and the abandoned call
// keeps its bridge permit until it returns.
func (g *Gateway) call(ctx context.Context, p Provider, req Request) (Completion, error) {
	return bridge.Call(ctx, g.calls, func(ctx context.Context) (Completion, error) {
		return p.Generate(ctx, req)
	})
}

// pick chooses the provider (and upstream model) for one attempt and
// returns its breaker's done. Pinned: that provider or nothing. Otherwise the
// route's targets, or every provider in priority order, starting after the
// one that failed last, skipping any whose breaker refuses.
func (g *Gateway) pick(pinned Provider, route []Target, after string) (Provider, string, func(error), error) {
	if pinned != nil {
		done, err := g.breakers[pinned.Name()].Allow()
		if err != nil {
			return nil, "", nil, timeouts.Permanent(fmt.Errorf("%w: pinned provider %s: %w", ErrNoHealthyProvider, pinned.Name(), err))
		}
		return pinned, "", done, nil
	}
	if len(route) == 0 {
		route = g.defaultRoute
	}
	start := 0
	for i, t := range route {
		if t.Provider == after {
			start = i + 1
		}
	}
	for i := range route {
		t := route[(start+i)%len(route)]
		if done, err := g.breakers[t.Provider].Allow(); err == nil {
			return g.provider(t.Provider), t.Model, done, nil
		}
	}
	return nil, "", nil, fmt.Errorf("%w: all %d providers' breakers are open", ErrNoHealthyProvider, len(route))
}

func (g *Gateway) provider(name string) Provider {
	for _, p := range g.providers {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// rejected maps an admission error to the gateway's own, and counts it.
func (g *Gateway) rejected(tenant string, err error) error {
	var rl *admission.RateLimitError
	switch {
	case errors.As(err, &rl):
		g.obs.Rejected(tenant, "rate_limited")
		return &RateLimitError{RetryAfter: rl.RetryAfter}
	case errors.Is(err, admission.ErrOverloaded):
		g.obs.Rejected(tenant, "overloaded")
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	case errors.Is(err, admission.ErrClosed):
		g.obs.Rejected(tenant, "closed")
		return ErrClosed
	}
	g.obs.Rejected(tenant, "cancelled")
	return err
}

// Close stops admitting requests (new and queued ones get ErrClosed) and
// waits for those in flight, or for ctx. Abandoned provider calls are
// waited for too, so nothing outlives the gateway.
func (g *Gateway) Close(ctx context.Context) error {
	g.admit.Close()
	if !g.inflight.Drain(ctx) {
		return fmt.Errorf("gateway: close: %d requests still in flight: %w", g.inflight.Active(), ctx.Err())
	}
	if err := g.calls.Close(ctx); err != nil {
		return fmt.Errorf("gateway: close: %w", err)
	}
	return nil
}
