package identity_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testIssuer   = "https://auth.gateway.test"
	testAudience = "gateway-lab"
)

var (
	// t0 is the fake "now" of every table test: whole seconds, since JWT
	// times are whole seconds.
	t0         = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	secret     = []byte("current-secret-0123456789abcdefghij")
	prevSecret = []byte("previous-secret-0123456789abcdefghi")
	// rsaKey and ecKey are generated once per process: key generation is
	// slow under -race and the tests only need some key of each family.
	rsaKey = sync.OnceValue(func() *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, 1024) // small: only its algorithm matters
		if err != nil {
			panic(err)
		}
		return k
	})
	ecKey = sync.OnceValue(func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		return k
	})
)

// claims returns a valid payload for t0, edited by the given functions.
func claims(edits ...func(jwt.MapClaims)) jwt.MapClaims {
	c := jwt.MapClaims{
		"iss":    testIssuer,
		"aud":    testAudience,
		"iat":    t0.Unix(),
		"nbf":    t0.Unix(),
		"exp":    t0.Add(time.Hour).Unix(),
		"tenant": "acme",
		"tier":   "pro",
	}
	for _, e := range edits {
		e(c)
	}
	return c
}

func set(k string, v any) func(jwt.MapClaims) { return func(c jwt.MapClaims) { c[k] = v } }
func del(k string) func(jwt.MapClaims)        { return func(c jwt.MapClaims) { delete(c, k) } }

func sign(t testing.TB, m jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	tok, err := jwt.NewWithClaims(m, c).SignedString(key)
	require.NoError(t, err)
	return tok
}

func hs256(t testing.TB, c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, secret, c) }

func b64(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// handMade builds a token from a header, a payload and a signature function,
// without the jwt library, so it can say things the library would not.
func handMade(header map[string]any, c jwt.MapClaims, sig func(signingInput string) []byte) string {
	in := b64(header) + "." + b64(c)
	return in + "." + base64.RawURLEncoding.EncodeToString(sig(in))
}

func hmacSHA256(key []byte) func(string) []byte {
	return func(in string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(in))
		return m.Sum(nil)
	}
}

func noSig(string) []byte { return nil }

// rawSigned signs a payload written by hand — duplicate keys, odd types —
// with the real secret: what only a confused or compromised minter makes.
func rawSigned(payload string) string {
	in := b64(map[string]any{"alg": "HS256", "typ": "JWT"}) + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
	return in + "." + base64.RawURLEncoding.EncodeToString(hmacSHA256(secret)(in))
}

// payload is the default claims as JSON text with extra appended before the
// closing brace.
func payload(extra string) string {
	b, err := json.Marshal(claims())
	if err != nil {
		panic(err)
	}
	return strings.TrimSuffix(string(b), "}") + extra + "}"
}

// forgeTier re-encodes tok's payload with another tier and keeps the
// original signature: what a caller who wants a better tier would try.
func forgeTier(t testing.TB, tok, tier string) string {
	t.Helper()
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var c jwt.MapClaims
	require.NoError(t, json.Unmarshal(raw, &c))
	c["tier"] = tier
	return parts[0] + "." + b64(c) + "." + parts[2]
}

