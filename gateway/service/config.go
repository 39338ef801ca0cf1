// Package service is the assembly the two reference services share:
// configuration from flags and GATEWAY_* variables, the providers and
// their middlewares, the router with its routes, telemetry, the HTTP API,
// and serving with a drain on shutdown. production_app is this package
// with its defaults; secure_app adds identity, tier policy and shared
// limits through Hooks (package guard) — wiring, not a copy.
package service

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/router"
)

// TenantConfig is what the tenant gate (tenant.Gate) holds each tenant to.
type TenantConfig struct {
	RatePerSecond float64 // per tenant: lab 02's token bucket, unless Hooks.Gate sets a shared limiter
	Burst         int
	MaxInFlight   int // a tenant's requests in flight in this process; 0: no cap
}

// Config is everything a service is started with.
type Config struct {
	Addr string
	// AdminAddr, if set, serves /metrics (and the probes) on a listener of
	// its own, and not on Addr.
	AdminAddr string
	// Pprof serves net/http/pprof's profiles under /debug/pprof/ on the
	// admin listener — never on Addr, whatever this says.
	Pprof bool
	// FlightRecorder, if positive, keeps about that much of the runtime's
	// execution trace in memory and serves it at /debug/flightrecorder on
	// the admin listener: the seconds before an incident, taken after it.
	FlightRecorder time.Duration
	Router         router.Config
	// Tenant is what the tenant gate holds each tenant to.
	Tenant TenantConfig
	// Seed drives the retry jitter and the simulated providers; 0 picks one
	// at random (printed at start, so a run can be replayed).
	Seed             uint64
	FirstToken, Idle time.Duration
	ReadinessDelay   time.Duration
	Grace            time.Duration
	ShutdownTimeout  time.Duration
	BodyTimeout      time.Duration
	WriteTimeout     time.Duration
	MaxBody          int64
	LogLevel         string
	OverheadHeader   bool
	Providers        []string // simulated provider specs
	Upstreams        []string // OpenAI-compatible upstream specs
	Routes           []string // -route specs
	RoutesFile       string
	// AdaptiveLimit, if set ("aimd" or "gradient"), puts each provider
	// behind its own adaptive concurrency limit (lab 09), with
	// Router.MaxConcurrent as the ceiling.
	AdaptiveLimit string
	// Hedge and RetryBudget are lab 10 in the gateway; both off when zero.
	Hedge       HedgeConfig
	RetryBudget BudgetConfig
}

// HedgeConfig says when a non-streamed provider call gets a second one.
type HedgeConfig struct {
	Delay      time.Duration // hedge a call still running after this long; 0: never hedge
	Percentile float64       // hedge at this percentile of the provider's recent latencies instead; 0: Delay always
}

// BudgetConfig is the retry budget every provider gets its own share of.
type BudgetConfig struct {
	Percent   float64       // retries and hedges, as a fraction of recent requests; 0: no budget
	MinPerSec int           // retries a second a quiet provider may make anyway
	TTL       time.Duration // the sliding window the fraction is taken over
}

// DefaultProviders are used when no -provider or -upstream flag is given.
var DefaultProviders = []string{
	"name=alpha,latency=80ms,jitter=40ms,chunk-delay=15ms,error-rate=0.02,errors=500|reset",
	"name=beta,latency=150ms,jitter=60ms,chunk-delay=20ms,error-rate=0.01,errors=500",
}

