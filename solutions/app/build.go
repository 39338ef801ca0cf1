package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/httpapi"
	"github.com/production-go/gateway-lab/solutions/providers/openaicompat"
	"github.com/production-go/gateway-lab/solutions/providers/sim"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Service is a built gateway, ready to serve.
type Service struct {
	Config   Config
	Gateway  *gateway.Gateway
	API      *httpapi.Server
	Drainer  *drain.Drainer
	Metrics  *httpapi.Metrics
	Registry *prometheus.Registry
	Log      *slog.Logger
	// Tracer is the OpenTelemetry tracer provider when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set (spans go there over OTLP/HTTP);
	// nil otherwise, and then nothing is traced.
	Tracer  *sdktrace.TracerProvider
	closers []func()
}

// Hooks let a service add to the assembly without copying it.
type Hooks struct {
	// API, if set, adjusts the HTTP options (identity, admission) before
	// the server is built.
	API func(opts *httpapi.Options)
	// Gateway, if set, adjusts the gateway's config before it is built.
	Gateway func(cfg *gateway.Config)
	// Upstream, if set, adjusts each OpenAI-compatible upstream's config
	// (an egress guard, say) before it is built.
	Upstream func(cfg *openaicompat.Config)
}

// Build makes the providers, the gateway, its routes and metrics, and the
// HTTP API. Errors are configuration errors, worded for the person who
// typed the flags.
func Build(c Config, log *slog.Logger, hooks Hooks) (*Service, error) {
	s := &Service{Config: c, Log: log, Registry: prometheus.NewRegistry(), Drainer: drain.New()}
	s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.Metrics = httpapi.NewMetrics(s.Registry)
	if err := s.tracing(); err != nil {
		return nil, err
	}
	providers, err := s.providers(hooks.Upstream)
	if err != nil {
		s.Close()
		return nil, err
	}
	if providers, err = s.limitProviders(providers, s.Registry); err != nil {
		s.Close()
		return nil, err
	}
	budget, err := s.retryBudget()
	if err == nil {
		providers, err = s.hedgeProviders(providers, budget) // outside the limit: a hedge takes a permit of its own
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	gc := c.Gateway
	if budget != nil {
		gc.RetryBudget = budget
	}
	gc.Observer = s.Metrics
	gc.Tracer = s.tracerOrNil()
	if hooks.Gateway != nil {
		hooks.Gateway(&gc)
	}
	s.Config.Gateway = gc // what the service runs with, for its startup line
	if s.Gateway, err = gateway.New(gc, providers...); err != nil {
		s.Close()
		return nil, err
	}
	s.Metrics.WatchGateway(s.Gateway)
	s.Metrics.WatchHedging(s.Gateway.Providers(), c.Hedge != HedgeConfig{}, budget != nil)
	routes, err := LoadRoutes(c.RoutesFile, c.Routes, s.Gateway.Providers())
	for i := 0; err == nil && i < len(routes); i++ {
		err = s.Gateway.AddTargets(routes[i].Targets...)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	opts := httpapi.Options{
		Gateway: s.Gateway, Drainer: s.Drainer, Metrics: s.Metrics, Logger: log, MaxBodyBytes: c.MaxBody, Tracer: s.tracerOrNil(),
		BodyTimeout: c.BodyTimeout, WriteTimeout: c.WriteTimeout, OverheadHeader: c.OverheadHeader,
		Stream: gateway.StreamLimits{FirstToken: c.FirstToken, Idle: c.Idle}, Routes: routes,
	}
	if c.AdminAddr == "" {
		opts.MetricsPage = s.MetricsPage() // on the API listener; with -admin-addr, only on the admin one
	}
	if hooks.API != nil {
		hooks.API(&opts)
	}
	s.API = httpapi.New(opts)
	return s, nil
}

// MetricsPage serves the service's metrics.
func (s *Service) MetricsPage() http.Handler {
	return promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{Registry: s.Registry})
}

// providers makes the upstreams (first, in order) and the simulated providers.
func (s *Service) providers(upstream func(*openaicompat.Config)) ([]gateway.Provider, error) {
	var out []gateway.Provider
	for _, spec := range s.Config.Upstreams {
		uc, err := openaicompat.ParseSpec(spec, os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("-upstream: %w", err)
		}
		uc.Tracer = s.tracerOrNil()
		uc.OnTiming = func(t openaicompat.Timing) { s.Metrics.ObserveUpstream(t.Provider, t.Connect, t.Headers) }
		if upstream != nil {
			upstream(&uc)
		}
		p, err := openaicompat.New(uc)
		if err != nil {
			return nil, fmt.Errorf("-upstream: %w", err)
		}
		s.closers = append(s.closers, p.Close)
		out = append(out, p)
	}
	for i, spec := range s.Config.Providers {
		pc, err := sim.Parse(spec)
		if err != nil {
			return nil, fmt.Errorf("-provider: %w", err)
		}
		if pc.Seed == 0 {
			pc.Seed = s.Config.Seed + uint64(i) + 1
		}
		p, err := sim.New(pc)
		if err != nil {
			return nil, fmt.Errorf("-provider: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Close releases the upstreams' idle connections and flushes the spans
// not yet exported.
func (s *Service) Close() {
	for _, c := range s.closers {
		c()
	}
	s.closers = nil
}

// tracing starts an OTLP/HTTP span exporter when OTEL_EXPORTER_OTLP_ENDPOINT
// names a collector (the exporter reads the OTEL_* variables itself). Off
// otherwise: an unset variable costs nothing.
func (s *Service) tracing() error {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil
	}
	exp, err := otlptracehttp.New(context.Background())
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	name := os.Getenv("OTEL_SERVICE_NAME")
	if name == "" {
		name = "gateway"
	}
	s.Tracer = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceNameKey.String(name))))
	s.closers = append(s.closers, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Tracer.Shutdown(ctx)
	})
	s.Log.Info("tracing", "exporter", "otlp/http", "service", name)
	return nil
}

// tracerOrNil is the tracer provider as the parts take it: nil when off.
func (s *Service) tracerOrNil() trace.TracerProvider {
	if s.Tracer == nil {
		return nil
	}
	return s.Tracer
}