func rsaPublicPEM(t testing.TB) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(&rsaKey().PublicKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func newVerifier(t testing.TB, edits ...func(*identity.Config)) *identity.Verifier {
	t.Helper()
	cfg := identity.Config{Secret: secret, Issuer: testIssuer, Audience: testAudience, Now: func() time.Time { return t0 }}
	for _, e := range edits {
		e(&cfg)
	}
	v, err := identity.NewVerifier(cfg)
	require.NoError(t, err)
	return v
}

func withPrevious(c *identity.Config) { c.Previous = prevSecret }

var kinds = []error{identity.ErrMissing, identity.ErrExpired, identity.ErrInvalid}

// requireRefusal checks that err is exactly the wanted kind with the wanted
// reason, and that neither the error text nor the reason leaks the token.
func requireRefusal(t *testing.T, header string, got identity.Claims, err error, kind error, reason identity.Reason) {
	t.Helper()
	require.Error(t, err, "want a refusal (%s), the token was accepted as %+v", reason, got)
	assert.Equal(t, reason, identity.ReasonOf(err), "Reason(err)")
	assert.ErrorIs(t, err, identity.ErrUnauthorized, "every refusal matches ErrUnauthorized")
	for _, k := range kinds {
		assert.Equal(t, k == kind, errors.Is(err, k), "errors.Is(err, %q) for a %q refusal", k, kind)
	}
	assert.Equal(t, kind.Error(), err.Error(), "the error text is the kind's text alone, safe to show the caller")
	assert.Zero(t, got, "a refusal returns zero Claims")
	if tok := strings.TrimSpace(header[min(len(header), 7):]); len(tok) >= 8 {
		assert.NotContains(t, err.Error()+string(identity.ReasonOf(err)), tok, "no error text contains the token")
	}
}

func TestVerifyAcceptsGoodTokens(t *testing.T) {
	tests := []struct {
		name   string
		header func(t *testing.T) string
		config []func(*identity.Config)
		want   identity.Claims
	}{
		{
			name:   "valid HS256 token",
			header: func(t *testing.T) string { return "Bearer " + hs256(t, claims()) },
			want:   identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name:   "lowercase scheme: RFC 6750 §2.1 bearer is case-insensitive",
			header: func(t *testing.T) string { return "bearer " + hs256(t, claims()) },
			want:   identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name:   "uppercase scheme",
			header: func(t *testing.T) string { return "BEARER " + hs256(t, claims()) },
			want:   identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name:   "several spaces after the scheme (RFC 9110 credentials = auth-scheme 1*SP token68)",
			header: func(t *testing.T) string { return "Bearer   " + hs256(t, claims()) },
			want:   identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name:   "expired 29s ago is inside the 30s leeway",
			header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("exp", t0.Unix()-29))) },
			want:   identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(-29 * time.Second)},
		},
		{
			name:   "nbf 30s ahead is inside the 30s leeway",
			header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("nbf", t0.Unix()+30))) },
			want:   identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name: "aud as a list that includes ours, sub, no nbf",
			header: func(t *testing.T) string {
				return "Bearer " + hs256(t, claims(set("aud", []string{"other", testAudience}), set("sub", "svc-7"), del("nbf")))
			},
			want: identity.Claims{Tenant: "acme", Tier: "pro", Subject: "svc-7", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name: "a claim the verifier does not read may come in any case",
			header: func(t *testing.T) string {
				return "Bearer " + hs256(t, claims(set("role", "a"), set("ROLE", "b"), set("Tenant_ID", "x")))
			},
			want: identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name: "tenant and tier of exactly 64 visible ASCII bytes",
			header: func(t *testing.T) string {
				return "Bearer " + hs256(t, claims(set("tenant", long64), set("tier", long64)))
			},
			want: identity.Claims{Tenant: long64, Tier: long64, IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name:   "signed with the current secret while a previous one is configured",
			header: func(t *testing.T) string { return "Bearer " + hs256(t, claims()) },
			config: []func(*identity.Config){withPrevious},
			want:   identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour)},
		},
		{
			name:   "signed with the previous secret during rotation",
			header: func(t *testing.T) string { return "Bearer " + sign(t, jwt.SigningMethodHS256, prevSecret, claims()) },
			config: []func(*identity.Config){withPrevious},
			want:   identity.Claims{Tenant: "acme", Tier: "pro", IssuedAt: t0, ExpiresAt: t0.Add(time.Hour), SignedWithPrevious: true},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newVerifier(t, tc.config...)
			got, err := v.Verify(tc.header(t))
			require.NoError(t, err, "want the token accepted; refused because %q", identity.ReasonOf(err))
			assert.Equal(t, tc.want, got)
		})
	}
}

// long64 is 64 bytes spanning the whole visible ASCII range's ends.
var long64 = "!" + strings.Repeat("a", 62) + "~"

// refusal is a header Verify must refuse, with the kind and reason it must
// give. The table is shared by TestVerifyRefusesBadTokens and
// TestRefusalLogsCarryNoSecretOrToken.
type refusal struct {
	name   string
	header func(t *testing.T) string
	config []func(*identity.Config)
	kind   error
	reason identity.Reason
}

