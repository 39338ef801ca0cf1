package service

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/production-go/gateway-lab/gateway/httpapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/providers/openaicompat"
	"github.com/production-go/gateway-lab/gateway/providers/sim"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/production-go/gateway-lab/gateway/tenant"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	hedging "github.com/production-go/gateway-lab/solutions/10-hedging"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Service is a built gateway, ready to serve.
type Service struct {
	Config   Config
	Router   *router.Router
	API      *httpapi.Server
	Drainer  *drain.Drainer
	Metrics  *telemetry.Metrics
	Registry *prometheus.Registry
	Log      *slog.Logger
	// Tracer is the OpenTelemetry tracer provider when
	// OTEL_EXPORTER_OTLP_ENDPOINT is set (spans go there over OTLP/HTTP);
	// nil otherwise, and then nothing is traced.
	Tracer *sdktrace.TracerProvider
	// Gate is the tenant gate: each tenant's rate and requests in flight.
	Gate       *tenant.Gate
	sharedRate bool // a Hooks.Gate set the gate's limiter
	closers    []func()
}

// Hooks let a service add to the assembly without copying it.
type Hooks struct {
	// API, if set, adjusts the HTTP options (identity, admission) before
	// the server is built.
	API func(opts *httpapi.Options)
	// Router, if set, adjusts the router's config before it is built.
	Router func(cfg *router.Config)
	// Gate, if set, adjusts the tenant gate's config before it is built
	// (secure_app sets a rate limiter shared by every replica).
	Gate func(cfg *tenant.GateConfig)
	// Upstream, if set, adjusts each OpenAI-compatible upstream's config
	// (an egress guard, say) before it is built.
	Upstream func(cfg *openaicompat.Config)
	// Provider, if set, wraps each provider itself, inside the adaptive
	// limit and the hedge (secure_app charges every upstream call to its
	// request's token quota here, each hedge included).
	Provider func(llm.Provider) llm.Provider
}

// Build makes the providers and their middlewares, the router with its
// routes, the telemetry and the HTTP API. Errors are configuration errors,
// worded for the person who typed the flags.
func Build(c Config, log *slog.Logger, hooks Hooks) (*Service, error) {
	s := &Service{Config: c, Log: log, Registry: prometheus.NewRegistry(), Drainer: drain.New()}
	s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.Metrics = telemetry.New(s.Registry)
	if err := s.build(hooks); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Service) build(hooks Hooks) error {
	tp, err := telemetry.Tracing(os.Getenv)
	if err != nil {
		return err
	}
	if tp != nil {
		s.Tracer = tp
		s.closers = append(s.closers, func() { telemetry.ShutdownTracing(tp) })
		s.Log.Info("tracing", "exporter", "otlp/http")
	}
	providers, budget, err := s.providers(hooks)
	if err != nil {
		return err
	}
	if err := s.buildRouter(providers, budget, hooks.Router); err != nil {
		return err
	}
	if err := s.buildGate(hooks.Gate); err != nil {
		return err
	}
	opts := httpapi.Options{
		Router: s.Router, Gate: s.Gate, Drainer: s.Drainer, Metrics: s.Metrics, Logger: s.Log, MaxBodyBytes: s.Config.MaxBody, Tracer: s.tracerOrNil(),
		BodyTimeout: s.Config.BodyTimeout, WriteTimeout: s.Config.WriteTimeout, OverheadHeader: s.Config.OverheadHeader,
		Stream: router.StreamLimits{FirstToken: s.Config.FirstToken, Idle: s.Config.Idle},
	}
	if s.Config.AdminAddr == "" {
		opts.MetricsPage = s.MetricsPage() // on the API listener; with -admin-addr, only on the admin one
	}
	if hooks.API != nil {
		hooks.API(&opts)
	}
	s.API = httpapi.New(opts)
	return nil
}

// buildGate makes the tenant gate: lab 02's token bucket per tenant, unless
// the hook sets a limiter of its own, and the per-tenant in-flight cap.
func (s *Service) buildGate(hook func(*tenant.GateConfig)) error {
	tc := s.Config.Tenant
	gc := tenant.GateConfig{MaxInFlight: tc.MaxInFlight, Observer: s.Metrics}
	if hook != nil {
		hook(&gc)
	}
	s.sharedRate = gc.Limiter != nil
	if gc.Limiter == nil {
		buckets, err := admission.NewTokenBucket(tc.RatePerSecond, tc.Burst)
		if err != nil {
			return fmt.Errorf("-rate and -burst: %w", err)
		}
		gc.Limiter = buckets
	}
	var err error
	if s.Gate, err = tenant.NewGate(gc); err != nil {
		return fmt.Errorf("-max-per-tenant: %w", err)
	}
	return nil
}

// providers makes the upstreams and simulated providers, each behind its
// middlewares: the adaptive limit inside, the hedge outside it (a hedge
// takes a permit of its own).
func (s *Service) providers(hooks Hooks) ([]llm.Provider, *hedging.Budget, error) {
	providers, err := s.upstreams(hooks.Upstream)
	if err != nil {
		return nil, nil, err
	}
	if hooks.Provider != nil {
		for i, p := range providers {
			providers[i] = hooks.Provider(p)
		}
	}
	if providers, err = s.limitProviders(providers); err != nil {
		return nil, nil, err
	}
	budget, err := s.retryBudget()
	if err != nil {
		return nil, nil, err
	}
	providers, err = s.hedgeProviders(providers, budget)
	return providers, budget, err
}

// buildRouter makes the router over providers, with the routes, the retry
// budget and the telemetry, and watches it.
func (s *Service) buildRouter(providers []llm.Provider, budget *hedging.Budget, hook func(*router.Config)) error {
	rc := s.Config.Router
	if budget != nil {
		rc.RetryBudget = budget
	}
	rc.Observer = s.Metrics
	rc.Tracer = s.tracerOrNil()
	routes, err := LoadRoutes(s.Config.RoutesFile, s.Config.Routes)
	if err != nil {
		return err
	}
	rc.Routes = routes
	if hook != nil {
		hook(&rc)
	}
	s.Config.Router = rc // what the service runs with, for its startup line
	if s.Router, err = router.New(rc, providers...); err != nil {
		return err
	}
	s.Metrics.WatchRouter(s.Router)
	s.Metrics.WatchHedging(s.Router.Providers(), s.Config.Hedge != HedgeConfig{}, budget != nil)
	return nil
}

// MetricsPage serves the service's metrics.
func (s *Service) MetricsPage() http.Handler {
	return promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{Registry: s.Registry})
}

// upstreams makes the OpenAI-compatible upstreams (first, in order) and
// the simulated providers.
func (s *Service) upstreams(hook func(*openaicompat.Config)) ([]llm.Provider, error) {
	var out []llm.Provider
	for _, spec := range s.Config.Upstreams {
		uc, err := openaicompat.ParseSpec(spec, os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("-upstream: %w", err)
		}
		uc.Tracer = s.tracerOrNil()
		uc.OnTiming = func(t openaicompat.Timing) { s.Metrics.UpstreamTiming(t.Provider, t.Connect, t.Headers) }
		if hook != nil {
			hook(&uc)
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

// tracerOrNil is the tracer provider as the parts take it: nil when off.
func (s *Service) tracerOrNil() trace.TracerProvider {
	if s.Tracer == nil {
		return nil
	}
	return s.Tracer
}
