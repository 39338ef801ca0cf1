package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	"github.com/production-go/gateway-lab/solutions/07-distlimit"
	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/app"
	"github.com/production-go/gateway-lab/solutions/httpapi"
	"github.com/production-go/gateway-lab/solutions/identity"
	"github.com/production-go/gateway-lab/solutions/internal/chatapi"
	"github.com/production-go/gateway-lab/solutions/internal/egress"
	"github.com/production-go/gateway-lab/solutions/policy"
	"github.com/production-go/gateway-lab/solutions/providers/openaicompat"
	"github.com/production-go/gateway-lab/solutions/quota"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// DefaultMaxTokens is what a request that names no max_tokens is assumed
// to answer at most, for its token reservation. The reservation is settled
// with the real usage afterwards, so a wrong guess costs nothing but a
// little headroom while the request runs.
const DefaultMaxTokens = 1024

// security is everything secure_app adds to production_app.
type security struct {
	log      *slog.Logger
	verifier *identity.Verifier
	policy   *policy.Policy
	rdb      redis.UniversalClient
	limits   map[string]*distlimit.Limiter // per tier
	tokens   *quota.Tokens
	leases   *quota.Leases
	failOpen bool
	prefix   string

	authRefusals  *prometheus.CounterVec
	limitRefusals *prometheus.CounterVec
	redisErrors   *prometheus.CounterVec
}

func newSecurity(s settings, log *slog.Logger) (*security, error) {
	pol, err := loadPolicy(s.tiersFile)
	if err != nil {
		return nil, err
	}
	v, err := newVerifier(s)
	if err != nil {
		return nil, err
	}
	redisLogOnce.Do(func() { redis.SetLogger(redisLog{log}) }) // the client's own complaints, as JSON like every other line
	rdb, err := newRedis(s.redisURL, s.cluster)
	if err != nil {
		return nil, err
	}
	sec := &security{log: log, verifier: v, policy: pol, rdb: rdb, failOpen: s.failOpen, prefix: s.prefix, limits: map[string]*distlimit.Limiter{}}
	sec.metrics()
	if err := sec.shared(); err != nil {
		sec.close()
		return nil, err
	}
	return sec, nil
}

func (sec *security) metrics() {
	sec.authRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_auth_refusals_total", Help: "Requests refused with 401, by the precise reason (never sent to the caller).",
	}, []string{"reason"})
	sec.limitRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_tier_refusals_total", Help: "Requests refused by their tier's policy, by limit: model, prompt_bytes, in_flight, tokens, tier.",
	}, []string{"limit"})
	sec.redisErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_redis_limit_errors_total", Help: "Redis failures of the shared limits, by limit and by what was done: failed_open or failed_closed.",
	}, []string{"limit", "mode"})
	// Known series start at zero, so rate() sees the first failure and the
	// dashboard shows 0, not "no data", while Redis is fine.
	mode := "failed_closed"
	if sec.failOpen {
		mode = "failed_open"
	}
	for _, limit := range []string{"rate", "tokens", "in_flight"} {
		sec.redisErrors.WithLabelValues(limit, mode)
	}
}

func (sec *security) register(reg prometheus.Registerer) {
	reg.MustRegister(sec.authRefusals, sec.limitRefusals, sec.redisErrors)
}

// shared builds the limits every replica shares on Redis: the request rate
// per tier (lab 07's limiter), the token quota and the in-flight leases.
func (sec *security) shared() error {
	onError := func(limit string) func(error) {
		mode := "failed_closed"
		if sec.failOpen {
			mode = "failed_open"
		}
		return func(err error) {
			sec.redisErrors.WithLabelValues(limit, mode).Inc()
			sec.log.Warn("redis limit failed", "limit", limit, "mode", mode, "error", err)
		}
	}
	for _, name := range sec.policy.Names() {
		t, _ := sec.policy.Tier(name)
		l, err := distlimit.New(sec.rdb, distlimit.Config{Rate: t.RatePerSecond, Burst: t.Burst, Prefix: sec.prefix + ":rate:" + name + ":",
			FailOpen: sec.failOpen, OnError: onError("rate")})
		if err != nil {
			return fmt.Errorf("tier %s: %w", name, err)
		}
		sec.limits[name] = l
	}
	var err error
	if sec.tokens, err = quota.NewTokens(sec.rdb, quota.TokensConfig{Prefix: sec.prefix + ":tokens", FailOpen: sec.failOpen, OnError: onError("tokens")}); err != nil {
		return err
	}
	maxTimeout := time.Duration(0)
	for _, name := range sec.policy.Names() {
		t, _ := sec.policy.Tier(name)
		maxTimeout = max(maxTimeout, t.MaxRequestTimeout)
	}
	// A lease outlives its request only if the replica holding it died;
	// no request runs longer than its tier's timeout.
	sec.leases, err = quota.NewLeases(sec.rdb, quota.LeasesConfig{Prefix: sec.prefix + ":inflight", TTL: maxTimeout + 30*time.Second,
		FailOpen: sec.failOpen, OnError: onError("in_flight")})
	return err
}

