package guard

import (
	"context"
	"fmt"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/quota"
	"github.com/production-go/gateway-lab/gateway/tenant"
	quotas "github.com/production-go/gateway-lab/solutions/12-quotas"
)

// DefaultMaxTokens is the answer a request that names no max_tokens is
// reserved for, and is held to: the upstream is asked for no more (see
// Meter). The reservation is settled with the real usage afterwards, so a
// generous guess costs nothing but headroom while the request runs.
const DefaultMaxTokens = 1024

// MediaPartTokens is what a content part that is not text (an image, an
// audio clip, a file) is reserved for: its bytes here are a URL or an id,
// not what the upstream counts. A high-detail image costs OpenAI's models
// up to about 1,100 tokens; the settle corrects the guess either way.
const MediaPartTokens = 1500

// LeaseTTL is how long an in-flight lease lives without renewal: a request
// renews its lease every third of it while it runs, so a replica that
// crashed (or a Redis that ran a lease's acquire after its caller gave up)
// holds a tenant's slot for at most this long.
const LeaseTTL = 15 * time.Second

// Admit holds a request to its tier's policy: httpapi.Options.Admit. The
// request runs under its tier's timeout; done settles its tokens (see
// Meter) and gives its lease back, and the HTTP layer calls it once the
// answer is written.
func (g *Guard) Admit(ctx context.Context, id tenant.Identity, a tenant.Admission) (context.Context, tenant.Pass, *chatapi.Error) {
	tier, _ := g.cfg.Policy.Tier(id.Tier)
	if !tier.Allows(a.Model) {
		g.cfg.Observer.TierRefused(policy.LimitModel)
		return ctx, tenant.Pass{}, chatapi.ModelNotAllowed.New(fmt.Sprintf("the %s tier may not use the model %q", tier.Name, a.Model)).At("model")
	}
	if a.BodyBytes > tier.MaxPromptBytes {
		g.cfg.Observer.TierRefused(policy.LimitPromptBytes)
		return ctx, tenant.Pass{}, chatapi.PromptTooLarge.New(fmt.Sprintf("the request is %d bytes; the %s tier allows %d", a.BodyBytes, tier.Name, tier.MaxPromptBytes))
	}
	release, e := g.lease(ctx, id, tier)
	if e != nil {
		return ctx, tenant.Pass{}, e
	}
	m, e := g.meter(ctx, id, tier, a)
	if e != nil {
		release()
		return ctx, tenant.Pass{}, e
	}
	ctx, cancel := context.WithTimeout(ctx, tier.MaxRequestTimeout)
	pass := tenant.Pass{Done: func(*llm.Usage, error) {
		m.finish()
		m.afterReadOn(release)
		cancel()
	}}
	if m != nil {
		pass.Meter = m // never a nil *meter in the interface: that would be a meter
	}
	return ctx, pass, nil
}

// lease takes one of the tenant's in-flight slots, shared by every
// replica, and keeps it alive while the request runs. The func it returns
// stops the renewal and gives the slot back.
func (g *Guard) lease(ctx context.Context, id tenant.Identity, tier policy.Tier) (func(), *chatapi.Error) {
	lease, d, err := g.leases.Hold(ctx, id.Key, tier.MaxInFlight)
	if err != nil {
		return nil, unavailable("in-flight")
	}
	if !d.Allowed {
		g.cfg.Observer.TierRefused(policy.LimitInFlight)
		return nil, chatapi.TenantBusy.New(fmt.Sprintf("the %s tier allows %d requests in flight per tenant", tier.Name, tier.MaxInFlight)).After(time.Second)
	}
	if lease == nil {
		return func() {}, nil // admitted with Redis down and failing open: no lease to keep
	}
	stop := keepAlive(g.leaseTTL()/3, func() {
		detached(func(ctx context.Context) {
			if live, err := lease.Renew(ctx); err == nil && !live {
				// Expired before it could be renewed (a Redis stall longer
				// than its TTL): the request runs on without counting
				// against the tenant's cap. Rare, and worth knowing.
				g.cfg.Log.Warn("in-flight lease lost while its request runs", "tenant", id.Tenant, "tier", tier.Name)
			}
		})
	})
	return func() {
		stop()
		detached(func(ctx context.Context) { _ = lease.Release(ctx) })
	}, nil
}

// keepAlive calls renew every period until the func it returns is
// called; that func returns once the loop has ended.
func keepAlive(period time.Duration, renew func()) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				renew()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// meter takes the request's first reservation — its prompt and the answer
// it may have, from the tenant's quota — and returns the meter its upstream
// calls are charged through; nil for a tier without a token quota.
func (g *Guard) meter(ctx context.Context, id tenant.Identity, tier policy.Tier, a tenant.Admission) (*meter, *chatapi.Error) {
	if tier.TokensPerMinute == 0 {
		return nil, nil
	}
	m := &meter{g: g, caller: ctx, key: id.Key, tier: tier, answer: a.MaxTokens}
	if m.answer == 0 {
		m.answer = DefaultMaxTokens
	}
	// Lab 12's estimate — the prompt at four bytes a token, n answers of up
	// to m.answer each — plus what media parts cost that their bytes do not
	// show.
	m.estimate = quotas.Estimate(a.BodyBytes, m.answer, a.Choices) + a.MediaParts*MediaPartTokens
	m.answers = m.answer * max(a.Choices, 1)
	if m.estimate > tier.TokensPerMinute {
		g.cfg.Observer.TierRefused(policy.LimitTokens)
		return nil, chatapi.TokensOverQuota.New(fmt.Sprintf("this request may use %d tokens; the %s tier's whole quota is %d a minute", m.estimate, tier.Name, tier.TokensPerMinute))
	}
	first, e := m.reserve(ctx)
	if e != nil {
		return nil, e
	}
	m.first = first
	return m, nil
}

// reserve takes one call's estimate from the tenant's quota.
func (m *meter) reserve(ctx context.Context) (*quota.Reservation, *chatapi.Error) {
	res, d, err := m.g.tokens.Reserve(ctx, m.key, m.tier.TokensPerMinute, m.estimate)
	if err != nil {
		return nil, unavailable("token quota")
	}
	if !d.Allowed {
		m.g.cfg.Observer.TierRefused(policy.LimitTokens)
		return nil, chatapi.TokensPerMinute.New(fmt.Sprintf("the %s tier allows %d tokens a minute; this call needs %d more", m.tier.Name, m.tier.TokensPerMinute, m.estimate)).After(d.RetryAfter)
	}
	return res, nil
}

func unavailable(what string) *chatapi.Error {
	return chatapi.LimitsUnavailable.New("the shared " + what + " limit is unavailable and this gateway fails closed; retry shortly").After(time.Second)
}

// detached runs bookkeeping after a request — which must happen even when
// the request's own context has ended — under a short deadline of its own.
func detached(f func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	f(ctx)
}
