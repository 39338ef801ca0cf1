package telemetry

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
)

// Tracing starts an OTLP/HTTP span exporter when OTEL_EXPORTER_OTLP_ENDPOINT
// (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) names a collector; the exporter
// reads the other OTEL_* variables itself. It returns nil when neither is
// set — tracing off costs nothing — and otherwise the tracer provider,
// whose Shutdown flushes the spans not yet exported. The service name is
// OTEL_SERVICE_NAME, or "gateway".
func Tracing(getenv func(string) string) (*sdktrace.TracerProvider, error) {
	if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil
	}
	exp, err := otlptracehttp.New(context.Background())
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	name := cmp.Or(getenv("OTEL_SERVICE_NAME"), "gateway")
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceNameKey.String(name)))), nil
}

// ShutdownTracing flushes tp's spans within two seconds; nil is a no-op.
func ShutdownTracing(tp *sdktrace.TracerProvider) {
	if tp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = tp.Shutdown(ctx)
}