var refusals = []refusal{
	// time
	{name: "expired an hour ago", kind: identity.ErrExpired, reason: identity.ReasonExpired,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("exp", t0.Unix()-3600))) }},
	{name: "expired exactly the 30s leeway ago", kind: identity.ErrExpired, reason: identity.ReasonExpired,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("exp", t0.Unix()-30))) }},
	{name: "not yet valid: nbf 31s ahead, past the leeway", kind: identity.ErrInvalid, reason: identity.ReasonNotYetValid,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("nbf", t0.Unix()+31))) }},
	{name: "no exp: a token that never expires", kind: identity.ErrInvalid, reason: identity.ReasonMissingExp,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(del("exp"))) }},
	{name: "exp as a string", kind: identity.ErrInvalid, reason: identity.ReasonClaimType,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("exp", "tomorrow"))) }},
	// who minted it and for whom
	{name: "wrong iss", kind: identity.ErrInvalid, reason: identity.ReasonWrongIssuer,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("iss", "https://evil.test"))) }},
	{name: "no iss", kind: identity.ErrInvalid, reason: identity.ReasonMissingIssuer,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(del("iss"))) }},
	{name: "wrong aud", kind: identity.ErrInvalid, reason: identity.ReasonWrongAudience,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("aud", "billing"))) }},
	{name: "aud list without ours", kind: identity.ErrInvalid, reason: identity.ReasonWrongAudience,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("aud", []string{"a", "b"}))) }},
	{name: "no aud", kind: identity.ErrInvalid, reason: identity.ReasonMissingAudience,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(del("aud"))) }},
	{name: "expired and for another audience is invalid, not expired", kind: identity.ErrInvalid, reason: identity.ReasonWrongAudience,
		header: func(t *testing.T) string {
			return "Bearer " + hs256(t, claims(set("aud", "billing"), set("exp", t0.Unix()-3600)))
		}},
	{name: "expired and without a tenant is invalid, not expired", kind: identity.ErrInvalid, reason: identity.ReasonMissingTenant,
		header: func(t *testing.T) string {
			return "Bearer " + hs256(t, claims(del("tenant"), set("exp", t0.Unix()-3600)))
		}},
	// tenant and tier
	{name: "missing tenant", kind: identity.ErrInvalid, reason: identity.ReasonMissingTenant,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(del("tenant"))) }},
	{name: "empty tenant", kind: identity.ErrInvalid, reason: identity.ReasonMissingTenant,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tenant", ""))) }},
	{name: "tenant of 65 bytes", kind: identity.ErrInvalid, reason: identity.ReasonTenantTooLong,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tenant", long64+"x"))) }},
	{name: "tenant with a space", kind: identity.ErrInvalid, reason: identity.ReasonTenantChars,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tenant", "ac me"))) }},
	{name: "tenant with a newline (log injection)", kind: identity.ErrInvalid, reason: identity.ReasonTenantChars,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tenant", "acme\nlevel=ERROR"))) }},
	{name: "tenant with DEL", kind: identity.ErrInvalid, reason: identity.ReasonTenantChars,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tenant", "acme\x7f"))) }},
	{name: "tenant not ASCII", kind: identity.ErrInvalid, reason: identity.ReasonTenantChars,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tenant", "acmé"))) }},
	{name: "tenant as a number", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tenant", 42))) }},
	{name: "missing tier", kind: identity.ErrInvalid, reason: identity.ReasonMissingTier,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(del("tier"))) }},
	{name: "empty tier", kind: identity.ErrInvalid, reason: identity.ReasonMissingTier,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tier", ""))) }},
	{name: "tier of 65 bytes", kind: identity.ErrInvalid, reason: identity.ReasonTierTooLong,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tier", long64+"x"))) }},
	{name: "tier with a tab", kind: identity.ErrInvalid, reason: identity.ReasonTierChars,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims(set("tier", "pro\t"))) }},
	// algorithm and signature
	{name: "alg none, unsigned (hand-built)", kind: identity.ErrInvalid, reason: identity.ReasonAlgNone,
		header: func(t *testing.T) string {
			return "Bearer " + handMade(map[string]any{"alg": "none", "typ": "JWT"}, claims(), noSig)
		}},
	{name: "alg NoNe, unsigned", kind: identity.ErrInvalid, reason: identity.ReasonAlgNone,
		header: func(t *testing.T) string { return "Bearer " + handMade(map[string]any{"alg": "NoNe"}, claims(), noSig) }},
	{name: "alg none with an HMAC signature attached", kind: identity.ErrInvalid, reason: identity.ReasonAlgNone,
		header: func(t *testing.T) string {
			return "Bearer " + handMade(map[string]any{"alg": "none"}, claims(), hmacSHA256(secret))
		}},
	{name: "no alg in the header", kind: identity.ErrInvalid, reason: identity.ReasonAlgMissing,
		header: func(t *testing.T) string {
			return "Bearer " + handMade(map[string]any{"typ": "JWT"}, claims(), hmacSHA256(secret))
		}},
	{name: "RS256 signed with an RSA key", kind: identity.ErrInvalid, reason: identity.ReasonAlgNotAllowed,
		header: func(t *testing.T) string { return "Bearer " + sign(t, jwt.SigningMethodRS256, rsaKey(), claims()) }},
	{name: "PS256 signed with an RSA key", kind: identity.ErrInvalid, reason: identity.ReasonAlgNotAllowed,
		header: func(t *testing.T) string { return "Bearer " + sign(t, jwt.SigningMethodPS256, rsaKey(), claims()) }},
	{name: "ES256 signed with an EC key", kind: identity.ErrInvalid, reason: identity.ReasonAlgNotAllowed,
		header: func(t *testing.T) string { return "Bearer " + sign(t, jwt.SigningMethodES256, ecKey(), claims()) }},
	{name: "key confusion: HS256 with the RSA public key as HMAC secret", kind: identity.ErrInvalid, reason: identity.ReasonSignature,
		header: func(t *testing.T) string {
			return "Bearer " + sign(t, jwt.SigningMethodHS256, rsaPublicPEM(t), claims())
		}},
	{name: "key confusion: alg RS256 over an HMAC of our secret", kind: identity.ErrInvalid, reason: identity.ReasonAlgNotAllowed,
		header: func(t *testing.T) string {
			return "Bearer " + handMade(map[string]any{"alg": "RS256"}, claims(), hmacSHA256(secret))
		}},
	{name: "HS512 with our secret", kind: identity.ErrInvalid, reason: identity.ReasonAlgNotAllowed,
		header: func(t *testing.T) string { return "Bearer " + sign(t, jwt.SigningMethodHS512, secret, claims()) }},
	{name: "HS384 with our secret", kind: identity.ErrInvalid, reason: identity.ReasonAlgNotAllowed,
		header: func(t *testing.T) string { return "Bearer " + sign(t, jwt.SigningMethodHS384, secret, claims()) }},
	{name: "alg hs256 in lower case", kind: identity.ErrInvalid, reason: identity.ReasonAlgNotAllowed,
		header: func(t *testing.T) string {
			return "Bearer " + handMade(map[string]any{"alg": "hs256"}, claims(), hmacSHA256(secret))
		}},
	{name: "HS256 with another secret", kind: identity.ErrInvalid, reason: identity.ReasonSignature,
		header: func(t *testing.T) string {
			return "Bearer " + sign(t, jwt.SigningMethodHS256, []byte("another-secret-0123456789abcdefghij"), claims())
		}},
	{name: "signed with a previous secret that is no longer configured", kind: identity.ErrInvalid, reason: identity.ReasonSignature,
		header: func(t *testing.T) string { return "Bearer " + sign(t, jwt.SigningMethodHS256, prevSecret, claims()) }},
	{name: "forged tier: payload edited after signing", kind: identity.ErrInvalid, reason: identity.ReasonSignature,
		header: func(t *testing.T) string {
			return "Bearer " + forgeTier(t, hs256(t, claims(set("tier", "free"))), "enterprise")
		}},
	{name: "forged tier with a previous secret configured", kind: identity.ErrInvalid, reason: identity.ReasonSignature,
		config: []func(*identity.Config){withPrevious},
		header: func(t *testing.T) string {
			return "Bearer " + forgeTier(t, hs256(t, claims(set("tier", "free"))), "enterprise")
		}},
	{name: "signature stripped", kind: identity.ErrInvalid, reason: identity.ReasonSignature,
		header: func(t *testing.T) string {
			tok := hs256(t, claims())
			return "Bearer " + tok[:strings.LastIndexByte(tok, '.')+1]
		}},
	{name: "crit header we cannot honour", kind: identity.ErrInvalid, reason: identity.ReasonCrit,
		header: func(t *testing.T) string {
			return "Bearer " + handMade(map[string]any{"alg": "HS256", "crit": []string{"exp-v2"}, "exp-v2": true}, claims(), hmacSHA256(secret))
		}},
	{name: "a claim named twice (the last would win)", kind: identity.ErrInvalid, reason: identity.ReasonDuplicateClaim,
		header: func(*testing.T) string { return "Bearer " + rawSigned(payload(`,"tier":"enterprise"`)) }},
	{name: "exp as a numeric string (the library would accept it)", kind: identity.ErrInvalid, reason: identity.ReasonClaimType,
		header: func(*testing.T) string {
			return "Bearer " + rawSigned(strings.Replace(payload(""), fmt.Sprintf(`"exp":%d`, t0.Add(time.Hour).Unix()), fmt.Sprintf(`"exp":"%d"`, t0.Add(time.Hour).Unix()), 1))
		}},
	{name: "exp far past year 9999", kind: identity.ErrInvalid, reason: identity.ReasonClaimType,
		header: func(*testing.T) string {
			return "Bearer " + rawSigned(strings.Replace(payload(""), fmt.Sprintf(`"exp":%d`, t0.Add(time.Hour).Unix()), `"exp":1e30`, 1))
		}},
	// header shapes
	{name: "no header", kind: identity.ErrMissing, reason: identity.ReasonNoHeader,
		header: func(*testing.T) string { return "" }},
	{name: `"Bearer" alone`, kind: identity.ErrMissing, reason: identity.ReasonEmptyToken,
		header: func(*testing.T) string { return "Bearer" }},
	{name: `"Bearer " and nothing`, kind: identity.ErrMissing, reason: identity.ReasonEmptyToken,
		header: func(*testing.T) string { return "Bearer   " }},
	{name: `"Bearer  x": two spaces then junk`, kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(*testing.T) string { return "Bearer  x" }},
	{name: "Basic credentials", kind: identity.ErrMissing, reason: identity.ReasonNotBearer,
		header: func(*testing.T) string { return "Basic YWNtZTpodW50ZXIy" }},
	{name: "a token without a scheme", kind: identity.ErrMissing, reason: identity.ReasonNotBearer,
		header: func(t *testing.T) string { return hs256(t, claims()) }},
	{name: "a tab instead of a space", kind: identity.ErrMissing, reason: identity.ReasonNotBearer,
		header: func(t *testing.T) string { return "Bearer\t" + hs256(t, claims()) }},
	{name: "Bearer: with a colon", kind: identity.ErrMissing, reason: identity.ReasonNotBearer,
		header: func(t *testing.T) string { return "Bearer: " + hs256(t, claims()) }},
	{name: "trailing text after the token", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims()) + " extra" }},
	{name: "two tokens, comma separated", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims()) + "," + hs256(t, claims()) }},
	{name: "three dots", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims()) + ".e30" }},
	{name: "two segments", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(t *testing.T) string {
			tok := hs256(t, claims())
			return "Bearer " + tok[:strings.LastIndexByte(tok, '.')]
		}},
	{name: "padded base64", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(t *testing.T) string { return "Bearer " + hs256(t, claims()) + "=" }},
	{name: "standard base64 alphabet (plus and slash)", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(t *testing.T) string { return "Bearer a+b.c/d.e" }},
	{name: "segments that are not base64", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(*testing.T) string { return "Bearer a.b.c" }},
	{name: "header segment that is not JSON", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(*testing.T) string {
			return "Bearer " + base64.RawURLEncoding.EncodeToString([]byte("hello")) + ".e30.e30"
		}},
	{name: "a 10 KB token", kind: identity.ErrInvalid, reason: identity.ReasonHeaderTooLong,
		header: func(t *testing.T) string {
			return "Bearer " + hs256(t, claims(set("pad", strings.Repeat("p", 10_000))))
		}},
	{name: "a Basic header carrying the secret", kind: identity.ErrMissing, reason: identity.ReasonNotBearer,
		header: func(*testing.T) string { return "Basic " + base64.StdEncoding.EncodeToString(secret) }},
	{name: "the secret itself as the bearer token", kind: identity.ErrInvalid, reason: identity.ReasonMalformed,
		header: func(*testing.T) string { return "Bearer " + string(secret) }},
}

