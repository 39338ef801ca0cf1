package identity_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMintedTokenVerifiesUntilItExpires(t *testing.T) {
	now := t0.Add(700 * time.Millisecond) // a clock with a fraction of a second
	tok, err := identity.Mint(secret, testIssuer, testAudience, "acme", "enterprise", time.Hour, now)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(tok, "."), "a JWT is three segments")

	clock := now
	v := newVerifier(t, func(c *identity.Config) { c.Now = func() time.Time { return clock } })
	got, err := v.Verify("Bearer " + tok)
	require.NoError(t, err, "a minted token verifies; refused: %q", identity.ReasonOf(err))
	assert.Equal(t, identity.Claims{Tenant: "acme", Tier: "enterprise", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)}, got,
		"times are whole seconds: now truncated, exp = now + ttl")

	clock = t0.Add(time.Hour + identity.DefaultLeeway)
	got, err = v.Verify("Bearer " + tok)
	requireRefusal(t, "Bearer "+tok, got, err, identity.ErrExpired, identity.ReasonExpired)

	clock = t0.Add(-identity.DefaultLeeway - time.Second)
	got, err = v.Verify("Bearer " + tok)
	requireRefusal(t, "Bearer "+tok, got, err, identity.ErrInvalid, identity.ReasonNotYetValid)
}

func TestMintWritesTheClaimsVerifyRequires(t *testing.T) {
	tok, err := identity.Mint(secret, testIssuer, testAudience, "acme", "pro", 90*time.Second, t0)
	require.NoError(t, err)
	parts := strings.Split(tok, ".")
	var header, payload map[string]any
	raw, err := base64.RawURLEncoding.DecodeString(parts[0])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &header))
	raw, err = base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &payload))

	assert.Equal(t, "HS256", header["alg"])
	assert.Equal(t, map[string]any{
		"iss": testIssuer, "aud": []any{testAudience},
		"iat": float64(t0.Unix()), "nbf": float64(t0.Unix()), "exp": float64(t0.Unix() + 90),
		"tenant": "acme", "tier": "pro",
	}, payload)
}

func TestMintRefusesWhatVerifyWouldRefuse(t *testing.T) {
	short := []byte("short-secret")
	tests := []struct {
		name                   string
		secret                 []byte
		iss, aud, tenant, tier string
		ttl                    time.Duration
		want                   string
	}{
		{"short secret", short, testIssuer, testAudience, "acme", "pro", time.Hour, "the secret is 12 bytes; at least 32"},
		{"empty issuer", secret, "", testAudience, "acme", "pro", time.Hour, "issuer is empty"},
		{"empty audience", secret, testIssuer, "", "acme", "pro", time.Hour, "audience is empty"},
		{"empty tenant", secret, testIssuer, testAudience, "", "pro", time.Hour, string(identity.ReasonMissingTenant)},
		{"long tenant", secret, testIssuer, testAudience, long64 + "x", "pro", time.Hour, string(identity.ReasonTenantTooLong)},
		{"tenant with a space", secret, testIssuer, testAudience, "a b", "pro", time.Hour, string(identity.ReasonTenantChars)},
		{"empty tier", secret, testIssuer, testAudience, "acme", "", time.Hour, string(identity.ReasonMissingTier)},
		{"sub-second ttl", secret, testIssuer, testAudience, "acme", "pro", 999 * time.Millisecond, "ttl 999ms is under a second"},
		{"negative ttl", secret, testIssuer, testAudience, "acme", "pro", -time.Hour, "ttl -1h0m0s is under a second"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := identity.Mint(tc.secret, tc.iss, tc.aud, tc.tenant, tc.tier, tc.ttl, t0)
			require.Error(t, err)
			assert.Empty(t, tok)
			assert.ErrorIs(t, err, identity.ErrConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), string(short))
		})
	}
}

func TestMintRefusesATTLOverTheMaxLifetime(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		opts []identity.MintOption
		want string // in the error; "" = minted
	}{
		{name: "a century (token --ttl 876000h)", ttl: 876000 * time.Hour, want: "ttl 876000h0m0s is over the 24h0m0s a token may live"},
		{name: "a day and a second", ttl: 24*time.Hour + time.Second, want: "is over the 24h0m0s"},
		{name: "exactly a day", ttl: 24 * time.Hour},
		{name: "a week with WithMaxLifetime(a week)", ttl: 7 * 24 * time.Hour, opts: []identity.MintOption{identity.WithMaxLifetime(7 * 24 * time.Hour)}},
		{name: "two hours with WithMaxLifetime(an hour)", ttl: 2 * time.Hour, opts: []identity.MintOption{identity.WithMaxLifetime(time.Hour)},
			want: "ttl 2h0m0s is over the 1h0m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := identity.Mint(secret, testIssuer, testAudience, "acme", "pro", tc.ttl, t0, tc.opts...)
			if tc.want != "" {
				require.Error(t, err)
				assert.Empty(t, tok)
				assert.ErrorIs(t, err, identity.ErrConfig)
				assert.Contains(t, err.Error(), tc.want)
				return
			}
			require.NoError(t, err)
			lifetime := tc.ttl
			_, err = newVerifier(t, func(c *identity.Config) { c.MaxLifetime = max(lifetime, identity.DefaultMaxLifetime) }).Verify("Bearer " + tok)
			require.NoError(t, err, "what Mint signs under a cap, a verifier with that cap accepts; refused: %q", identity.ReasonOf(err))
		})
	}
}

// TestRefusalLogsCarryNoSecretOrToken runs the whole refusal table and logs
// each refusal the way a server would (the reason and the error), then
// searches the output for the secrets and the tokens, whole and by segment.
func TestRefusalLogsCarryNoSecretOrToken(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))

	var headers []string
	for _, tc := range refusals {
		v := newVerifier(t, tc.config...)
		h := tc.header(t)
		_, err := v.Verify(h)
		require.Error(t, err, "%s: refused", tc.name)
		log.LogAttrs(context.Background(), slog.LevelWarn, "request refused",
			slog.String("reason", string(identity.ReasonOf(err))), slog.Any("error", err))
		headers = append(headers, h)
	}
	out := buf.String()
	require.Equal(t, len(refusals), strings.Count(out, `"msg":"request refused"`), "one log line per refusal")
	for _, s := range [][]byte{secret, prevSecret} {
		require.NotContains(t, out, string(s), "a secret in the logs")
		require.NotContains(t, out, base64.StdEncoding.EncodeToString(s), "a base64 secret in the logs")
	}
	for _, h := range headers {
		if i := strings.IndexByte(h, ' '); i >= 0 {
			h = strings.TrimLeft(h[i+1:], " ")
		}
		if len(h) < 8 {
			continue // "x", "": too short to be told apart from ordinary words
		}
		require.NotContains(t, out, h, "a token in the logs")
		for _, seg := range strings.Split(h, ".") {
			if len(seg) >= 16 {
				require.NotContains(t, out, seg, "a token segment in the logs")
			}
		}
	}
}
