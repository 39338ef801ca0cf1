// Command production_app is the reference gateway: bounded concurrency,
// per-tenant rate limits, layered deadlines, jittered retries, health-aware
// fallback across providers, RED and saturation metrics, and a graceful
// drain on SIGTERM. By default it serves two simulated providers, so it runs
// with nothing else installed:
//
//	go run ./solutions/production_app            # or: make run
//	go run ./solutions/production_app -h         # every flag, and its environment variable
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/httpapi"
	"github.com/production-go/gateway-lab/solutions/providers/openaicompat"
	"github.com/production-go/gateway-lab/solutions/providers/sim"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

// defaultProviders are used when no -provider flag is given.
var defaultProviders = []string{
	"name=alpha,latency=80ms,jitter=40ms,chunk-delay=15ms,error-rate=0.02,errors=500|reset",
	"name=beta,latency=150ms,jitter=60ms,chunk-delay=20ms,error-rate=0.01,errors=500",
}

type config struct {
	addr                                  string
	gw                                    gateway.Config
	seed                                  uint64
	firstToken, idle                      time.Duration
	readinessDelay, grace, shutdownBudget time.Duration
	maxBody                               int64
	logLevel                              string
	providers                             []string
	upstreams                             []string
	routes                                []string
	routesFile                            string
}

