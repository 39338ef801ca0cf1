package guard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The guard's tests run against miniredis (the same Lua as a real Redis;
// the shared limits' own races are tested on a real one in package quota,
// lab 07 and secure_app).

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "a-test-secret-that-is-32-bytes-long!!"

const tiers = `tiers:
  small:
    rate_per_second: 100
    burst: 100
    max_in_flight: 1
    max_prompt_bytes: 1000
    models: [auto]
    max_request_timeout: 7s
    tokens_per_minute: 2000
  open:
    rate_per_second: 0.001
    burst: 1
    max_in_flight: 4
    max_prompt_bytes: 1000000
    models: ["*"]
    max_request_timeout: 30s
    tokens_per_minute: 0
`

// seen is an Observer that records what it hears.
type seen struct {
	mu     sync.Mutex
	events []string
}

func (s *seen) add(e string)                  { s.mu.Lock(); defer s.mu.Unlock(); s.events = append(s.events, e) }
func (s *seen) AuthRefused(r identity.Reason) { s.add("auth:" + string(r)) }
func (s *seen) TierRefused(l policy.Limit)    { s.add("tier:" + string(l)) }
func (s *seen) LimitFailed(l policy.Limit)    { s.add("redis:" + string(l)) }
func (s *seen) ReadOn(o ReadOnOutcome)        { s.add("read_on:" + string(o)) }
func (s *seen) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.events...)
}

type rig struct {
	g   *Guard
	m   *miniredis.Miniredis
	obs *seen
}

func newRig(t *testing.T, failOpen bool) *rig { return newRigWith(t, failOpen, nil) }

// admit is Guard.Admit as these tests use it. The HTTP layer puts the
// pass's meter on the router.Request, and the router on each llm.Request
// of it; tests that call providers with no router between carry it in the
// context instead, where metered finds it.
func (r *rig) admit(ctx context.Context, id tenant.Identity, a tenant.Admission) (context.Context, tenant.Done, *chatapi.Error) {
	ctx, pass, e := r.g.Admit(ctx, id, a)
	return context.WithValue(ctx, meterKey{}, pass.Meter), pass.Done, e
}

type meterKey struct{}

// metered is llm.Metered(p) for these tests: each call carries the meter
// of the request context admit returned, as the router would put it there.
func metered(p llm.Provider) llm.Provider { return withMeter{llm.Wrapped{Inner: llm.Metered(p)}} }

type withMeter struct{ llm.Wrapped }

func (p withMeter) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	req.Meter, _ = ctx.Value(meterKey{}).(llm.Meter)
	return p.Inner.Generate(ctx, req)
}

func (p withMeter) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	req.Meter, _ = ctx.Value(meterKey{}).(llm.Meter)
	return p.Inner.(llm.StreamingProvider).Stream(ctx, req, emit)
}

// newRigWith is newRig with changes to the guard's config.
func newRigWith(t *testing.T, failOpen bool, change func(*Config)) *rig {
	t.Helper()
	m := miniredis.RunT(t)
	m.SetTime(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)) // Redis' clock stands still: no refill between two steps
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	pol, err := policy.Parse("tiers.yaml", []byte(tiers), "yaml")
	require.NoError(t, err)
	v, err := identity.NewVerifier(identity.Config{Secret: []byte(secret), Issuer: "iss", Audience: "aud"})
	require.NoError(t, err)
	obs := &seen{}
	cfg := Config{Verifier: v, Policy: pol, Redis: rdb, Prefix: "t", FailOpen: failOpen, Timeout: 5 * time.Second, Observer: obs}
	if change != nil {
		change(&cfg)
	}
	g, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(g.Close)
	return &rig{g: g, m: m, obs: obs}
}

func bearer(t *testing.T, tenant, tier string, ttl time.Duration) string {
	t.Helper()
	return bearerAt(t, tenant, tier, ttl, time.Now())
}

func bearerAt(t *testing.T, tenant, tier string, ttl time.Duration, issued time.Time) string {
	t.Helper()
	tok, err := identity.Mint([]byte(secret), "iss", "aud", tenant, tier, ttl, issued)
	require.NoError(t, err)
	return "Bearer " + tok
}

func identify(r *rig, header string) (tenant.Identity, *chatapi.Error) {
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	if header != "" {
		req.Header.Set("Authorization", header)
	}
	return r.g.Identify(req)
}

