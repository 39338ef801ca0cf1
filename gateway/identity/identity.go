// Package identity turns an HTTP Authorization header into a verified tenant
// identity, or into a refusal that says why without saying it to the caller.
//
// # The model
//
// A gateway that trusts an X-Tenant-ID header lets any caller spend any
// tenant's quota. Here a caller proves who it is with a JSON Web Token (RFC
// 7519) that the operator signed with a shared secret (HMAC-SHA256). The
// token carries the tenant and its tier; the gateway checks the signature and
// the claims and then believes them. Nothing else in the request decides who
// the caller is.
//
// The verifier trusts as little of the token as it can:
//
//   - The algorithm is pinned to HS256. The token's own "alg" header is read
//     only to refuse it: "none", the public-key families (RS*, ES*, PS*,
//     EdDSA) and the other HMAC widths are all refused, so neither an unsigned
//     token nor a key-confusion token (an RSA public key used as an HMAC
//     secret) gets through.
//   - "exp" is required, and "exp" and "nbf" are checked against Config.Now
//     with a small leeway for clock skew between the minter and the gateway.
//   - "iat" is required too, may not lie beyond the leeway in the future, and
//     "exp" − "iat" may not exceed Config.MaxLifetime (24 h by default): a
//     token accepted now is dead by now + leeway + MaxLifetime, whatever "exp"
//     it claims, so a leaked token is not a key for a century.
//   - "iss" and "aud" are required and must name this deployment, so a token
//     minted for another service with the same secret is refused.
//   - "tenant" and "tier" are required, non-empty, at most 64 bytes of visible
//     ASCII (0x21–0x7E): they end up in Redis keys, log lines and metric
//     labels, where spaces, control bytes and unbounded length do harm.
//   - The Authorization header is capped at 8 KiB before anything decodes it,
//     and a request that carries it twice is refused (VerifyValues).
//   - Before the library decodes anything, the header and the payload are
//     read as raw JSON and refused when a name appears twice, or when a key
//     equals a name the verifier reads under Unicode case folding without
//     matching it exactly ("TENANT", "Exp", "iſs"): encoding/json, which
//     decodes the claims, matches keys case-insensitively and keeps the last,
//     so {"tenant":"victim","TENANT":"other"} would be served as "other"
//     while every other reader of the token sees "victim".
//
// Secret rotation: Config.Previous is a second secret accepted alongside
// Config.Secret. Deploy the new secret as Secret and the old one as Previous,
// wait until every token signed with the old one has expired, then drop
// Previous. Claims.SignedWithPrevious tells how many callers still hold old
// tokens.
//
// # Errors
//
// Every refusal matches errors.Is(err, ErrUnauthorized) and exactly one of
// ErrMissing (no bearer token at all), ErrExpired (a genuine token past its
// exp) or ErrInvalid (everything else). Those three, and so err.Error(), are
// all a caller should ever learn: telling an attacker which check failed
// helps the attacker. The precise cause, for server-side logs and metrics, is
// ReasonOf(err), one of a closed set of Reason* constants. No error text and no
// reason ever contains the token or a secret.
package identity

import (
	"errors"
)

// ErrUnauthorized matches every refusal from Verify.
var ErrUnauthorized = errors.New("unauthorized")

// The three refusal kinds; each matches ErrUnauthorized too. Their texts are
// safe to show a caller.
var (
	// ErrMissing: the request carries no bearer token (no header, an empty
	// one, "Bearer" alone, or another scheme such as Basic).
	ErrMissing error = &kind{"missing bearer token"}
	// ErrExpired: a correctly signed token for this deployment whose exp has
	// passed (beyond the leeway). The caller should get a fresh token.
	ErrExpired error = &kind{"expired token"}
	// ErrInvalid: every other refusal. Retrying with the same token is futile.
	ErrInvalid error = &kind{"invalid token"}
)

// ErrConfig is returned by NewVerifier, Mint and SecretsFromEnv for a
// configuration that must not be used; the message says which setting and why
// and never quotes a secret.
var ErrConfig = errors.New("identity: bad configuration")

type kind struct{ text string }

func (k *kind) Error() string { return k.text }
func (k *kind) Unwrap() error { return ErrUnauthorized }

