package openaicompat

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// callSpan is one upstream call's client span; its methods do nothing when
// tracing is off.
type callSpan struct{ span trace.Span }

func (p *Provider) span(ctx context.Context, model string) (context.Context, callSpan) {
	if p.tracer == nil {
		return ctx, callSpan{}
	}
	host := ""
	if u, err := url.Parse(p.endpoint); err == nil {
		host = u.Hostname()
	}
	ctx, span := p.tracer.Start(ctx, "chat "+model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		semconv.GenAIOperationNameKey.String("chat"), semconv.GenAIProviderNameKey.String(p.cfg.Name),
		semconv.GenAIRequestModelKey.String(model), semconv.ServerAddressKey.String(host)))
	return ctx, callSpan{span}
}

// inject sends the span's trace context to the upstream (W3C traceparent),
// so its own traces join the caller's.
func (c callSpan) inject(h http.Header) {
	if c.span != nil {
		propagation.TraceContext{}.Inject(trace.ContextWithSpan(context.Background(), c.span), propagation.HeaderCarrier(h))
	}
}

func (c callSpan) status(code int) {
	if c.span == nil {
		return
	}
	c.span.SetAttributes(semconv.HTTPResponseStatusCodeKey.Int(code))
	if code >= 400 {
		c.span.SetStatus(codes.Error, strconv.Itoa(code))
	}
}

func (c callSpan) fail(reason string) {
	if c.span != nil {
		c.span.SetStatus(codes.Error, reason)
	}
}

func (c callSpan) end() {
	if c.span != nil {
		c.span.End()
	}
}

// timed measures where a call's time goes before the body (see Timing),
// when Config.OnTiming asks for it. The hooks share one record (a closure
// per captured variable would cost an allocation each), and the TLS ones
// are set only for an https upstream.
func (p *Provider) timed(ctx context.Context) context.Context {
	if p.cfg.OnTiming == nil {
		return ctx
	}
	r := &callTiming{p: p, t: Timing{Provider: p.cfg.Name}}
	trace := &httptrace.ClientTrace{
		ConnectStart:         func(string, string) { r.connectStart = time.Now() },
		ConnectDone:          func(string, string, error) { r.t.Connect += time.Since(r.connectStart) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { r.wrote = time.Now() },
		GotFirstResponseByte: func() { r.t.Headers = time.Since(r.wrote); r.p.cfg.OnTiming(r.t) },
	}
	if p.tls {
		trace.TLSHandshakeStart = func() { r.tlsStart = time.Now() }
		trace.TLSHandshakeDone = func(tls.ConnectionState, error) { r.t.Connect += time.Since(r.tlsStart) }
	}
	return httptrace.WithClientTrace(ctx, trace)
}

// callTiming is one call's timing as its trace hooks take it.
type callTiming struct {
	p                             *Provider
	t                             Timing
	connectStart, tlsStart, wrote time.Time
}