func TestVerifyRefusesBadTokens(t *testing.T) {
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			v := newVerifier(t, tc.config...)
			h := tc.header(t)
			got, err := v.Verify(h)
			requireRefusal(t, h, got, err, tc.kind, tc.reason)
		})
	}
}

// paddedHeader returns an Authorization header of exactly n bytes carrying a
// valid token: a pad claim gets it close, extra spaces after the scheme make
// up the rest.
func paddedHeader(t *testing.T, n int) string {
	t.Helper()
	build := func(pad int) string { return "Bearer " + hs256(t, claims(set("pad", strings.Repeat("p", pad)))) }
	// Each pad byte adds 4/3 of a base64 byte; start under n and grow.
	prev := ""
	for pad := (n - 450) * 3 / 4; pad < n; pad++ {
		h := build(pad)
		if len(h) > n {
			break
		}
		prev = h
	}
	require.NotEmpty(t, prev, "cannot build a header of %d bytes", n)
	h := "Bearer" + strings.Repeat(" ", n-len(prev)+1) + prev[len("Bearer "):]
	require.Len(t, h, n)
	return h
}

func TestVerifyCapsTheHeaderAtExactly8KiB(t *testing.T) {
	v := newVerifier(t)
	_, err := v.Verify(paddedHeader(t, identity.MaxHeaderBytes))
	require.NoError(t, err, "a valid token in a header of exactly %d bytes must pass; refused: %q", identity.MaxHeaderBytes, identity.ReasonOf(err))

	h := paddedHeader(t, identity.MaxHeaderBytes+1)
	got, err := v.Verify(h)
	requireRefusal(t, h, got, err, identity.ErrInvalid, identity.ReasonHeaderTooLong)
}

