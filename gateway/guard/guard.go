// Package guard holds each request to who its caller proved to be and what
// their tier allows: secure_app's identity, tier policy and shared limits,
// as the hooks the HTTP layer and the router call.
//
//   - Identify verifies the bearer token (package identity). A refusal tells
//     the caller only "missing", "expired" or "invalid"; the precise reason
//     goes to the log and the Observer.
//   - Admit holds a parsed request to its tier's policy (package policy), in
//     the order that takes nothing from a request that will be refused
//     anyway: what it asks for (model, size), then the tenant's in-flight
//     lease, then its token reservation (package quota) — both shared by
//     every replica on Redis. The done func it returns settles the tokens
//     with the real usage and gives the lease back.
//   - Limiter is lab 07's Redis rate limiter, one per tier, chosen by the
//     tier in the request's identity: the router's admission asks it.
package guard

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/quota"
	"github.com/production-go/gateway-lab/gateway/redispipe"
	"github.com/production-go/gateway-lab/gateway/tenant"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
	distlimit "github.com/production-go/gateway-lab/solutions/07-distlimit"
	"github.com/redis/go-redis/v9"
)

// Observer hears of every refusal and every failure of a shared limit.
// Methods must be quick and safe for concurrent use (*telemetry.Guard is
// one).
type Observer interface {
	// AuthRefused: a request refused with 401, by the precise reason.
	AuthRefused(reason identity.Reason)
	// TierRefused: a request its tier's policy refused, by limit.
	TierRefused(limit policy.Limit)
	// LimitFailed: a shared limit's Redis failed (and the request was
	// admitted or refused as Config.FailOpen says).
	LimitFailed(limit policy.Limit)
	// ReadOn: a metered call whose caller left was read on for its bill
	// (see readon.go), and ended so.
	ReadOn(outcome ReadOnOutcome)
}

// Config configures a Guard.
type Config struct {
	Verifier *identity.Verifier
	Policy   *policy.Policy
	// Redis holds the shared limits: every replica of a deployment uses
	// the same server (or cluster) and Prefix.
	Redis  redis.UniversalClient
	Prefix string
	// FailOpen admits requests while Redis is down; by default they are
	// refused with 503.
	FailOpen bool
	// Timeout bounds each Redis call of the token quota and the leases;
	// 0 is quota.DefaultTimeout.
	Timeout time.Duration
	// LeaseTTL is how long an in-flight lease lives without renewal; 0 is
	// LeaseTTL.
	LeaseTTL time.Duration
	// ReadOnTime, ReadOnBytes and MaxReadOn bound the reading on of metered
	// calls whose caller left (readon.go): per call, in time and in bytes,
	// and how many at once; 0 is DefaultReadOnTime, DefaultReadOnBytes,
	// DefaultMaxReadOn.
	ReadOnTime  time.Duration
	ReadOnBytes int
	MaxReadOn   int
	// TokenDebtMinutes is how many minutes of its token quota a tenant may
	// owe for usage above its reservations (quota.TokensConfig.DebtMinutes).
	TokenDebtMinutes int
	// NoPipeline sends each shared-limit decision on its own connection
	// instead of pipelining concurrent ones (gateway/redispipe): for a
	// client redispipe cannot follow (a Ring), or to compare.
	NoPipeline bool
	Log        *slog.Logger // nil: discarded
	Observer   Observer     // nil: nothing is counted
}

// Guard is secure_app's admission. Safe for concurrent use.
type Guard struct {
	cfg    Config
	limits map[string]*distlimit.Limiter // per tier
	tokens *quota.Tokens
	leases *quota.Leases
	pipe   *redispipe.Scripter // nil with NoPipeline
	readOn readOn              // every metered call, and those read on after their caller left
}