// Flags registers every flag on fs, with its default.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "listen address")
	fs.StringVar(&c.AdminAddr, "admin-addr", "", "serve /metrics, /healthz and /readyz on this address instead of -addr (\"\": on -addr)")
	fs.BoolVar(&c.Pprof, "admin-pprof", true, "serve /debug/pprof/ (goroutine, heap, CPU profiles, execution traces) on the -admin-addr listener; never on -addr")
	fs.DurationVar(&c.FlightRecorder, "flight-recorder", 0, "keep about this much of the execution trace in memory and serve it at /debug/flightrecorder on the -admin-addr listener (0: off)")
	c.routerFlags(fs)
	fs.DurationVar(&c.FirstToken, "first-token-timeout", 10*time.Second, "streams: limit on the wait for the first chunk")
	fs.DurationVar(&c.Idle, "stream-idle-timeout", 10*time.Second, "streams: limit on the gap between chunks")
	fs.DurationVar(&c.ReadinessDelay, "readiness-delay", 2*time.Second, "on SIGTERM, keep serving this long after /readyz turns 503")
	fs.DurationVar(&c.Grace, "drain-grace", 20*time.Second, "on SIGTERM, how long in-flight requests may finish")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", 5*time.Second, "after the drain, limit on closing connections")
	fs.DurationVar(&c.BodyTimeout, "body-timeout", 10*time.Second, "limit on reading a request body (408 after)")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", 10*time.Second, "limit on each write of an answer (whole or streamed) to a client that stopped reading")
	fs.Int64Var(&c.MaxBody, "max-body-bytes", 1<<20, "largest request body accepted (413 above)")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed for jitter and simulated providers (0: random; printed at start to replay)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&c.OverheadHeader, "overhead-header", false, "add X-Gateway-Overhead-Ms (the gateway's own time) to answers, for debugging")
	fs.Func("provider", "a simulated provider, repeatable, in priority order: name=alpha,latency=80ms,jitter=40ms,chunk-delay=15ms,error-rate=0.05,errors=500|429|reset|timeout|400|cut,outage=30s-60s,slow=20s-40s:800ms@0.1,capacity=8,seed=7 (default: alpha and beta)",
		func(v string) error { c.Providers = append(c.Providers, v); return nil })
	fs.Func("upstream", "an OpenAI-compatible upstream, repeatable, tried before simulated providers: name=up,url=https://host/v1,model=small-1,key-env=UP_API_KEY (the key is read from that environment variable, never from a flag); optional: dial-timeout=3s, header-timeout=30s, local=true (a private address, for development), stream-usage=false (an upstream that refuses stream_options), prefill=assistant|vllm|prefix (how it continues an answer, for a route target declared \"continue\": true), probe=chat|models|off (how it is probed while its breaker is open: a one-token completion, the default, or a models list)",
		func(v string) error { c.Upstreams = append(c.Upstreams, v); return nil })
	fs.Func("route", "a public model name and its targets in order, repeatable: chat=alpha:alpha-large,beta:beta-small (\"auto\" and each provider's name always exist)",
		func(v string) error { c.Routes = append(c.Routes, v); return nil })
	fs.StringVar(&c.RoutesFile, "routes", "", "JSON route table `file`: {\"routes\":[{\"model\":\"chat\",\"targets\":[{\"provider\":\"alpha\",\"model\":\"alpha-large\"}],\"fallback_on\":[\"context_length_exceeded\"]}]}")
}

func (c *Config) routerFlags(fs *flag.FlagSet) {
	g := &c.Router
	fs.Float64Var(&c.Tenant.RatePerSecond, "rate", 10, "requests per second per tenant (token refill rate)")
	fs.IntVar(&c.Tenant.Burst, "burst", 20, "burst per tenant (token bucket size)")
	fs.IntVar(&g.Slots.MaxConcurrent, "max-concurrent", 32, "requests in flight at once")
	fs.StringVar(&c.AdaptiveLimit, "adaptive-limit", "", "per-provider adaptive concurrency limit: aimd or gradient, up to -max-concurrent (\"\": off)")
	fs.IntVar(&c.Tenant.MaxInFlight, "max-per-tenant", -1, "requests one tenant may have in flight (-1: half of -max-concurrent; 0: no cap)")
	fs.DurationVar(&g.Slots.MaxQueueWait, "max-queue-wait", 2*time.Second, "how long a request may wait for a slot (0: don't wait)")
	fs.IntVar(&g.Retry.MaxAttempts, "max-attempts", 3, "attempts per request, the first included")
	fs.DurationVar(&c.Hedge.Delay, "hedge-delay", 0, "hedge a non-streamed provider call still running after this long with one more call to the same provider; the first answer wins (0: off)")
	fs.Float64Var(&c.Hedge.Percentile, "hedge-percentile", 0, "hedge at this percentile (e.g. 0.95) of each provider's last 100 calls answered without a hedge instead, -hedge-delay until 100 are in (0: always -hedge-delay)")
	fs.Float64Var(&c.RetryBudget.Percent, "retry-budget", 0, "retries and hedges per provider, as a fraction of its requests over -retry-budget-window, plus -retry-budget-min a second (e.g. 0.1; 0: off)")
	fs.IntVar(&c.RetryBudget.MinPerSec, "retry-budget-min", 10, "retries a second each provider may make whatever its traffic (with -retry-budget)")
	fs.DurationVar(&c.RetryBudget.TTL, "retry-budget-window", 10*time.Second, "the sliding window -retry-budget counts requests and retries over")
	fs.DurationVar(&g.Retry.BaseBackoff, "base-backoff", 100*time.Millisecond, "cap on the first retry's jittered backoff")
	fs.DurationVar(&g.Retry.MaxBackoff, "max-backoff", 2*time.Second, "cap on any backoff")
	fs.DurationVar(&g.Retry.AttemptTimeout, "attempt-timeout", 10*time.Second, "limit on one provider call")
	fs.DurationVar(&g.Retry.TotalTimeout, "total-timeout", 30*time.Second, "limit on a whole request, attempts and backoffs included")
	fs.IntVar(&g.Health.FailureThreshold, "failure-threshold", 5, "consecutive failures that open a target's breaker")
	fs.DurationVar(&g.Health.RecoveryTimeout, "recovery-timeout", 30*time.Second, "how long a breaker stays open before one request may probe it")
	fs.DurationVar(&g.Health.ProbeInterval, "probe-interval", 250*time.Millisecond,
		"while a target's breaker is open, probe its upstream in the background this long after it opened, then at doubling intervals; a probe that succeeds closes the breaker (0: off; each upstream's probe= says how)")
	fs.DurationVar(&g.Health.ProbeMaxInterval, "probe-max-interval", 2*time.Second, "the longest wait between two background probes of one target")
}

