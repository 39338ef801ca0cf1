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
// (refused once closing), and a slot within MaxQueueWait. (A tenant's rate
// and in-flight cap are the tenant gate's, asked before the router.) On success the caller must defer run.release.
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
	ticket, err := r.admit.Admit(ctx, req.Tenant)
	if err != nil {
		r.inflight.leave()
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
