package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/production-go/gateway-lab/gateway/egress"
	"github.com/production-go/gateway-lab/gateway/guard"
	"github.com/production-go/gateway-lab/gateway/httpapi"
	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/providers/openaicompat"
	"github.com/production-go/gateway-lab/gateway/quota"
	"github.com/production-go/gateway-lab/gateway/redisconn"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/service"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/redis/go-redis/v9"
)

//go:embed tiers.yaml
var defaultTiers []byte

// settings are secure_app's own flags, on top of service.Config's.
type settings struct {
	tiersFile   string
	issuer      string
	audience    string
	maxLifetime time.Duration
	dev         bool
	redis       redisconn.Settings
	prefix      string
	failOpen    bool
	debt        int
	pipeline    bool
}

func (s *settings) flags(fs *flag.FlagSet) {
	fs.StringVar(&s.tiersFile, "tiers", "", "tier policy `file` (JSON or YAML); default: the built-in free/pro/enterprise")
	fs.StringVar(&s.issuer, "jwt-issuer", defaultIssuer, "the \"iss\" tokens must carry")
	fs.StringVar(&s.audience, "jwt-audience", defaultAudience, "the \"aud\" tokens must carry")
	fs.DurationVar(&s.maxLifetime, "jwt-max-lifetime", identity.DefaultMaxLifetime, "the longest exp − iat a token may carry")
	fs.BoolVar(&s.dev, "dev", false, "development: accept the repository's published dev secrets (the compose stack's); announced at start; never in production")
	s.redis.Flags(fs)
	fs.StringVar(&s.prefix, "redis-prefix", "gw", "prefix of every key the shared limits write (one per deployment on a shared Redis)")
	fs.BoolVar(&s.pipeline, "redis-pipeline", true, "pipeline concurrent shared-limit decisions into shared round trips (one rueidis connection; a lone decision and every caller's deadline as without); false sends each on its own go-redis connection")
	fs.BoolVar(&s.failOpen, "ratelimit-fail-open", false, "when Redis is down, admit requests (default: refuse them with 503)")
	fs.IntVar(&s.debt, "token-debt-minutes", 10, fmt.Sprintf("minutes of its token quota a tenant may owe for usage above what it reserved (a prompt of images or files); beyond that is forgiven (1…%d)", quota.MaxDebtMinutes))
}

// The issuer and audience secure_app and its token command agree on by
// default.
const (
	defaultIssuer   = "gateway-lab"
	defaultAudience = "gateway-lab-api"
)

// run is main without the process. It returns the exit code: 0 after a
// drain, 1 if serving failed, 2 for bad configuration.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ln net.Listener) int {
	if len(args) > 0 && args[0] == "token" {
		return mintToken(args[1:], stdout, stderr)
	}
	var s settings
	c, err := service.Parse("secure_app", args, stderr, s.flags)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return fail(stderr, 2, err)
	}
	if c.AdminAddr == "" {
		c.AdminAddr = "127.0.0.1:9464" // metrics never on the public listener
	}
	log, err := service.NewLogger(stderr, c.LogLevel)
	if err != nil {
		return fail(stderr, 2, err)
	}
	pol, err := loadPolicy(s.tiersFile)
	if err != nil {
		return fail(stderr, 2, err)
	}
	if err := fitsTheSlots(pol, c.Router.Slots.MaxConcurrent); err != nil {
		return fail(stderr, 2, err)
	}
	if s.debt < 1 || s.debt > quota.MaxDebtMinutes {
		return fail(stderr, 2, fmt.Errorf("-token-debt-minutes %d: want 1 to %d", s.debt, quota.MaxDebtMinutes))
	}
	g, metrics, rdb, err := newGuard(s, pol, log)
	if err != nil {
		return fail(stderr, 2, err)
	}
	defer func() {
		g.Close() // its background undos need the client
		_ = rdb.Close()
	}()
	svc, err := service.Build(c, log, hooks(g))
	if err != nil {
		return fail(stderr, 2, err)
	}
	metrics.Register(svc.Registry)
	try := tryLines(s, pol, os.Getenv)
	if s.dev {
		log.Warn("DEVELOPMENT MODE (-dev): the repository's published dev secrets are accepted; never run this in production", "dev", true)
		try = devWarning + try
	}
	report, err := svc.Serve(ctx, ln, stdout, try)
	if err != nil {
		return fail(stderr, 1, err)
	}
	fmt.Fprintf(stdout, "stopped: drained=%t cut=%d\n", report.Drained, report.Cut)
	return 0
}

