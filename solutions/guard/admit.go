package guard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/production-go/gateway-lab/solutions/chatapi"
	"github.com/production-go/gateway-lab/solutions/httpapi"
	"github.com/production-go/gateway-lab/solutions/llm"
	"github.com/production-go/gateway-lab/solutions/policy"
	"github.com/production-go/gateway-lab/solutions/router"
)

// DefaultMaxTokens is what a request that names no max_tokens is assumed
// to answer at most, for its token reservation. The reservation is settled
// with the real usage afterwards, so a wrong guess costs nothing but a
// little headroom while the request runs.
const DefaultMaxTokens = 1024

// Admit holds a request to its tier's policy: httpapi.Options.Admit. The
// request runs under its tier's timeout; done settles its tokens and gives
// its lease back.
func (g *Guard) Admit(ctx context.Context, id httpapi.Identity, a httpapi.Admission) (context.Context, httpapi.Done, *chatapi.Error) {
	tier, _ := g.cfg.Policy.Tier(id.Tier)
	if !tier.Allows(a.Model) {
		g.cfg.Observer.TierRefused(policy.LimitModel)
		return ctx, nil, &chatapi.Error{Status: http.StatusForbidden, Type: "invalid_request_error", Code: "model_not_allowed", Param: "model",
			Message: fmt.Sprintf("the %s tier may not use the model %q", tier.Name, a.Model)}
	}
	if a.BodyBytes > tier.MaxPromptBytes {
		g.cfg.Observer.TierRefused(policy.LimitPromptBytes)
		return ctx, nil, &chatapi.Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "prompt_too_large",
			Message: fmt.Sprintf("the request is %d bytes; the %s tier allows %d", a.BodyBytes, tier.Name, tier.MaxPromptBytes)}
	}
	release, e := g.lease(ctx, id, tier)
	if e != nil {
		return ctx, nil, e
	}
	settle, e := g.reserve(ctx, id, tier, a)
	if e != nil {
		release()
		return ctx, nil, e
	}
	ctx, cancel := context.WithTimeout(ctx, tier.MaxRequestTimeout)
	return ctx, func(u *llm.Usage, err error) {
		settle(u, err)
		release()
		cancel()
	}, nil
}

// lease takes one of the tenant's in-flight slots, shared by every replica.
func (g *Guard) lease(ctx context.Context, id httpapi.Identity, tier policy.Tier) (func(), *chatapi.Error) {
	release, d, err := g.leases.Acquire(ctx, id.Key, tier.MaxInFlight)
	if err != nil {
		return nil, unavailable("in-flight")
	}
	if !d.Allowed {
		g.cfg.Observer.TierRefused(policy.LimitInFlight)
		return nil, &chatapi.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "too_many_concurrent_requests",
			Message: fmt.Sprintf("the %s tier allows %d requests in flight per tenant", tier.Name, tier.MaxInFlight), RetryAfter: time.Second}
	}
	return func() { detached(func(ctx context.Context) { _ = release(ctx) }) }, nil
}

// reserve takes the request's estimated tokens from the tenant's quota; the
// func it returns settles them when the request ends (see settlement).
func (g *Guard) reserve(ctx context.Context, id httpapi.Identity, tier policy.Tier, a httpapi.Admission) (httpapi.Done, *chatapi.Error) {
	if tier.TokensPerMinute == 0 {
		return func(*llm.Usage, error) {}, nil
	}
	estimate := estimateTokens(a)
	if estimate > tier.TokensPerMinute {
		g.cfg.Observer.TierRefused(policy.LimitTokens)
		return nil, &chatapi.Error{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error", Code: "tokens_over_quota",
			Message: fmt.Sprintf("this request may use %d tokens; the %s tier's whole quota is %d a minute", estimate, tier.Name, tier.TokensPerMinute)}
	}
	res, d, err := g.tokens.Reserve(ctx, id.Key, tier.TokensPerMinute, estimate)
	if err != nil {
		return nil, unavailable("token quota")
	}
	if !d.Allowed {
		g.cfg.Observer.TierRefused(policy.LimitTokens)
		return nil, &chatapi.Error{Status: http.StatusTooManyRequests, Type: "rate_limit_error", Code: "tokens_per_minute",
			Message: fmt.Sprintf("the %s tier allows %d tokens a minute; this request needs %d more", tier.Name, tier.TokensPerMinute, estimate), RetryAfter: d.RetryAfter}
	}
	return func(u *llm.Usage, err error) {
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
func settlement(u *llm.Usage, err error) (int, bool) {
	switch {
	case err == nil && u != nil:
		return u.TotalTokens, true
	case err != nil && !errors.Is(err, router.ErrAfterFirstByte):
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
