package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	srv := &http.Server{Handler: s.API, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10*time.Second + s.Config.BodyTimeout,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(s.Log.Handler(), slog.LevelWarn)}
	admin, err := s.serveAdmin()
	if err != nil {
		return drain.Report{}, err
	}
	defer admin()
	addr := ln.Addr().String()
	g := s.Config.Router
	limits := []any{"rate", g.RatePerSecond, "burst", g.Burst}
	if g.Limiter != nil {
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
		"max_concurrent", g.MaxConcurrent, "max_per_tenant", g.MaxPerTenant}, limits...)...)
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
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.MetricsPage())
	mux.Handle("GET /healthz", s.Drainer.Liveness())
	mux.Handle("GET /readyz", s.Drainer.Readiness())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	s.Log.Info("admin listening", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// NewLogger is the services' JSON logger at level ("debug", "info", "warn", "error").
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}