func TestVerifyLeewayIsConfigurable(t *testing.T) {
	v := newVerifier(t, func(c *identity.Config) { c.Leeway = 5 * time.Second })

	_, err := v.Verify("Bearer " + hs256(t, claims(set("exp", t0.Unix()-4))))
	require.NoError(t, err, "expired 4s ago is inside a 5s leeway; refused: %q", identity.ReasonOf(err))
	h := "Bearer " + hs256(t, claims(set("exp", t0.Unix()-5)))
	got, err := v.Verify(h)
	requireRefusal(t, h, got, err, identity.ErrExpired, identity.ReasonExpired)

	_, err = v.Verify("Bearer " + hs256(t, claims(set("nbf", t0.Unix()+5))))
	require.NoError(t, err, "nbf 5s ahead is inside a 5s leeway; refused: %q", identity.ReasonOf(err))
	h = "Bearer " + hs256(t, claims(set("nbf", t0.Unix()+6)))
	got, err = v.Verify(h)
	requireRefusal(t, h, got, err, identity.ErrInvalid, identity.ReasonNotYetValid)
}

func TestVerifyReadsTheClockOnEveryCall(t *testing.T) {
	now := t0
	v := newVerifier(t, func(c *identity.Config) { c.Now = func() time.Time { return now } })
	h := "Bearer " + hs256(t, claims()) // exp t0+1h

	_, err := v.Verify(h)
	require.NoError(t, err, "valid at t0")
	now = t0.Add(time.Hour + 29*time.Second)
	_, err = v.Verify(h)
	require.NoError(t, err, "at exp+29s, inside the leeway")
	now = t0.Add(time.Hour + 30*time.Second)
	got, err := v.Verify(h)
	requireRefusal(t, h, got, err, identity.ErrExpired, identity.ReasonExpired)
	now = t0.Add(-time.Minute) // the clock stepped back before nbf
	got, err = v.Verify(h)
	requireRefusal(t, h, got, err, identity.ErrInvalid, identity.ReasonNotYetValid)
}