func TestIdentifyCarriesTheTiersLimitsOnTheRequest(t *testing.T) {
	r := newRig(t, false)
	for _, tc := range []struct {
		tier     string
		body     int64
		inFlight int
	}{{"small", 1000, 1}, {"open", 1_000_000, 4}} {
		id, e := identify(r, bearer(t, "acme", tc.tier, time.Hour))
		require.Nil(t, e)
		assert.Equal(t, tenant.Identity{Key: "acme", Tenant: "acme", Tier: tc.tier, MaxBodyBytes: tc.body, MaxInFlight: tc.inFlight}, id,
			"a body over the tier's prompt size, and a request over its in-flight cap, are refused before anything is read or asked of Redis")
	}
}

func TestRefusalsTheHTTPLayerMakesForTheTierAreCounted(t *testing.T) {
	r := newRig(t, false)
	r.g.CallerLimited(tenant.Identity{Key: "acme"}, policy.LimitPromptBytes)
	r.g.CallerLimited(tenant.Identity{Key: "acme"}, policy.LimitInFlight)
	assert.Equal(t, []string{"tier:" + string(policy.LimitPromptBytes), "tier:" + string(policy.LimitInFlight)}, r.obs.all())
}

func TestIdentifyTellsTheCallerOnlyTheKindOfRefusal(t *testing.T) {
	r := newRig(t, false)
	forged, err := identity.Mint([]byte("another-secret-that-is-32-bytes-long!"), "iss", "aud", "acme", "open", time.Hour, time.Now())
	require.NoError(t, err)
	for _, tc := range []struct {
		name, header, code, message string
		reason                      identity.Reason
	}{
		{"no header", "", "missing_token", identity.ErrMissing.Error(), identity.ReasonNoHeader},
		{"expired", bearerAt(t, "acme", "small", time.Hour, time.Now().Add(-2*time.Hour)), "expired_token", identity.ErrExpired.Error(), identity.ReasonExpired},
		{"forged", "Bearer " + forged, "invalid_token", identity.ErrInvalid.Error(), identity.ReasonSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e := identify(r, tc.header)
			require.NotNil(t, e)
			assert.Equal(t, http.StatusUnauthorized, e.Status)
			assert.Equal(t, tc.code, e.Code)
			assert.Contains(t, e.Challenge, "Bearer", "a 401 says how to authenticate")
			assert.Equal(t, tc.message, e.Message, "the caller learns the kind of refusal, not the precise reason")
			assert.Contains(t, r.obs.all(), "auth:"+string(tc.reason), "but it is counted")
		})
	}
}

func TestIdentifyRefusesTwoAuthorizationHeaders(t *testing.T) {
	r := newRig(t, false)
	first := bearer(t, "acme", "small", time.Hour)
	for _, tc := range []struct {
		name   string
		second string
	}{
		{"two tenants' tokens: the first would win silently", bearer(t, "victim", "open", time.Hour)},
		{"the same token twice", first},
		{"a token and an empty header", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
			req.Header.Add("Authorization", first)
			req.Header.Add("Authorization", tc.second)
			id, e := r.g.Identify(req)
			require.NotNil(t, e, "two Authorization headers must be refused, not resolved as %+v", id)
			assert.Equal(t, http.StatusUnauthorized, e.Status)
			assert.Equal(t, "invalid_token", e.Code)
			assert.Equal(t, identity.ErrInvalid.Error(), e.Message, "the caller learns only that the token is invalid")
			assert.Contains(t, r.obs.all(), "auth:"+string(identity.ReasonRepeatedHeader), "the precise reason is counted")
		})
	}
}

func TestIdentifyRefusesATierThePolicyDoesNotServe(t *testing.T) {
	r := newRig(t, false)
	_, e := identify(r, bearer(t, "acme", "platinum", time.Hour))
	require.NotNil(t, e)
	assert.Equal(t, http.StatusForbidden, e.Status)
	assert.Equal(t, "unknown_tier", e.Code)
	assert.Equal(t, []string{"tier:tier"}, r.obs.all())
}

func TestIdentityKeysNeverCollideWhateverTheTenantName(t *testing.T) {
	r := newRig(t, false)
	keys := map[string]string{}
	for _, tenant := range []string{"acme", "{acme}", "%7Bacme%7D", "a{b}c%"} {
		t.Run(tenant, func(t *testing.T) { // in order: each tenant's key is checked against the ones before it
			id, e := identify(r, bearer(t, tenant, "small", time.Hour))
			require.Nil(t, e, tenant)
			assert.Equal(t, tenant, id.Tenant)
			assert.Equal(t, "small", id.Tier)
			assert.NotContains(t, id.Key, "{", "a brace would break the limits' hash tag")
			assert.NotContains(t, id.Key, "}")
			if other, dup := keys[id.Key]; dup {
				t.Fatalf("tenants %q and %q share the key %q", other, tenant, id.Key)
			}
			keys[id.Key] = tenant
		})
	}
}