func (sec *security) close() {
	if sec.rdb != nil {
		_ = sec.rdb.Close()
	}
}

// hooks wires identity, the shared limiter, admission and the egress guard
// into the assembly production_app uses.
func (sec *security) hooks() app.Hooks {
	return app.Hooks{
		API: func(o *httpapi.Options) {
			o.Identify = sec.identify
			o.Admit = sec.admit
		},
		Gateway: func(c *gateway.Config) {
			c.Limiter = tierLimiter{sec.limits}
			c.MaxPerTenant = 0 // the shared in-flight lease replaces the per-replica cap
		},
		Upstream: func(c *openaicompat.Config) {
			if !c.Local {
				c.DialControl = egress.Control
			}
		},
	}
}

// identify verifies the bearer token. A refusal tells the caller only
// "missing", "expired" or "invalid"; the precise reason goes to the log
// and a metric.
func (sec *security) identify(r *http.Request) (httpapi.Identity, *chatapi.Error) {
	claims, err := sec.verifier.Verify(r.Header.Get("Authorization"))
	if err != nil {
		reason := identity.Reason(err)
		sec.authRefusals.WithLabelValues(reason).Inc()
		sec.log.LogAttrs(r.Context(), slog.LevelInfo, "unauthorized", slog.String("reason", reason))
		code := "invalid_token"
		switch {
		case errors.Is(err, identity.ErrMissing):
			code = "missing_token"
		case errors.Is(err, identity.ErrExpired):
			code = "expired_token"
		}
		return httpapi.Identity{}, &chatapi.Error{Status: http.StatusUnauthorized, Type: "invalid_request_error", Code: code,
			Message: err.Error(), Challenge: `Bearer realm="gateway", error="invalid_token"`}
	}
	if _, ok := sec.policy.Tier(claims.Tier); !ok {
		sec.limitRefusals.WithLabelValues("tier").Inc()
		return httpapi.Identity{}, &chatapi.Error{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "unknown_tier",
			Message: "the token's tier is not one this gateway serves"}
	}
	return httpapi.Identity{Key: keyOf(claims.Tenant), Tenant: claims.Tenant, Tier: claims.Tier}, nil
}

// keyOf is a tenant's name as a Redis key part: the limits put the key in
// a {hash tag}, so the braces a tenant name may contain (any visible ASCII)
// are escaped — as is the escape character, so two names never share a key.
func keyOf(tenant string) string {
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(tenant)
}

// admit holds a request to its tier's policy, in the order that takes
// nothing from a request that will be refused anyway: what it asks for
// (model, size), then the shared in-flight lease, then its token
// reservation. done settles the reservation with the real usage and gives
// the lease back.
func (sec *security) admit(ctx context.Context, id httpapi.Identity, a httpapi.Admission) (context.Context, httpapi.Done, *chatapi.Error) {
	tier, _ := sec.policy.Tier(id.Tier)
	if !tier.Allows(a.Model) {
		sec.limitRefusals.WithLabelValues("model").Inc()
		return ctx, nil, &chatapi.Error{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "model_not_allowed", Param: "model",
			Message: fmt.Sprintf("the %s tier may not use the model %q", tier.Name, a.Model)}
	}
	if a.BodyBytes > tier.MaxPromptBytes {
		sec.limitRefusals.WithLabelValues("prompt_bytes").Inc()
		return ctx, nil, &chatapi.Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "prompt_too_large",
			Message: fmt.Sprintf("the request is %d bytes; the %s tier allows %d", a.BodyBytes, tier.Name, tier.MaxPromptBytes)}
	}
	release, e := sec.lease(ctx, id, tier)
	if e != nil {
		return ctx, nil, e
	}
	settle, e := sec.reserve(ctx, id, tier, a)
	if e != nil {
		release()
		return ctx, nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, tier.MaxRequestTimeout)
	return ctx, func(u *gateway.Usage, err error) {
		settle(u, err)
		release()
		cancel()
	}, nil
}

