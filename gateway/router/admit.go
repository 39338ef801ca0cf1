package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
)

// admitted runs everything before the first provider call, under the
// request's admission span: request checks, the plan, in-flight accounting
// (refused once closing), the tenant's in-flight cap, its rate limit, and a
// slot within MaxQueueWait. On success the caller must defer run.release.
func (r *Router) admitted(ctx context.Context, run *run) error {
	ctx, span := r.span(ctx, "gateway.admission")
	err := r.enter(ctx, run)
	endAdmissionSpan(span, run, err)
	return err
}

func (r *Router) enter(ctx context.Context, run *run) error {
	req := run.req
	pinned, err := r.check(req)
	if err != nil {
		return err
	}
	if err := r.plan(run, pinned); err != nil {
		return err
	}
	if !r.inflight.join() {
		r.obs.Rejected(req.Tenant, RejectClosed)
		return ErrClosed
	}
	if !r.tenants.enter(req.Tenant) {
		r.inflight.leave()
		r.obs.Rejected(req.Tenant, RejectTenantBusy)
		return &RateLimitError{RetryAfter: time.Second, busy: true}
	}
	if !req.RateChecked {
		if err := r.Allow(ctx, req.Tenant); err != nil {
			r.tenants.leave(req.Tenant)
			r.inflight.leave()
			return err
		}
	}
	ticket, err := r.admit.Admit(ctx, req.Tenant)
	if err != nil {
		r.tenants.leave(req.Tenant)
		r.inflight.leave()
		if errors.Is(err, admission.ErrOverloaded) {
			r.refund(ctx, req.Tenant)
		}
		return r.rejected(req.Tenant, err)
	}
	r.obs.Admitted(req.Tenant, ticket.QueueWait)
	run.ticket, run.at = ticket, time.Now()
	return nil
}

// check validates a request and resolves its pinned provider.
func (r *Router) check(req Request) (pinned llm.Provider, err error) {
	if req.Tenant == "" || req.Chat == nil {
		return nil, fmt.Errorf("%w: tenant and chat request are required", ErrInvalidRequest)
	}
	for _, t := range req.Route.targets() {
		if r.byName[t.Provider] == nil {
			return nil, fmt.Errorf("%w: route target %q (have %v)", ErrUnknownProvider, t.Provider, r.Providers())
		}
	}
	if req.Provider == "" {
		return nil, nil
	}
	if pinned = r.byName[req.Provider]; pinned == nil {
		return nil, fmt.Errorf("%w: %q (have %v)", ErrUnknownProvider, req.Provider, r.Providers())
	}
	return pinned, nil
}

// Allow holds one request of tenant to its rate: the cheapest refusal,
// which the HTTP layer asks right after it knows who is asking and before
// it reads a body (Request.RateChecked then tells Generate and Stream not
// to ask again). A refusal is a *RateLimitError, counted; a limiter that
// cannot decide (its store down, failing closed) is ErrLimiterFailed.
func (r *Router) Allow(ctx context.Context, tenant string) error {
	if tenant == "" {
		return fmt.Errorf("%w: tenant is required", ErrInvalidRequest)
	}
	d, err := r.limiter.Allow(ctx, tenant)
	switch {
	case err != nil && ctx.Err() != nil:
		r.obs.Rejected(tenant, RejectCancelled)
		return ctx.Err()
	case err != nil:
		r.obs.Rejected(tenant, RejectLimiterFailed)
		return fmt.Errorf("%w: %w", ErrLimiterFailed, err)
	case !d.Allowed:
		r.obs.Rejected(tenant, RejectRateLimited)
		return &RateLimitError{RetryAfter: d.RetryAfter}
	}
	return nil
}

// refund gives tenant's rate token back, if the limiter can (see
// Refunder): detached from the caller, who is being refused anyway.
func (r *Router) refund(ctx context.Context, tenant string) {
	if rf, ok := r.limiter.(Refunder); ok {
		_ = rf.Refund(context.WithoutCancel(ctx), tenant)
	}
}

// rejected maps an admitter's error to the router's own, and counts it.
func (r *Router) rejected(tenant string, err error) error {
	switch {
	case errors.Is(err, admission.ErrOverloaded):
		r.obs.Rejected(tenant, RejectOverloaded)
		return fmt.Errorf("%w: %w", ErrOverloaded, err)
	case errors.Is(err, admission.ErrClosed):
		r.obs.Rejected(tenant, RejectClosed)
		return ErrClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		r.obs.Rejected(tenant, RejectCancelled)
		return err
	}
	return err // the admitter refuses only in the ways above
}