// Reason is the precise cause of a refusal, for server-side logs and
// metrics; never for the caller.
type Reason string

// The reasons ReasonOf reports. The set is closed, so a reason is safe as a
// metric label.
const (
	ReasonNoHeader        Reason = "no authorization header"
	ReasonEmptyToken      Reason = "empty bearer token"
	ReasonNotBearer       Reason = "scheme not bearer"
	ReasonHeaderTooLong   Reason = "authorization header too long"
	ReasonMalformed       Reason = "malformed token"
	ReasonAlgNone         Reason = "alg none"
	ReasonAlgMissing      Reason = "alg missing"
	ReasonAlgNotAllowed   Reason = "alg not allowed"
	ReasonSignature       Reason = "signature invalid"
	ReasonCrit            Reason = "unsupported crit header"
	ReasonMissingIssuer   Reason = "missing issuer"
	ReasonWrongIssuer     Reason = "wrong issuer"
	ReasonMissingAudience Reason = "missing audience"
	ReasonWrongAudience   Reason = "wrong audience"
	ReasonMissingExp      Reason = "missing exp"
	ReasonMissingTenant   Reason = "missing tenant"
	ReasonTenantTooLong   Reason = "tenant too long"
	ReasonTenantChars     Reason = "tenant not visible ASCII"
	ReasonMissingTier     Reason = "missing tier"
	ReasonTierTooLong     Reason = "tier too long"
	ReasonTierChars       Reason = "tier not visible ASCII"
	ReasonExpired         Reason = "expired"
	ReasonNotYetValid     Reason = "not yet valid"
	ReasonUnverifiable    Reason = "unverifiable"
	ReasonDuplicateClaim  Reason = "duplicate claim"
	ReasonClaimType       Reason = "time claim not a number in range"
	// ReasonClaimCase: a claim key that folds to one the verifier reads
	// ("TENANT", "Exp") without being it.
	ReasonClaimCase Reason = "claim name in another case"
	// ReasonDuplicateParam: a JOSE header parameter named twice.
	ReasonDuplicateParam Reason = "duplicate header parameter"
	// ReasonParamCase: a JOSE header key that folds to a registered
	// parameter name ("ALG", "Crit") without being it.
	ReasonParamCase Reason = "header parameter in another case"
	// ReasonMissingIssuedAt: no "iat", so the token's lifetime is unknown.
	ReasonMissingIssuedAt Reason = "missing iat"
	// ReasonIssuedInFuture: "iat" later than now plus the leeway.
	ReasonIssuedInFuture Reason = "iat in the future"
	// ReasonLifetimeTooLong: "exp" − "iat" over Config.MaxLifetime.
	ReasonLifetimeTooLong Reason = "lifetime too long"
	// ReasonRepeatedHeader: the request carries the Authorization header
	// more than once; which one to believe is not ours to guess.
	ReasonRepeatedHeader Reason = "authorization header repeated"
	// ReasonNotARefusal: the error did not come from Verify.
	ReasonNotARefusal Reason = "not a refusal"
)

// refusal is the error Verify returns: the public kind, and the reason for
// the logs. Error() is the kind's text only, so printing the error to a
// caller reveals nothing more than the kind.
type refusal struct {
	kind   error
	reason Reason
}

func (r *refusal) Error() string { return r.kind.Error() }
func (r *refusal) Unwrap() error { return r.kind }

func refuse(kind error, reason Reason) error { return &refusal{kind: kind, reason: reason} }

// ReasonOf returns the precise cause of a refusal from Verify, one of the
// Reason* constants, for server-side logs and metrics. It returns "" for nil
// and ReasonNotARefusal for an error that did not come from Verify.
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	return ReasonNotARefusal
}

// MaxHeaderBytes caps the Authorization header Verify will look at; a longer
// one is refused before any decoding.
const MaxHeaderBytes = 8 << 10

// MaxNameBytes caps the tenant and tier claims.
const MaxNameBytes = 64

// MinSecretBytes is the shortest HMAC secret accepted: 256 bits, the output
// size of SHA-256 (RFC 7518 §3.2 requires a key at least that long for HS256).
const MinSecretBytes = 32
