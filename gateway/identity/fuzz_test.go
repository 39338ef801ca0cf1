package identity_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allReasons = []identity.Reason{
	identity.ReasonNoHeader, identity.ReasonEmptyToken, identity.ReasonNotBearer, identity.ReasonHeaderTooLong,
	identity.ReasonMalformed, identity.ReasonAlgNone, identity.ReasonAlgMissing, identity.ReasonAlgNotAllowed,
	identity.ReasonSignature, identity.ReasonCrit, identity.ReasonMissingIssuer, identity.ReasonWrongIssuer,
	identity.ReasonMissingAudience, identity.ReasonWrongAudience, identity.ReasonMissingExp,
	identity.ReasonMissingTenant, identity.ReasonTenantTooLong, identity.ReasonTenantChars,
	identity.ReasonMissingTier, identity.ReasonTierTooLong, identity.ReasonTierChars,
	identity.ReasonExpired, identity.ReasonNotYetValid, identity.ReasonUnverifiable,
	identity.ReasonDuplicateClaim, identity.ReasonClaimType, identity.ReasonClaimCase,
	identity.ReasonDuplicateParam, identity.ReasonParamCase,
	identity.ReasonMissingIssuedAt, identity.ReasonIssuedInFuture, identity.ReasonLifetimeTooLong,
	identity.ReasonRepeatedHeader,
}

// TestFuzzReasonListIsComplete reads the Reason constants out of
// identity.go, so a reason added there and not here fails at once rather
// than as a fuzz crash on the day the fuzzer finds it.
func TestFuzzReasonListIsComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "identity.go", nil, 0)
	require.NoError(t, err)
	var declared []identity.Reason
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Reason" {
				continue
			}
			for _, v := range vs.Values {
				lit := v.(*ast.BasicLit)
				r, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				if identity.Reason(r) != identity.ReasonNotARefusal {
					declared = append(declared, identity.Reason(r))
				}
			}
		}
	}
	assert.ElementsMatch(t, declared, allReasons, "allReasons lists every Reason a refusal can carry")
}

// FuzzVerify feeds Authorization headers to a verifier that knows a current
// and a previous secret, at the fixed instant t0. Verify must never panic; a
// refusal must be one well-formed refusal; and an accepted header must hold a
// token that jwt.Parse, given the rules written out independently here,
// accepts with the same tenant and tier. The committed corpus
// (testdata/fuzz/FuzzVerify) holds valid tokens for t0 and near misses.
func FuzzVerify(f *testing.F) {
	f.Add("Bearer " + hs256(f, claims()))
	f.Add("bearer  " + sign(f, jwt.SigningMethodHS256, prevSecret, claims(set("tier", "free"))))
	f.Add("Bearer " + hs256(f, claims(set("exp", t0.Unix()-30))))
	v := newVerifier(f, withPrevious)
	keys := func(*jwt.Token) (any, error) {
		return jwt.VerificationKeySet{Keys: []jwt.VerificationKey{secret, prevSecret}}, nil
	}
	f.Fuzz(func(t *testing.T, header string) {
		got, err := v.Verify(header)
		if err != nil {
			require.ErrorIs(t, err, identity.ErrUnauthorized)
			n := 0
			for _, k := range kinds {
				if errors.Is(err, k) {
					n++
					require.Equal(t, k.Error(), err.Error(), "the error text is its kind's")
				}
			}
			require.Equal(t, 1, n, "a refusal is exactly one of ErrMissing, ErrExpired, ErrInvalid")
			require.Contains(t, allReasons, identity.ReasonOf(err), "Reason is one of the Reason constants")
			require.Zero(t, got)
			return
		}
		require.LessOrEqual(t, len(header), identity.MaxHeaderBytes)
		scheme, rest, _ := strings.Cut(header, " ")
		require.True(t, strings.EqualFold(scheme, "bearer"), "accepted a header whose scheme is %q", scheme)
		tok := strings.TrimLeft(rest, " ")
		ref, err := jwt.Parse(tok, keys,
			jwt.WithValidMethods([]string{"HS256"}),
			jwt.WithExpirationRequired(),
			jwt.WithIssuer(testIssuer),
			jwt.WithAudience(testAudience),
			jwt.WithLeeway(30*time.Second),
			jwt.WithTimeFunc(func() time.Time { return t0 }))
		require.NoError(t, err, "Verify accepted a token the reference jwt.Parse refuses")
		mc := ref.Claims.(jwt.MapClaims)
		iat, err := mc.GetIssuedAt()
		require.NoError(t, err)
		require.NotNil(t, iat, "accepted a token without iat")
		exp, err := mc.GetExpirationTime()
		require.NoError(t, err)
		require.False(t, iat.After(t0.Add(30*time.Second)), "accepted an iat of %v, past the leeway", iat)
		require.LessOrEqual(t, exp.Sub(iat.Time), identity.DefaultMaxLifetime, "accepted a lifetime over the cap")
		for k := range mc {
			for _, read := range []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti", "tenant", "tier"} {
				require.False(t, k != read && strings.EqualFold(k, read), "accepted %q beside the %q the verifier reads", k, read)
			}
		}
		require.Equal(t, mc["tenant"], got.Tenant)
		require.Equal(t, mc["tier"], got.Tier)
		for _, name := range []string{got.Tenant, got.Tier} {
			require.NotEmpty(t, name)
			require.LessOrEqual(t, len(name), identity.MaxNameBytes)
			require.False(t, slices.ContainsFunc([]byte(name), func(b byte) bool { return b < 0x21 || b > 0x7e }),
				"accepted a name with a byte outside visible ASCII: %q", name)
		}
		require.True(t, t0.Before(got.ExpiresAt.Add(30*time.Second)), "accepted a token that expired at %v", got.ExpiresAt)
	})
}

// TestFuzzCorpusValidSeedsStillVerify keeps the committed corpus honest: the
// seeds named valid* must be accepted, or the fuzz target's accept path
// would start from nothing.
func TestFuzzCorpusValidSeedsStillVerify(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzVerify", "valid*"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "the committed corpus has valid seeds")
	v := newVerifier(t, withPrevious)
	for _, name := range files {
		raw, err := os.ReadFile(name)
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		require.Len(t, lines, 2, "%s: a go test fuzz v1 file with one string", name)
		h, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "string("), ")"))
		require.NoError(t, err, name)
		_, err = v.Verify(h)
		require.NoError(t, err, "%s must verify at t0; refused: %q", name, identity.ReasonOf(err))
	}
}