// parseConfig reads flags, each of which may also come from the environment
// as GATEWAY_<FLAG> (e.g. GATEWAY_MAX_CONCURRENT=64); a flag on the command
// line wins.
func parseConfig(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("production_app", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "listen address")
	fs.Float64Var(&c.gw.RatePerSecond, "rate", 10, "requests per second per tenant (token refill rate)")
	fs.IntVar(&c.gw.Burst, "burst", 20, "burst per tenant (token bucket size)")
	fs.IntVar(&c.gw.MaxConcurrent, "max-concurrent", 32, "requests in flight at once")
	fs.DurationVar(&c.gw.MaxQueueWait, "max-queue-wait", 2*time.Second, "how long a request may wait for a slot (0: don't wait)")
	fs.IntVar(&c.gw.MaxAttempts, "max-attempts", 3, "attempts per request, the first included")
	fs.DurationVar(&c.gw.BaseBackoff, "base-backoff", 100*time.Millisecond, "cap on the first retry's jittered backoff")
	fs.DurationVar(&c.gw.MaxBackoff, "max-backoff", 2*time.Second, "cap on any backoff")
	fs.DurationVar(&c.gw.AttemptTimeout, "attempt-timeout", 10*time.Second, "limit on one provider call")
	fs.DurationVar(&c.gw.TotalTimeout, "total-timeout", 30*time.Second, "limit on a whole request, attempts and backoffs included")
	fs.IntVar(&c.gw.FailureThreshold, "failure-threshold", 5, "consecutive failures that open a provider's breaker")
	fs.DurationVar(&c.gw.RecoveryTimeout, "recovery-timeout", 30*time.Second, "how long a breaker stays open before one probe")
	fs.DurationVar(&c.firstToken, "first-token-timeout", 10*time.Second, "streams: limit on the wait for the first chunk")
	fs.DurationVar(&c.idle, "stream-idle-timeout", 10*time.Second, "streams: limit on the gap between chunks")
	fs.DurationVar(&c.readinessDelay, "readiness-delay", 2*time.Second, "on SIGTERM, keep serving this long after /readyz turns 503")
	fs.DurationVar(&c.grace, "drain-grace", 20*time.Second, "on SIGTERM, how long in-flight requests may finish")
	fs.DurationVar(&c.shutdownBudget, "shutdown-timeout", 5*time.Second, "after the drain, limit on closing connections")
	fs.Int64Var(&c.maxBody, "max-body-bytes", 1<<20, "largest request body accepted (413 above)")
	fs.Uint64Var(&c.seed, "seed", 0, "seed for jitter and simulated providers (0: random; printed at start to replay)")
	fs.StringVar(&c.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.Func("provider", "a simulated provider, repeatable, in priority order: name=alpha,latency=80ms,jitter=40ms,chunk-delay=15ms,error-rate=0.05,errors=500|429|reset|timeout|400,outage=30s-60s (default: alpha and beta)",
		func(v string) error { c.providers = append(c.providers, v); return nil })
	fs.Func("upstream", "an OpenAI-compatible upstream, repeatable, tried before simulated providers: name=up,url=https://host/v1,model=small-1,key-env=UP_API_KEY (the key is read from that environment variable, never from a flag)",
		func(v string) error { c.upstreams = append(c.upstreams, v); return nil })
	fs.Func("route", "a public model name and its targets in order, repeatable: chat=alpha:alpha-large,beta:beta-small (\"auto\" and each provider's name always exist)",
		func(v string) error { c.routes = append(c.routes, v); return nil })
	fs.StringVar(&c.routesFile, "routes", "", "JSON route table `file`: {\"routes\":[{\"model\":\"chat\",\"targets\":[{\"provider\":\"alpha\",\"model\":\"alpha-large\"}]}]}")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: production_app [flags]\n\nThe reference AI gateway. Every flag can also be set as GATEWAY_<FLAG> in the environment\n(upper case, dashes as underscores, e.g. GATEWAY_MAX_CONCURRENT=64); a command-line flag wins.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		env := "GATEWAY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !set[f.Name] && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", env, v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	if len(c.providers) == 0 && len(c.upstreams) == 0 {
		c.providers = defaultProviders
	}
	if c.seed == 0 {
		c.seed = rand.Uint64()
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, ln net.Listener) int {
	c, err := parseConfig(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "production_app:", err)
		return 2
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.logLevel)); err != nil {
		fmt.Fprintf(stderr, "production_app: -log-level %q: want debug, info, warn or error\n", c.logLevel)
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: level}))

	var providers []gateway.Provider
	for _, spec := range c.upstreams {
		uc, err := openaicompat.ParseSpec(spec, os.Getenv)
		if err == nil {
			var p *openaicompat.Provider
			if p, err = openaicompat.New(uc); err == nil {
				defer p.Close()
				providers = append(providers, p)
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "production_app: -upstream:", err)
			return 2
		}
	}
	for i, spec := range c.providers {
		pc, err := sim.Parse(spec)
		if err != nil {
			fmt.Fprintln(stderr, "production_app: -provider:", err)
			return 2
		}
		if pc.Seed == 0 {
			pc.Seed = c.seed + uint64(i) + 1
		}
		p, err := sim.New(pc)
		if err != nil {
			fmt.Fprintln(stderr, "production_app: -provider:", err)
			return 2
		}
		providers = append(providers, p)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var gw *gateway.Gateway // the gauges read it on scrape, after it exists
	metrics := httpapi.NewMetrics(reg, httpapi.Gauges{InFlight: func() int { return gw.InFlight() }, Capacity: func() int { return gw.Capacity() }})
	c.gw.Observer = metrics
	c.gw.Rand = nil // the global source: safe across goroutines
	gw, err = gateway.New(c.gw, providers...)
	if err != nil {
		fmt.Fprintln(stderr, "production_app:", err)
		return 2
	}
	metrics.InitProviders(gw.Providers())
	routes, err := loadRoutes(c.routesFile, c.routes, gw.Providers())
	if err != nil {
		fmt.Fprintln(stderr, "production_app:", err)
		return 2
	}

	d := drain.New()
	api := httpapi.New(httpapi.Options{
		Gateway: gw, Drainer: d, Metrics: metrics, Logger: log, MaxBodyBytes: c.maxBody,
		MetricsPage: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}),
		Stream:      gateway.StreamLimits{FirstToken: c.firstToken, Idle: c.idle},
		Routes:      routes,
	})
	if ln == nil {
		if ln, err = net.Listen("tcp", c.addr); err != nil {
			fmt.Fprintln(stderr, "production_app: listen:", err)
			return 1
		}
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}

	addr := ln.Addr().String()
	log.Info("listening", "addr", addr, "providers", gw.Providers(), "seed", c.seed,
		"max_concurrent", c.gw.MaxConcurrent, "rate", c.gw.RatePerSecond, "burst", c.gw.Burst)
	fmt.Fprintf(stdout, "gateway listening on http://%s  providers: %s  seed: %d\n", addr, strings.Join(gw.Providers(), ", "), c.seed)
	fmt.Fprintf(stdout, "try:  curl -s http://%s/v1/chat/completions -H 'Content-Type: application/json' -H 'X-Tenant-ID: demo' \\\n        -d '{\"model\":\"auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}'\n", addr)
	fmt.Fprintf(stdout, "      (\"stream\":true for SSE; GET /v1/models, /metrics, /readyz; Ctrl-C drains and exits)\n")

	report, err := drain.Serve(ctx, srv, ln, d, drain.ServeOptions{ReadinessDelay: c.readinessDelay, Grace: c.grace, ShutdownTimeout: c.shutdownBudget})
	closeCtx, cancel := context.WithTimeout(context.Background(), c.shutdownBudget)
	defer cancel()
	if cerr := gw.Close(closeCtx); cerr != nil {
		log.Warn("abandoned provider calls still running at exit", "error", cerr)
	}
	if err != nil {
		log.Error("shutdown", "error", err, "drained", report.Drained, "cut", report.Cut)
		return 1
	}
	if report.Drained {
		log.Info("drained", "drained", true, "cut", 0)
	} else {
		log.Warn("drain budget ended with requests in flight", "drained", false, "cut", report.Cut)
	}
	fmt.Fprintf(stdout, "stopped: drained=%t cut=%d\n", report.Drained, report.Cut)
	return 0
}