func TestVerifyWithoutNowUsesTheWallClock(t *testing.T) {
	v := newVerifier(t, func(c *identity.Config) { c.Now = nil })
	wall := time.Now()
	good, err := identity.Mint(secret, testIssuer, testAudience, "acme", "pro", time.Hour, wall)
	require.NoError(t, err)
	_, err = v.Verify("Bearer " + good)
	require.NoError(t, err, "a token minted now for an hour verifies on the wall clock; refused: %q", identity.ReasonOf(err))

	old, err := identity.Mint(secret, testIssuer, testAudience, "acme", "pro", time.Hour, wall.Add(-2*time.Hour))
	require.NoError(t, err)
	got, err := v.Verify("Bearer " + old)
	requireRefusal(t, "Bearer "+old, got, err, identity.ErrExpired, identity.ReasonExpired)
}

func TestVerifyIsSafeForConcurrentUse(t *testing.T) {
	v := newVerifier(t, withPrevious)
	good := "Bearer " + hs256(t, claims())
	old := "Bearer " + sign(t, jwt.SigningMethodHS256, prevSecret, claims(set("tenant", "globex")))
	bad := "Bearer " + forgeTier(t, hs256(t, claims()), "enterprise")
	var wg sync.WaitGroup
	errs := make(chan string, 8*3*20)
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if c, err := v.Verify(good); err != nil || c.Tenant != "acme" || c.SignedWithPrevious {
					errs <- "current token: " + string(identity.ReasonOf(err))
				}
				if c, err := v.Verify(old); err != nil || c.Tenant != "globex" || !c.SignedWithPrevious {
					errs <- "previous token: " + string(identity.ReasonOf(err))
				}
				if _, err := v.Verify(bad); identity.ReasonOf(err) != identity.ReasonSignature {
					errs <- "forged token: " + string(identity.ReasonOf(err))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("concurrent Verify went wrong: %s", e)
	}
}

func TestReasonOfOtherErrors(t *testing.T) {
	assert.Equal(t, identity.Reason(""), identity.ReasonOf(nil), "Reason(nil)")
	assert.Equal(t, identity.ReasonNotARefusal, identity.ReasonOf(errors.New("boom")), "Reason of a foreign error")
	_, err := newVerifier(t).Verify("Basic x")
	wrapped := errors.Join(errors.New("auth"), err)
	assert.Equal(t, identity.ReasonNotBearer, identity.ReasonOf(wrapped), "Reason sees through wrapping")
	assert.ErrorIs(t, wrapped, identity.ErrMissing)
}

func TestNewVerifierRefusesUnsafeConfig(t *testing.T) {
	short := []byte("a-31-byte-secret-0123456789abcd")
	require.Len(t, short, 31)
	tests := []struct {
		name string
		edit func(*identity.Config)
		want string // in the error text
	}{
		{"no secret", func(c *identity.Config) { c.Secret = nil }, "Secret is 0 bytes; at least 32"},
		{"31-byte secret", func(c *identity.Config) { c.Secret = short }, "Secret is 31 bytes; at least 32"},
		{"31-byte previous secret", func(c *identity.Config) { c.Previous = short }, "Previous is 31 bytes; at least 32"},
		{"empty but set previous secret", func(c *identity.Config) { c.Previous = []byte{} }, "Previous is 0 bytes"},
		{"empty issuer", func(c *identity.Config) { c.Issuer = "" }, "Issuer is empty"},
		{"empty audience", func(c *identity.Config) { c.Audience = "" }, "Audience is empty"},
		{"negative leeway", func(c *identity.Config) { c.Leeway = -time.Second }, "Leeway -1s is outside (0, 5m0s]"},
		{"leeway above the cap", func(c *identity.Config) { c.Leeway = 5*time.Minute + time.Second }, "Leeway 5m1s is outside"},
		{"negative max lifetime", func(c *identity.Config) { c.MaxLifetime = -time.Hour }, "MaxLifetime -1h0m0s is under a second"},
		{"max lifetime under a second", func(c *identity.Config) { c.MaxLifetime = 999 * time.Millisecond }, "MaxLifetime 999ms is under a second"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := identity.Config{Secret: secret, Issuer: testIssuer, Audience: testAudience}
			tc.edit(&cfg)
			v, err := identity.NewVerifier(cfg)
			require.Error(t, err, "want NewVerifier to refuse: %s", tc.name)
			assert.Nil(t, v)
			assert.ErrorIs(t, err, identity.ErrConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), string(short), "the error must not quote the secret")
		})
	}
	for _, tc := range []struct {
		name string
		edit func(*identity.Config)
	}{
		{"a secret of exactly 32 bytes", func(c *identity.Config) { c.Secret = secret[:32] }},
		{"the largest leeway", func(c *identity.Config) { c.Leeway = identity.MaxLeeway }},
		{"a leeway of one nanosecond", func(c *identity.Config) { c.Leeway = time.Nanosecond }},
		{"a max lifetime of one second", func(c *identity.Config) { c.MaxLifetime = time.Second }},
		{"a max lifetime of a week", func(c *identity.Config) { c.MaxLifetime = 7 * 24 * time.Hour }},
	} {
		t.Run(tc.name+" is accepted", func(t *testing.T) {
			cfg := identity.Config{Secret: secret, Issuer: testIssuer, Audience: testAudience}
			tc.edit(&cfg)
			_, err := identity.NewVerifier(cfg)
			assert.NoError(t, err, "boundary config %+v must be accepted", cfg)
		})
	}
}

