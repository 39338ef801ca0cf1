package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime/trace"
	"strings"
	"time"

	drain "github.com/production-go/gateway-lab/solutions/05-drain"
)

// Serve listens on ln (or Config.Addr when ln is nil), serves until ctx
// ends, then drains: readiness off, the readiness delay, in-flight
// requests finish within the grace, the rest are cut and counted. It
// prints where it listens and what to try to stdout, and returns the
// drain's report.
func (s *Service) Serve(ctx context.Context, ln net.Listener, stdout io.Writer, try string) (drain.Report, error) {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.Config.Addr); err != nil {
			return drain.Report{}, fmt.Errorf("listen: %w", err)
		}
	}
	// ReadTimeout bounds reading a whole request — headers and body — for
	// every handler, including the ones that refuse a request without
	// reading its body (401, 404, 405), after which net/http would
	// otherwise wait for the rest of that body forever. The chat handlers
	// set their own body deadline and clear it once the body is in, so a
	// long stream is not cut by it.
	srv := s.publicServer()
	admin, err := s.serveAdmin()
	if err != nil {
		return drain.Report{}, err
	}
	defer admin()
	addr := ln.Addr().String()
	g := s.Config.Router
	limits := []any{"rate", s.Config.Tenant.RatePerSecond, "burst", s.Config.Tenant.Burst}
	if s.sharedRate {
		limits = []any{"rate_limiter", "shared"}
	}
	if c := s.Config; c.AdaptiveLimit != "" {
		limits = append(limits, "adaptive_limit", c.AdaptiveLimit)
	}
	if h := s.Config.Hedge; h.Delay > 0 {
		limits = append(limits, "hedge_delay", h.Delay.String(), "hedge_percentile", h.Percentile)
	}
	if b := s.Config.RetryBudget; b.Percent > 0 {
		limits = append(limits, "retry_budget", b.Percent, "retry_budget_min", b.MinPerSec, "retry_budget_window", b.TTL.String())
	}
	s.Log.Info("listening", append([]any{"addr", addr, "providers", s.Router.Providers(), "seed", s.Config.Seed,
		"max_concurrent", g.Slots.MaxConcurrent, "max_per_tenant", s.Config.Tenant.MaxInFlight}, limits...)...)
	fmt.Fprintf(stdout, "gateway listening on http://%s  providers: %s  seed: %d\n", addr, strings.Join(s.Router.Providers(), ", "), s.Config.Seed)
	if try != "" {
		fmt.Fprint(stdout, strings.ReplaceAll(try, "{addr}", addr))
	}

	c := s.Config
	report, err := drain.Serve(ctx, srv, ln, s.Drainer, drain.ServeOptions{ReadinessDelay: c.ReadinessDelay, Grace: c.Grace, ShutdownTimeout: c.ShutdownTimeout})
	if err != nil && report.Drained && errors.Is(err, context.DeadlineExceeded) {
		// Every request finished; what outlived the shutdown budget were
		// connections that never sent one (net/http waits up to 5 s for a
		// new connection's first request). Closing them cuts nothing.
		s.Log.Info("closed connections that never sent a request", "error", err)
		err = nil
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	if cerr := s.Router.Close(closeCtx); cerr != nil {
		s.Log.Warn("abandoned provider calls still running at exit", "error", cerr)
	}
	s.Close()
	switch {
	case err != nil:
		s.Log.Error("shutdown", "error", err, "drained", report.Drained, "cut", report.Cut)
	case report.Drained:
		s.Log.Info("drained", "drained", true, "cut", 0)
	default:
		s.Log.Warn("drain budget ended with requests in flight", "drained", false, "cut", report.Cut)
	}
	return report, err
}