// New builds the shared limits for every tier of cfg.Policy.
func New(cfg Config) (*Guard, error) {
	if cfg.Verifier == nil || cfg.Policy == nil || cfg.Redis == nil {
		return nil, errors.New("guard: a verifier, a policy and a Redis client are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.ReadOnTime < 0 || cfg.ReadOnBytes < 0 || cfg.MaxReadOn < 0 {
		return nil, errors.New("guard: the read-on bounds must not be negative")
	}
	g := &Guard{cfg: cfg, limits: map[string]*distlimit.Limiter{}}
	g.readOn.time, g.readOn.bytes, g.readOn.max = cmp.Or(cfg.ReadOnTime, DefaultReadOnTime), cmp.Or(cfg.ReadOnBytes, DefaultReadOnBytes), cmp.Or(cfg.MaxReadOn, DefaultMaxReadOn)
	if err := g.shared(); err != nil {
		return nil, err
	}
	return g, nil
}

type nopObserver struct{}

func (nopObserver) AuthRefused(identity.Reason) {}
func (nopObserver) TierRefused(policy.Limit)    {}
func (nopObserver) LimitFailed(policy.Limit)    {}
func (nopObserver) ReadOn(ReadOnOutcome)        {}

// shared builds the limits every replica shares on Redis: the request rate
// per tier (lab 07's limiter), the token quota and the in-flight leases.
func (g *Guard) shared() error {
	var rdb redis.Scripter = g.cfg.Redis
	if !g.cfg.NoPipeline {
		pipe, err := redispipe.New(g.cfg.Redis)
		if err != nil {
			return fmt.Errorf("guard: %w (NoPipeline sends each decision on its own)", err)
		}
		g.pipe, rdb = pipe, pipe
	}
	ok := false
	defer func() {
		if !ok && g.pipe != nil {
			_ = g.pipe.Close() // a limit that could not be built leaves no pipeline behind
		}
	}()
	for _, name := range g.cfg.Policy.Names() {
		t, _ := g.cfg.Policy.Tier(name)
		// One bucket per tenant, whatever the tier: a tenant holding tokens
		// of two tiers (one minted before an upgrade) has one rate, held to
		// the tier of each request's token, as its quota and leases are.
		l, err := distlimit.New(rdb, distlimit.Config{Rate: t.RatePerSecond, Burst: t.Burst, Prefix: g.cfg.Prefix + ":rate:",
			FailOpen: g.cfg.FailOpen, OnError: g.onError(policy.LimitRate)})
		if err != nil {
			return fmt.Errorf("tier %s: %w", name, err)
		}
		g.limits[name] = l
	}
	var err error
	g.tokens, err = quota.NewTokens(rdb, quota.TokensConfig{Prefix: g.cfg.Prefix + ":tokens", FailOpen: g.cfg.FailOpen,
		Timeout: g.cfg.Timeout, DebtMinutes: g.cfg.TokenDebtMinutes, OnError: g.onError(policy.LimitTokens)})
	if err != nil {
		return err
	}
	// A lease is renewed while its request runs (see Admit), so its TTL
	// is short: it is how long a dead replica's slot stays taken.
	g.leases, err = quota.NewLeases(rdb, quota.LeasesConfig{Prefix: g.cfg.Prefix + ":inflight", TTL: g.leaseTTL(),
		FailOpen: g.cfg.FailOpen, Timeout: g.cfg.Timeout, OnError: g.onError(policy.LimitInFlight)})
	ok = err == nil
	return err
}

// timeout is Config.Timeout, or quota.DefaultTimeout.
func (g *Guard) timeout() time.Duration {
	if g.cfg.Timeout > 0 {
		return g.cfg.Timeout
	}
	return quota.DefaultTimeout
}

// leaseTTL is Config.LeaseTTL, or LeaseTTL.
func (g *Guard) leaseTTL() time.Duration {
	if g.cfg.LeaseTTL > 0 {
		return g.cfg.LeaseTTL
	}
	return LeaseTTL
}

// Close waits for the shared limits' background undos (see quota) and the
// pipelined calls still in flight. Call it before closing the Redis client.
func (g *Guard) Close() {
	g.readOn.close() // first: a call read on settles when it ends
	g.tokens.Close()
	g.leases.Close()
	if g.pipe != nil {
		_ = g.pipe.Close() // after the undos, which may still send
	}
}

// onError is a shared limit's OnError: count and log the Redis failure.
func (g *Guard) onError(limit policy.Limit) func(error) {
	mode := "failed_closed"
	if g.cfg.FailOpen {
		mode = "failed_open"
	}
	return func(err error) {
		g.cfg.Observer.LimitFailed(limit)
		g.cfg.Log.Warn("redis limit failed", "limit", string(limit), "mode", mode, "error", err)
	}
}

// Identify verifies the bearer token: httpapi.Options.Identify. Every
// Authorization header the request carries is read: two are refused
// (identity.ReasonRepeatedHeader), since a proxy that reads the first and a
// gateway that reads the last would each believe a different caller.
func (g *Guard) Identify(r *http.Request) (tenant.Identity, *chatapi.Error) {
	claims, err := g.cfg.Verifier.VerifyValues(r.Header.Values("Authorization"))
	if err != nil {
		reason := identity.ReasonOf(err)
		g.cfg.Observer.AuthRefused(reason)
		g.cfg.Log.LogAttrs(r.Context(), slog.LevelInfo, "unauthorized", slog.String("reason", string(reason)))
		f := chatapi.InvalidToken
		switch {
		case errors.Is(err, identity.ErrMissing):
			f = chatapi.MissingToken
		case errors.Is(err, identity.ErrExpired):
			f = chatapi.ExpiredToken
		}
		refusal := f.New(err.Error())
		refusal.Challenge = `Bearer realm="gateway", error="invalid_token"`
		return tenant.Identity{}, refusal
	}
	tier, ok := g.cfg.Policy.Tier(claims.Tier)
	if !ok {
		g.cfg.Observer.TierRefused(policy.LimitTier)
		return tenant.Identity{}, chatapi.UnknownTier.New("the token's tier is not one this gateway serves")
	}
	// A body over the tier's prompt size is refused unread; a request
	// beyond the tier's in-flight cap on this replica — which the shared
	// lease would refuse anyway — before a Redis call, so a tenant's flood
	// holds at most that many of the Redis pool's connections.
	return tenant.Identity{Key: keyOf(claims.Tenant), Tenant: claims.Tenant, Tier: claims.Tier,
		MaxBodyBytes: int64(tier.MaxPromptBytes), MaxInFlight: tier.MaxInFlight}, nil
}

// CallerLimited counts a request the HTTP layer refused for a limit of its
// tier that Identify put on the identity: httpapi.Options.CallerLimited.
func (g *Guard) CallerLimited(_ tenant.Identity, limit policy.Limit) {
	g.cfg.Observer.TierRefused(limit)
}

// keyOf is a tenant's name as a Redis key part: the limits put the key in
// a {hash tag}, so the braces a tenant name may contain (any visible ASCII)
// are escaped — as is the escape character, so two names never share a key.
func keyOf(tenant string) string {
	return strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D").Replace(tenant)
}

// Limiter is the rate limit of the tier in each request's identity, shared
// by every replica: the tenant gate's Limiter. It is a tenant.Refunder
// too: a request the replica refuses for want of a slot gets its token
// back (see refund.lua).
func (g *Guard) Limiter() admission.Limiter { return tierLimiter{g} }

// tierLimiter is lab 07's Redis limiter, one per tier, chosen by the tier
// the request's identity carries.
type tierLimiter struct{ g *Guard }

func (l tierLimiter) Allow(ctx context.Context, key string) (admission.Decision, error) {
	lim, _, err := l.of(ctx)
	if err != nil {
		return admission.Decision{}, err
	}
	return lim.Allow(ctx, key) // lab 07's Decision is lab 02's: nothing to convert
}

//go:embed refund.lua
var refundLua string

var refundScript = redis.NewScript(refundLua)

// Refund gives back the token Allow took for key, once however often the
// client resends it, within the limits' Redis timeout. Lab 07's limiter has
// no undo (its lesson is the atomic take), so the product adds one beside
// it, on the same key.
func (l tierLimiter) Refund(ctx context.Context, key string) error {
	lim, tier, err := l.of(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, l.g.timeout())
	defer cancel()
	bucket := lim.Key(key)
	if err := refundScript.Run(ctx, l.g.cfg.Redis, []string{bucket, bucket + ":refund:" + rand.Text()}, tier.Burst).Err(); err != nil {
		return fmt.Errorf("guard: refund a rate token: %w", err)
	}
	return nil
}

// of is the limiter and tier of the request's identity.
func (l tierLimiter) of(ctx context.Context) (*distlimit.Limiter, policy.Tier, error) {
	id, _ := tenant.IdentityFrom(ctx)
	lim := l.g.limits[id.Tier]
	tier, ok := l.g.cfg.Policy.Tier(id.Tier)
	if lim == nil || !ok {
		return nil, policy.Tier{}, errors.New("guard: no rate limit for tier " + strconv.Quote(id.Tier))
	}
	return lim, tier, nil
}