func TestNewVerifierCopiesTheSecrets(t *testing.T) {
	s := append([]byte(nil), secret...)
	p := append([]byte(nil), prevSecret...)
	v, err := identity.NewVerifier(identity.Config{Secret: s, Previous: p, Issuer: testIssuer, Audience: testAudience,
		Now: func() time.Time { return t0 }})
	require.NoError(t, err)
	for i := range s {
		s[i], p[i] = 'x', 'x' // a caller reusing its buffers (or zeroing them)
	}
	_, err = v.Verify("Bearer " + hs256(t, claims()))
	assert.NoError(t, err, "the verifier must keep its own copy of Secret; refused: %q", identity.ReasonOf(err))
	c, err := v.Verify("Bearer " + sign(t, jwt.SigningMethodHS256, prevSecret, claims()))
	assert.NoError(t, err, "the verifier must keep its own copy of Previous; refused: %q", identity.ReasonOf(err))
	assert.True(t, c.SignedWithPrevious)
}

// rawHeaderSigned signs a header and a payload written by hand with the
// real secret.
func rawHeaderSigned(header, payload string) string {
	in := base64.RawURLEncoding.EncodeToString([]byte(header)) + "." + base64.RawURLEncoding.EncodeToString([]byte(payload))
	return in + "." + base64.RawURLEncoding.EncodeToString(hmacSHA256(secret)(in))
}