// The admin listener's limits. Its clients are a Prometheus scraper and
// the kubelet's probes: each sends a small GET in one go and reads the
// answer as it comes, so anything slower is a client holding a goroutine
// and a connection on an unauthenticated port, and is cut.
const (
	// A scrape's or a probe's few headers arrive in one packet.
	adminReadHeaderTimeout = 5 * time.Second
	// The whole request, a body included. No admin route takes one; this
	// bounds a client that sends one anyway, which net/http reads (up to
	// 256 KiB) before it answers.
	adminReadTimeout = 10 * time.Second
	// From the end of the request to the last byte of the answer,
	// gathering the registry included. Prometheus abandons a scrape at its
	// scrape_timeout — 10 s by default, never more than the scrape
	// interval — so a minute never cuts a scrape it still waits for, at
	// intervals up to a minute, however big the registry: it only frees a
	// client that stopped reading.
	adminWriteTimeout = time.Minute
	// Longer than a one-minute scrape interval, so the scraper's kept-alive
	// connection lasts from one scrape to the next; an idle connection
	// beyond that is closed. (The kubelet's probes do not keep alive.)
	adminIdleTimeout = 90 * time.Second
	// A scrape's headers are a few hundred bytes (more with a bearer
	// token); net/http answers 431 past this plus its 4 KiB of slack.
	adminMaxHeaderBytes = 8 << 10
)

// PublicMaxHeaderBytes caps a request's header block on the public
// listener, read before anyone is known: a bearer token (a JWT of a few
// KiB), an SDK's dozen headers and a trace context fit many times over;
// net/http answers 431 past it (plus its own 4 KiB of slack), so a
// stranger cannot make the gateway hold a megabyte of headers per
// connection. The body has its own limit (-max-body-bytes).
const PublicMaxHeaderBytes = 16 << 10

// publicServer is the API's listener: every timeout and the header cap.
func (s *Service) publicServer() *http.Server {
	return &http.Server{Handler: s.API, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10*time.Second + s.Config.BodyTimeout,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: PublicMaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn)}
}

// serveAdmin starts the admin listener (metrics and probes), if one is
// configured, and returns the func that stops it.
func (s *Service) serveAdmin() (stop func(), err error) {
	if s.Config.AdminAddr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", s.Config.AdminAddr)
	if err != nil {
		return nil, fmt.Errorf("admin listen: %w", err)
	}
	var fr *trace.FlightRecorder
	if s.Config.FlightRecorder > 0 {
		fr = trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: s.Config.FlightRecorder})
		if err := fr.Start(); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("flight recorder: %w", err)
		}
	}
	srv := s.adminServer()
	if fr != nil {
		srv.Handler.(*http.ServeMux).Handle("GET /debug/flightrecorder", flightRecording(fr))
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	s.Log.Info("admin listening", "addr", ln.Addr().String(), "pprof", s.Config.Pprof, "flight_recorder", s.Config.FlightRecorder.String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
		if fr != nil {
			fr.Stop()
		}
	}, nil
}

// flightRecording writes the flight recorder's window of the execution
// trace: `go tool trace` reads it.
func flightRecording(fr *trace.FlightRecorder) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", `attachment; filename="flight.trace"`)
		if _, err := fr.WriteTo(w); err != nil {
			http.Error(w, "flight recorder: "+err.Error(), http.StatusServiceUnavailable)
		}
	})
}

// adminServer is the admin listener's server: /metrics, /healthz and
// /readyz, with every limit above.
func (s *Service) adminServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.MetricsPage())
	mux.Handle("GET /healthz", s.Drainer.Liveness())
	mux.Handle("GET /readyz", s.Drainer.Readiness())
	if s.Config.Pprof {
		// Registered by hand, on this mux only: importing net/http/pprof
		// also registers on http.DefaultServeMux, which nothing here serves.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return &http.Server{Handler: mux,
		ReadHeaderTimeout: adminReadHeaderTimeout, ReadTimeout: adminReadTimeout,
		WriteTimeout: adminWriteTimeout, IdleTimeout: adminIdleTimeout,
		MaxHeaderBytes: adminMaxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn)}
}

// NewLogger is the services' JSON logger at level ("debug", "info", "warn", "error").
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}
