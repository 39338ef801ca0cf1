package httpapi

import (
	"context"
	"net/http"
	"strconv"

	"github.com/production-go/gateway-lab/gateway/router"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// traceContext reads and writes W3C traceparent/tracestate headers.
var traceContext = propagation.TraceContext{}

// serverSpan starts the request's span, joined to the caller's trace when
// it sent one. It returns r unchanged and a nil span when tracing is off.
func (s *Server) serverSpan(r *http.Request, route, requestID string) (*http.Request, trace.Span) {
	if s.tracer == nil {
		return r, nil
	}
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := s.tracer.Start(ctx, route, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		semconv.HTTPRequestMethodKey.String(r.Method), semconv.HTTPRouteKey.String(route),
		attribute.String("gateway.request_id", requestID)))
	return r.WithContext(ctx), span
}

func endServerSpan(span trace.Span, status int) {
	if span == nil {
		return
	}
	span.SetAttributes(semconv.HTTPResponseStatusCodeKey.Int(status))
	if status >= 500 {
		span.SetStatus(codes.Error, strconv.Itoa(status))
	}
	span.End()
}

// traceChat adds what the GenAI conventions ask of a chat request to the
// server span: the operation and the model asked for, then the model that
// answered and its token counts. Never the prompt or the answer.
func traceChat(ctx context.Context, requested string, resp router.Response) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(semconv.GenAIOperationNameKey.String("chat"), semconv.GenAIRequestModelKey.String(requested))
	if resp.Provider != "" {
		span.SetAttributes(semconv.GenAIProviderNameKey.String(resp.Provider), semconv.GenAIResponseModelKey.String(resp.Model))
	}
	if u := resp.Usage; u != nil {
		span.SetAttributes(semconv.GenAIUsageInputTokensKey.Int(u.PromptTokens), semconv.GenAIUsageOutputTokensKey.Int(u.CompletionTokens))
	}
}