func TestVerifyRefusesClaimNamesThatFoldIntoOnesItReads(t *testing.T) {
	// encoding/json matches keys case-insensitively (Unicode folding) and
	// keeps the last: without this rule the first one is served as "other".
	for _, tc := range []struct{ name, extra string }{
		{"TENANT after tenant: served as the other tenant", `,"TENANT":"other"`},
		{"Tier after tier: a better tier", `,"Tier":"enterprise"`},
		{"EXP of 1e30: the overflow the duplicate guard stops", `,"EXP":1e30`},
		{"Exp far in the future", `,"Exp":253402300799`},
		{"IAT", `,"IAT":1`},
		{"NBF", `,"NBF":0`},
		{"ISS naming another issuer", `,"ISS":"https://evil.test"`},
		{"AUD", `,"AUD":"billing"`},
		{"SUB", `,"SUB":"root"`},
		{"JTI", `,"JTI":"x"`},
		{"iſs with a long s (U+017F folds to s)", `,"iſs":"https://evil.test"`},
		{"the key escaped: TEN\\u0041NT", `,"TEN\u0041NT":"other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := "Bearer " + rawSigned(payload(tc.extra))
			got, err := newVerifier(t).Verify(h)
			requireRefusal(t, h, got, err, identity.ErrInvalid, identity.ReasonClaimCase)
		})
	}
	t.Run("TENANT alone, without tenant, is refused too", func(t *testing.T) {
		h := "Bearer " + rawSigned(strings.Replace(payload(""), `"tenant":`, `"TENANT":`, 1))
		got, err := newVerifier(t).Verify(h)
		requireRefusal(t, h, got, err, identity.ErrInvalid, identity.ReasonClaimCase)
	})
	t.Run("the same claim twice, same case, is still a duplicate", func(t *testing.T) {
		h := "Bearer " + rawSigned(payload(`,"tenant":"other"`))
		got, err := newVerifier(t).Verify(h)
		requireRefusal(t, h, got, err, identity.ErrInvalid, identity.ReasonDuplicateClaim)
	})
}

func TestVerifyRefusesHeaderParametersNamedTwiceOrInAnotherCase(t *testing.T) {
	for _, tc := range []struct {
		name, header string
		reason       identity.Reason
	}{
		{"alg twice, none first", `{"alg":"none","alg":"HS256"}`, identity.ReasonDuplicateParam},
		{"typ twice", `{"alg":"HS256","typ":"JWT","typ":"JOSE"}`, identity.ReasonDuplicateParam},
		{"an unregistered parameter twice", `{"alg":"HS256","x":1,"x":2}`, identity.ReasonDuplicateParam},
		{"ALG none beside alg", `{"alg":"HS256","ALG":"none"}`, identity.ReasonParamCase},
		{"Crit: a crit a folding reader would honour", `{"alg":"HS256","Crit":["b64"],"b64":false}`, identity.ReasonParamCase},
		{"KID", `{"alg":"HS256","KID":"../../etc/passwd"}`, identity.ReasonParamCase},
		{"B64", `{"alg":"HS256","B64":false}`, identity.ReasonParamCase},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := "Bearer " + rawHeaderSigned(tc.header, payload(""))
			got, err := newVerifier(t).Verify(h)
			requireRefusal(t, h, got, err, identity.ErrInvalid, tc.reason)
		})
	}
	t.Run("registered parameters in their own case pass", func(t *testing.T) {
		_, err := newVerifier(t).Verify("Bearer " + rawHeaderSigned(`{"alg":"HS256","typ":"JWT","kid":"k1","cty":"x"}`, payload("")))
		require.NoError(t, err, "refused: %q", identity.ReasonOf(err))
	})
}

func TestVerifyBoundsATokensLifetime(t *testing.T) {
	day := int64(24 * 3600)
	for _, tc := range []struct {
		name   string
		claims jwt.MapClaims
		config []func(*identity.Config)
		reason identity.Reason // "" = accepted
	}{
		{name: "no iat: the lifetime is unknown", claims: claims(del("iat")), reason: identity.ReasonMissingIssuedAt},
		{name: "exp in year 9999", claims: claims(set("exp", int64(253402300799))), reason: identity.ReasonLifetimeTooLong},
		{name: "iat a day ahead", claims: claims(set("iat", t0.Unix()+day), set("exp", t0.Unix()+day+3600)), reason: identity.ReasonIssuedInFuture},
		{name: "iat 31 s ahead, past the 30 s leeway", claims: claims(set("iat", t0.Unix()+31)), reason: identity.ReasonIssuedInFuture},
		{name: "iat 30 s ahead is inside the leeway", claims: claims(set("iat", t0.Unix()+30))},
		{name: "exp − iat of exactly 24 h", claims: claims(set("exp", t0.Unix()+day))},
		{name: "exp − iat of 24 h and a second", claims: claims(set("exp", t0.Unix()+day+1)), reason: identity.ReasonLifetimeTooLong},
		{name: "an old iat stretches nothing: issued two days ago, valid another hour", claims: claims(set("iat", t0.Unix()-2*day)), reason: identity.ReasonLifetimeTooLong},
		{name: "no iat and expired is invalid, not expired", claims: claims(del("iat"), set("exp", t0.Unix()-3600)), reason: identity.ReasonMissingIssuedAt},
		{name: "a week-long token under a configured 7-day cap", claims: claims(set("exp", t0.Unix()+7*day)),
			config: []func(*identity.Config){func(c *identity.Config) { c.MaxLifetime = 7 * 24 * time.Hour }}},
		{name: "an hour-long token over a configured 30-minute cap", claims: claims(),
			config: []func(*identity.Config){func(c *identity.Config) { c.MaxLifetime = 30 * time.Minute }}, reason: identity.ReasonLifetimeTooLong},
		{name: "iat 6 s ahead over a configured 5 s leeway", claims: claims(set("iat", t0.Unix()+6)),
			config: []func(*identity.Config){func(c *identity.Config) { c.Leeway = 5 * time.Second }}, reason: identity.ReasonIssuedInFuture},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := "Bearer " + hs256(t, tc.claims)
			got, err := newVerifier(t, tc.config...).Verify(h)
			if tc.reason == "" {
				require.NoError(t, err, "want the token accepted; refused because %q", identity.ReasonOf(err))
				return
			}
			requireRefusal(t, h, got, err, identity.ErrInvalid, tc.reason)
		})
	}
}

func TestVerifyValuesRefusesARepeatedAuthorizationHeader(t *testing.T) {
	v := newVerifier(t)
	good := "Bearer " + hs256(t, claims())
	other := "Bearer " + hs256(t, claims(set("tenant", "victim")))

	c, err := v.VerifyValues([]string{good})
	require.NoError(t, err, "one header is Verify's: refused %q", identity.ReasonOf(err))
	assert.Equal(t, "acme", c.Tenant)

	got, err := v.VerifyValues(nil)
	requireRefusal(t, "", got, err, identity.ErrMissing, identity.ReasonNoHeader)

	for _, tc := range []struct {
		name   string
		values []string
	}{
		{"two tokens of two tenants", []string{good, other}},
		{"the same token twice", []string{good, good}},
		{"a token and an empty header", []string{good, ""}},
		{"an empty header first", []string{"", good}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.VerifyValues(tc.values)
			requireRefusal(t, strings.Join(tc.values, ","), got, err, identity.ErrInvalid, identity.ReasonRepeatedHeader)
		})
	}
}