func ask(body int, maxTokens int) tenant.Admission {
	return tenant.Admission{Model: router.AutoModel, BodyBytes: body, MaxTokens: maxTokens}
}

func TestAdmitChecksTheCheapLimitsFirstAndTakesNothingOnRefusal(t *testing.T) {
	r := newRig(t, false)
	id := tenant.Identity{Key: "acme", Tenant: "acme", Tier: "small"}
	for _, tc := range []struct {
		name   string
		a      tenant.Admission
		status int
		code   string
		limit  policy.Limit
	}{
		{"a model the tier may not use", tenant.Admission{Model: "beta", BodyBytes: 10}, http.StatusForbidden, "model_not_allowed", policy.LimitModel},
		{"a body over the tier's size", ask(1001, 1), http.StatusRequestEntityTooLarge, "prompt_too_large", policy.LimitPromptBytes},
		{"more tokens than the whole quota", ask(400, 1901), http.StatusRequestEntityTooLarge, "tokens_over_quota", policy.LimitTokens},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, done, e := r.admit(t.Context(), id, tc.a)
			require.NotNil(t, e)
			assert.Nil(t, done)
			assert.Equal(t, tc.status, e.Status)
			assert.Equal(t, tc.code, e.Code)
			assert.Contains(t, r.obs.all(), "tier:"+string(tc.limit))
		})
	}
	_, done, e := r.admit(t.Context(), id, ask(400, 100))
	require.Nil(t, e, "none of the refusals took the tenant's one in-flight slot or any of its tokens")
	done(&llm.Usage{TotalTokens: 50}, nil)
}

func TestAdmitHoldsTheTenantToItsInFlightCapUntilDone(t *testing.T) {
	r := newRig(t, false)
	id := tenant.Identity{Key: "acme", Tier: "small"}
	ctx, done, e := r.admit(t.Context(), id, ask(100, 10))
	require.Nil(t, e)
	deadline, ok := ctx.Deadline()
	require.True(t, ok, "the request runs under its tier's timeout")
	assert.WithinDuration(t, time.Now().Add(7*time.Second), deadline, time.Second)
	_, _, e = r.admit(t.Context(), id, ask(100, 10))
	require.NotNil(t, e, "max_in_flight 1: a second request is refused")
	assert.Equal(t, http.StatusTooManyRequests, e.Status)
	assert.Equal(t, "too_many_concurrent_requests", e.Code)
	assert.Equal(t, time.Second, e.RetryAfter)
	other := tenant.Identity{Key: "other", Tier: "small"}
	_, odone, e := r.admit(t.Context(), other, ask(100, 10))
	require.Nil(t, e, "another tenant has its own cap")
	odone(nil, nil)
	done(&llm.Usage{TotalTokens: 30}, nil)
	assert.ErrorIs(t, ctx.Err(), context.Canceled, "done ends the request's context")
	_, done, e = r.admit(t.Context(), id, ask(100, 10))
	require.Nil(t, e, "done gave the lease back")
	done(nil, nil)
}

func TestATokenRefusalGivesTheLeaseBackAndSaysWhenToRetry(t *testing.T) {
	r := newRig(t, false)
	id := tenant.Identity{Key: "acme", Tier: "small"}
	ctx, done, e := r.admit(t.Context(), id, ask(400, 1800)) // 100 + 1800 of 2000
	require.Nil(t, e)
	_, _, e2 := r.admit(t.Context(), id, ask(400, 10))
	require.NotNil(t, e2, "the lease is taken by the running request")
	_, err := r.call(ctx, &upstream{usage: &llm.Usage{TotalTokens: 1900}})
	require.NoError(t, err)
	done(nil, nil)
	_, _, e = r.admit(t.Context(), id, ask(400, 1800))
	require.NotNil(t, e, "1,900 used, 100 left: 1,900 more does not fit")
	assert.Equal(t, http.StatusTooManyRequests, e.Status)
	assert.Equal(t, "tokens_per_minute", e.Code)
	assert.Positive(t, e.RetryAfter, "with when it will")
	_, done, e = r.admit(t.Context(), id, ask(4, 10))
	require.Nil(t, e, "and the refused reservation gave the lease back")
	done(nil, nil)
}