// Parse reads args, then GATEWAY_<FLAG> variables for every flag not on the
// command line (a flag wins), then fills the defaults that depend on other
// settings. extra, if set, registers a service's own flags. -h prints the
// usage and returns flag.ErrHelp.
func Parse(name string, args []string, stderr io.Writer, extra func(*flag.FlagSet)) (Config, error) {
	var c Config
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.Flags(fs)
	if extra != nil {
		extra(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\nEvery flag can also be set as GATEWAY_<FLAG> in the environment\n(upper case, dashes as underscores, e.g. GATEWAY_MAX_CONCURRENT=64); a command-line flag wins.\n\nflags:\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q (flags start with -)", fs.Arg(0))
	}
	if err := fromEnv(fs, os.LookupEnv); err != nil {
		return c, err
	}
	if err := needs(fs, "retry-budget", "retry-budget-min", "retry-budget-window"); err != nil {
		return c, err
	}
	if err := c.probeBounds(fs); err != nil {
		return c, err
	}
	c.defaults()
	return c, nil
}

// probeBounds lets -probe-interval above the default -probe-max-interval
// raise it (probes at that interval, no doubling), and refuses the two set
// the wrong way round.
func (c *Config) probeBounds(fs *flag.FlagSet) error {
	g := &c.Router
	if g.Health.ProbeInterval <= g.Health.ProbeMaxInterval {
		return nil
	}
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "probe-max-interval" })
	if set {
		return fmt.Errorf("-probe-max-interval %s is below -probe-interval %s", g.Health.ProbeMaxInterval, g.Health.ProbeInterval)
	}
	g.Health.ProbeMaxInterval = g.Health.ProbeInterval
	return nil
}

// needs refuses a flag that does nothing without another one: a setting
// that is silently ignored is a setting someone believes is on.
func needs(fs *flag.FlagSet, base string, dependents ...string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, d := range dependents {
		if set[d] && (!set[base] || fs.Lookup(base).Value.String() == "0") {
			return fmt.Errorf("-%s does nothing without -%s (e.g. -%s=0.1)", d, base, base)
		}
	}
	return nil
}

// fromEnv sets each flag not given on the command line from GATEWAY_<FLAG>.
func fromEnv(fs *flag.FlagSet, lookup func(string) (string, bool)) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := "GATEWAY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := lookup(env); ok && !set[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

func (c *Config) defaults() {
	if len(c.Providers) == 0 && len(c.Upstreams) == 0 {
		c.Providers = DefaultProviders
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Tenant.MaxInFlight < 0 {
		c.Tenant.MaxInFlight = max(1, c.Router.Slots.MaxConcurrent/2)
	}
	c.Router.Rand = rand.New(rand.NewPCG(c.Seed, c.Seed^0x6a177e4))
}