// lease takes one of the tenant's in-flight slots, shared by every replica.
func (sec *security) lease(ctx context.Context, id httpapi.Identity, tier policy.Tier) (func(), *chatapi.Error) {
	release, d, err := sec.leases.Acquire(ctx, id.Key, tier.MaxInFlight)
	if err != nil {
		return nil, unavailable("in-flight")
	}
	if !d.Allowed {
		sec.limitRefusals.WithLabelValues("in_flight").Inc()
		return nil, &chatapi.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "too_many_concurrent_requests",
			Message: fmt.Sprintf("the %s tier allows %d requests in flight per tenant", tier.Name, tier.MaxInFlight), RetryAfter: time.Second}
	}
	return func() { detached(func(ctx context.Context) { _ = release(ctx) }) }, nil
}

// reserve takes the request's estimated tokens from the tenant's quota; the
// func it returns settles them when the request ends (see settlement).
func (sec *security) reserve(ctx context.Context, id httpapi.Identity, tier policy.Tier, a httpapi.Admission) (httpapi.Done, *chatapi.Error) {
	if tier.TokensPerMinute == 0 {
		return func(*gateway.Usage, error) {}, nil
	}
	estimate := estimateTokens(a)
	if estimate > tier.TokensPerMinute {
		sec.limitRefusals.WithLabelValues("tokens").Inc()
		return nil, &chatapi.Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "tokens_over_quota",
			Message: fmt.Sprintf("this request may use %d tokens; the %s tier's whole quota is %d a minute", estimate, tier.Name, tier.TokensPerMinute)}
	}
	res, d, err := sec.tokens.Reserve(ctx, id.Key, tier.TokensPerMinute, estimate)
	if err != nil {
		return nil, unavailable("token quota")
	}
	if !d.Allowed {
		sec.limitRefusals.WithLabelValues("tokens").Inc()
		return nil, &chatapi.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "tokens_per_minute",
			Message: fmt.Sprintf("the %s tier allows %d tokens a minute; this request needs %d more", tier.Name, tier.TokensPerMinute, estimate), RetryAfter: d.RetryAfter}
	}
	return func(u *gateway.Usage, err error) {
		if actual, ok := settlement(u, err); ok && res != nil {
			detached(func(ctx context.Context) { _ = res.Settle(ctx, actual) })
		}
	}, nil
}

// settlement is what a finished request is charged, and whether to settle
// at all:
//   - answered with usage: the usage;
//   - failed before any output (refused by the rate limit, no healthy
//     provider, an upstream error): nothing — it generated no tokens;
//   - a stream cut after output, or an answer without usage (a stream
//     whose caller did not ask for it): no settlement, so it stays charged
//     its reservation, the most it could have used.
func settlement(u *gateway.Usage, err error) (int, bool) {
	switch {
	case err == nil && u != nil:
		return u.TotalTokens, true
	case err != nil && !errors.Is(err, gateway.ErrAfterFirstByte):
		return 0, true
	}
	return 0, false
}

// estimateTokens is a request's worst case: its prompt at about four bytes
// a token, plus the answer it allows.
func estimateTokens(a httpapi.Admission) int {
	answer := a.MaxTokens
	if answer == 0 {
		answer = DefaultMaxTokens
	}
	return a.BodyBytes/4 + answer
}

func unavailable(what string) *chatapi.Error {
	return &chatapi.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "limits_unavailable",
		Message: "the shared " + what + " limit is unavailable and this gateway fails closed; retry shortly", RetryAfter: time.Second}
}

// detached runs bookkeeping after a request — which must happen even when
// the request's own context has ended — under a short deadline of its own.
func detached(f func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f(ctx)
}

// redisLog routes go-redis' log lines (a pool that cannot dial, say) into
// the service's structured log instead of a line of plain text on stderr.
type redisLog struct{ log *slog.Logger }

// redisLogOnce sets go-redis' logger, a process-wide setting, once.
var redisLogOnce sync.Once

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "message", fmt.Sprintf(format, v...))
}

// tierLimiter is lab 07's Redis limiter, one per tier, chosen by the tier
// the request's identity carries.
type tierLimiter struct{ byTier map[string]*distlimit.Limiter }

func (l tierLimiter) Allow(ctx context.Context, key string) (admission.Decision, error) {
	id, _ := httpapi.IdentityFrom(ctx)
	lim := l.byTier[id.Tier]
	if lim == nil {
		return admission.Decision{}, errors.New("secure_app: no rate limit for tier " + strconv.Quote(id.Tier))
	}
	d, err := lim.Allow(ctx, key)
	return admission.Decision{Allowed: d.Allowed, Remaining: d.Remaining, RetryAfter: d.RetryAfter}, err
}