func TestTheEstimateIsThePromptAtFourBytesATokenPlusTheAnswer(t *testing.T) {
	r := newRig(t, false)
	id := tenant.Identity{Key: "acme", Tier: "small"}
	_, _, e := r.admit(t.Context(), id, ask(404, 1900))
	require.NotNil(t, e, "101 + 1,900 is one token over the whole quota of 2,000")
	assert.Equal(t, "tokens_over_quota", e.Code)
	_, done, e := r.admit(t.Context(), id, ask(400, 1900))
	require.Nil(t, e, "100 + 1,900 fills it exactly")
	done(nil, nil) // no call was made: a full refund

	_, done, e = r.admit(t.Context(), id, ask(400, 0))
	require.Nil(t, e)
	defer done(nil, nil)
	assert.Equal(t, 2000-(100+DefaultMaxTokens), r.left(t, "acme", 2000), "no max_tokens: the default answer is reserved")
}

func TestEachOfTheAnswersAskedForIsReserved(t *testing.T) {
	r := newRig(t, false)
	id := tenant.Identity{Key: "acme", Tier: "small"}
	a := ask(400, 600)
	a.Choices = 4
	_, _, e := r.admit(t.Context(), id, a)
	require.NotNil(t, e, "100 + 4 × 600 is over the whole quota of 2,000")
	assert.Equal(t, "tokens_over_quota", e.Code)
	a.Choices = 3
	_, done, e := r.admit(t.Context(), id, a)
	require.Nil(t, e)
	defer done(nil, nil)
	assert.Equal(t, 2000-(100+3*600), r.left(t, "acme", 2000), "n = 3: three answers of up to 600 each")
}

func TestEachMediaPartIsReservedWhatItsBytesDoNotShow(t *testing.T) {
	r := newRig(t, false)
	id := tenant.Identity{Key: "acme", Tier: "small"}
	a := ask(400, 100)
	a.MediaParts = 1
	_, done, e := r.admit(t.Context(), id, a)
	require.Nil(t, e)
	defer done(nil, nil)
	assert.Equal(t, 2000-(100+MediaPartTokens+100), r.left(t, "acme", 2000), "an image is a URL here and a thousand tokens upstream")
}

func TestATierWithoutATokenQuotaIsNotCharged(t *testing.T) {
	r := newRig(t, false)
	id := tenant.Identity{Key: "acme", Tier: "open"}
	for range 3 {
		ctx, done, e := r.admit(t.Context(), id, ask(900_000, 100_000))
		require.Nil(t, e, "tokens_per_minute 0 is no token quota")
		p := &upstream{usage: &llm.Usage{TotalTokens: 1_000_000}}
		_, err := r.call(ctx, p)
		require.NoError(t, err)
		assert.Zero(t, p.maxTokens, "and no answer cap is asked of the upstream")
		done(nil, nil)
	}
}

func TestTheRateLimitIsTheTiersOwn(t *testing.T) {
	r := newRig(t, false)
	lim := r.g.Limiter()
	_, err := lim.Allow(t.Context(), "acme") // no identity: no tier
	assert.ErrorContains(t, err, "no rate limit for tier", "a request without a tier has no rate to be held to")
	for _, tc := range []struct {
		tier    string
		allowed int
	}{{"open", 1}, {"small", 5}} {
		t.Run(tc.tier, func(t *testing.T) {
			ctx := tenant.WithIdentity(t.Context(), tenant.Identity{Key: "k", Tier: tc.tier})
			n := 0
			for range 5 {
				d, err := lim.Allow(ctx, "k-"+tc.tier)
				require.NoError(t, err)
				if d.Allowed {
					n++
				}
			}
			assert.Equal(t, tc.allowed, n, "burst 1 on open, 100 on small")
		})
	}
}

func TestARedisOutageFailsClosedOrOpenAsConfigured(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail_open=%v", failOpen), func(t *testing.T) {
			r := newRig(t, failOpen)
			r.m.Close() // Redis is gone
			_, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(100, 10))
			if failOpen {
				require.Nil(t, e, "fail open admits")
				done(nil, nil)
			} else {
				require.NotNil(t, e)
				assert.Equal(t, http.StatusServiceUnavailable, e.Status)
				assert.Equal(t, "limits_unavailable", e.Code)
				assert.Equal(t, time.Second, e.RetryAfter)
			}
			assert.Contains(t, r.obs.all(), "redis:in_flight", "the failure is counted either way")
		})
	}
}