// fitsTheSlots refuses a tier whose in-flight cap is not below the
// replica's slots: one tenant of it could hold every slot of a replica and
// leave every other tenant a 503.
func fitsTheSlots(pol *policy.Policy, slots int) error {
	for _, name := range pol.Names() {
		if t, _ := pol.Tier(name); t.MaxInFlight >= slots {
			return fmt.Errorf("tier %s: max_in_flight %d is not below -max-concurrent %d: one tenant could take every slot; lower the tier's cap or raise -max-concurrent",
				name, t.MaxInFlight, slots)
		}
	}
	return nil
}

// devWarning opens the startup lines under -dev.
const devWarning = "WARNING: -dev: the repository's published dev secrets are accepted here; never run this in production\n"

// newGuard builds the guard over the tier policy, the JWT secrets from the
// environment and the shared limits' Redis.
func newGuard(s settings, pol *policy.Policy, log *slog.Logger) (*guard.Guard, *telemetry.Guard, redis.UniversalClient, error) {
	v, err := newVerifier(s, os.Getenv, os.ReadFile)
	if err != nil {
		return nil, nil, nil, err
	}
	redisconn.Log(log) // the client's own complaints, as JSON like every other line
	rdb, err := redisconn.Connect(s.redis, os.Getenv)
	if err != nil {
		return nil, nil, nil, err
	}
	metrics := telemetry.NewGuard(s.failOpen)
	g, err := guard.New(guard.Config{Verifier: v, Policy: pol, Redis: rdb, Prefix: s.prefix, FailOpen: s.failOpen,
		TokenDebtMinutes: s.debt, NoPipeline: !s.pipeline, Log: log, Observer: metrics})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, nil, err
	}
	return g, metrics, rdb, nil
}

// hooks wire the guard and the egress guard into the assembly
// production_app uses.
func hooks(g *guard.Guard) service.Hooks {
	return service.Hooks{
		API: func(o *httpapi.Options) {
			o.Identify = g.Identify
			o.Admit = g.Admit
			o.CallerLimited = g.CallerLimited
		},
		Gate: func(c *tenant.GateConfig) {
			// The tier's rate, shared by every replica. The per-replica
			// cap on a tenant's requests (the tier's, or -max-per-tenant
			// when smaller) stays beside the shared lease: the lease bounds
			// a tenant across replicas, the cap keeps it from taking every
			// slot of one, and is refused before a Redis round trip.
			c.Limiter = g.Limiter()
		},
		Router: func(c *router.Config) {
			// Tenants are authenticated here, so one whose own requests
			// are slow cannot open a target's breaker for everyone.
			c.Health.IsolateTenantFailures = true
		},
		Provider: llm.Metered, // every upstream call charged to its request's token quota (guard's meter rides on the request)
		Upstream: func(c *openaicompat.Config) {
			if !c.Local {
				c.DialControl = egress.Control
			}
		},
	}
}

func fail(stderr io.Writer, code int, err error) int {
	fmt.Fprintln(stderr, "secure_app:", err)
	return code
}

// loadPolicy reads -tiers, or the built-in policy.
func loadPolicy(file string) (*policy.Policy, error) {
	if file == "" {
		return policy.Parse("tiers.yaml (built in)", defaultTiers, "yaml")
	}
	return policy.Load(file)
}
