package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/production-go/gateway-lab/solutions/03-timeouts"
	"github.com/production-go/gateway-lab/solutions/04-breaker"
	"github.com/production-go/gateway-lab/solutions/06-bridge"
)

// Generate runs one request through the whole path (see the package doc).
// A failed request's error wraps the last provider's error, and
// context.DeadlineExceeded when the total deadline or the caller's ran out.
func (g *Gateway) Generate(ctx context.Context, req Request) (Response, error) {
	r := &run{g: g, req: req, pinned: -1, last: -1, tried: make([]bool, len(g.providers))}
	if req.Tenant == "" || req.Prompt == "" { // cheap checks first: they take nothing
		return Response{}, fmt.Errorf("%w: tenant and prompt are required", ErrInvalidRequest)
	}
	if req.Provider != "" {
		i, ok := g.byName[req.Provider]
		if !ok {
			return Response{}, fmt.Errorf("%w: %q", ErrUnknownProvider, req.Provider)
		}
		r.pinned = i
	}
	leave, err := g.inflight.Enter() // from here on, Close waits for this request
	if err != nil {
		g.obs.Rejected(req.Tenant, rejectClosed)
		return Response{}, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	defer leave()
	ticket, err := g.admit.Admit(ctx, req.Tenant) // rate limit first: an over-quota tenant never queues
	if err != nil {
		return Response{}, g.refused(req.Tenant, err)
	}
	defer ticket.Release() // whatever happens below: success, error, panic, cancellation
	g.obs.Admitted(req.Tenant, ticket.QueueWait)
	admitted := time.Now() // Latency starts here: the queue wait is its own number

	policy := g.retry // its TotalTimeout is one deadline around every attempt and backoff
	if r.pinned >= 0 {
		policy.MaxAttempts = 1 // the caller chose: an honest failure, never another provider's answer
	}
	// The caller's ctx: its cancellation and its deadline end the loop, each as itself.
	attempts, err := timeouts.Do(ctx, policy, r.attempt)
	return Response{Provider: r.by, Model: r.answer.Model, Text: r.answer.Text, Attempts: attempts,
		QueueWait: ticket.QueueWait, Latency: time.Since(admitted)}, err
}

// refused maps an admission error to the gateway's own and observes it
// once, with its own reason.
func (g *Gateway) refused(tenant string, err error) error {
	var rl *admission.RateLimitError
	reason := rejectCancelled // the caller left while queued: its ctx error stays as it is
	switch {
	case errors.As(err, &rl):
		reason, err = rejectRateLimited, &RateLimitError{RetryAfter: rl.RetryAfter}
	case errors.Is(err, admission.ErrOverloaded):
		reason, err = rejectOverloaded, fmt.Errorf("%w: %w", ErrOverloaded, err)
	case errors.Is(err, admission.ErrClosed):
		reason, err = rejectClosed, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	g.obs.Rejected(tenant, reason)
	return err
}

// run is one request's walk through the providers, attempt by attempt.
type run struct {
	g      *Gateway
	req    Request
	pinned int    // the pinned provider's index; -1: any
	last   int    // the provider that failed last: the next attempt starts after it
	tried  []bool // by index: the providers this request has called
	answer Completion
	by     string // the provider that answered
}

// attempt is the retry loop's op: one provider call, its outcome told to
// the provider's breaker and to the Observer.
func (r *run) attempt(ctx context.Context, n int) error {
	i, done, err := r.pick()
	if err != nil {
		return timeouts.Permanent(err) // a backoff would only find every breaker open still
	}
	p, start := r.g.providers[i], time.Now()
	r.tried[i] = true
	// Through the bridge: a provider deaf to its ctx cannot hold the attempt past
	// its timeout, and a panic comes back as an error. It gets the attempt's ctx,
	// not the bridge's detached one, so a caller who leaves stops the upstream call.
	c, err := bridge.Call(ctx, r.g.calls, func(context.Context) (Completion, error) {
		return p.Generate(ctx, r.req)
	})
	done(err)
	r.g.obs.Attempt(p.Name(), n, time.Since(start), err)
	if err == nil {
		r.answer, r.by = c, p.Name()
		return nil
	}
	r.last = i
	for j, b := range r.g.breakers {
		if !r.tried[j] && b.State() != breaker.Open {
			return failover{err} // a provider this request has not called yet can take the retry
		}
	}
	return err
}

// pick takes the breaker's permission for this attempt: the pinned provider, or
// the first in priority order, after the one that just failed, whose breaker
// admits a call. An open breaker means don't call; none admitting, call nobody.
func (r *run) pick() (int, func(error), error) {
	n := len(r.g.providers)
	for k := range n {
		i := (r.last + 1 + k) % n
		if r.pinned >= 0 && i != r.pinned {
			continue
		}
		if done, err := r.g.breakers[i].Allow(); err == nil {
			return i, done, nil
		}
	}
	return 0, nil, fmt.Errorf("%w: every breaker is open", ErrNoHealthyProvider)
}

// failover makes timeouts.Do retry at once: a backoff protects the upstream that
// just failed, and one this request has not tried is not being hammered. It
// unwraps, or it would hide the provider's error and a Permanent mark.
type failover struct{ error }

func (f failover) Unwrap() error        { return f.error }
func (failover) RetryImmediately() bool { return true }
