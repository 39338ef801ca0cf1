package router

import (
	"context"

	"github.com/production-go/gateway-lab/gateway/llm"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// span starts a child span of ctx's, or returns (ctx, nil) when tracing is
// off — so a router without a tracer pays nothing for it.
func (r *Router) span(ctx context.Context, name string) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, nil
	}
	return r.tracer.Start(ctx, name)
}

// attemptSpan starts one attempt's span, naming its target.
func (r *Router) attemptSpan(ctx context.Context, t Target, n int) (context.Context, trace.Span) {
	ctx, span := r.span(ctx, "gateway.attempt")
	if span != nil {
		span.SetAttributes(attribute.Int("gateway.attempt", n),
			semconv.GenAIProviderNameKey.String(t.Provider), semconv.GenAIRequestModelKey.String(t.Model))
	}
	return ctx, span
}

// endAttemptSpan records how the attempt ended.
func endAttemptSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attribute.String("gateway.outcome", string(llm.OutcomeOf(err))))
	if err != nil {
		span.SetAttributes(attribute.String("gateway.failure_reason", string(llm.ReasonOf(err))))
	}
	endSpan(span, err)
}

// endAdmissionSpan records the request's queue wait.
func endAdmissionSpan(span trace.Span, run *run, err error) {
	if span == nil {
		return
	}
	wait := int64(0)
	if run.ticket != nil {
		wait = run.ticket.QueueWait.Microseconds()
	}
	span.SetAttributes(attribute.Int64("gateway.queue_wait_us", wait))
	endSpan(span, err)
}

// endSpan ends a span, marking it failed with err's reason if there is one.
// The error's text is not recorded: an upstream's message may quote the
// prompt, and spans never carry prompt text.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, string(llm.ReasonOf(err)))
	}
	span.End()
}
