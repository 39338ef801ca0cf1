package identity

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tidwall/gjson"
)

// DefaultLeeway is the clock skew allowed on exp and nbf when Config.Leeway
// is zero.
const DefaultLeeway = 30 * time.Second

// MaxLeeway is the largest Config.Leeway accepted: past a few minutes a
// leeway is no longer skew, it is a longer token lifetime nobody chose.
const MaxLeeway = 5 * time.Minute

// DefaultMaxLifetime is the longest "exp" − "iat" accepted when
// Config.MaxLifetime is zero, and the longest ttl Mint signs by default: a
// working day and then some, so a leaked token is worth a day at most.
const DefaultMaxLifetime = 24 * time.Hour

// Config configures a Verifier.
type Config struct {
	// Secret is the current HS256 secret, at least MinSecretBytes long.
	Secret []byte
	// Previous, when set, is the secret being rotated out: tokens signed
	// with it are accepted too. Same length rule as Secret.
	Previous []byte
	// Issuer is the required "iss" claim (exact match).
	Issuer string
	// Audience is the required "aud" claim (one of the token's audiences).
	Audience string
	// Leeway is the clock skew allowed on exp, nbf and iat: 0 means
	// DefaultLeeway; negative or above MaxLeeway is refused.
	Leeway time.Duration
	// MaxLifetime caps "exp" − "iat": 0 means DefaultMaxLifetime; negative
	// or under a second (JWT times are whole seconds) is refused.
	MaxLifetime time.Duration
	// Now is the clock; nil means time.Now. Tests pass a fake one.
	Now func() time.Time
}

// Claims is what a verified token says about its caller. Times are in UTC.
type Claims struct {
	Tenant    string    // the "tenant" claim: whose quota this request spends
	Tier      string    // the "tier" claim: which policy applies
	Subject   string    // the "sub" claim, "" when absent
	IssuedAt  time.Time // the "iat" claim
	ExpiresAt time.Time // the "exp" claim
	// SignedWithPrevious is true when the token verified only with
	// Config.Previous: the caller still holds a token from before the
	// rotation.
	SignedWithPrevious bool
}

// Verifier checks bearer tokens. It is immutable after NewVerifier and safe
// for concurrent use.
type Verifier struct {
	current, previous []byte
	parser            *jwt.Parser
	now               func() time.Time
	leeway, lifetime  time.Duration
}

// NewVerifier checks cfg and returns a Verifier. It refuses, with an error
// matching ErrConfig that says why, a Secret (or a set Previous) shorter than
// MinSecretBytes, an empty Issuer or Audience, and a bad Leeway or
// MaxLifetime. It checks the secrets' length only: SecretsFromEnv, where a
// secret a person chose comes in, also refuses a weak one (see SecretBits).
func NewVerifier(cfg Config) (*Verifier, error) {
	if err := checkSecret("Secret", cfg.Secret); err != nil {
		return nil, err
	}
	if cfg.Previous != nil {
		if err := checkSecret("Previous", cfg.Previous); err != nil {
			return nil, err
		}
	}
	if cfg.Issuer == "" {
		return nil, fmt.Errorf("%w: Issuer is empty; tokens must name who minted them", ErrConfig)
	}
	if cfg.Audience == "" {
		return nil, fmt.Errorf("%w: Audience is empty; tokens must name this gateway", ErrConfig)
	}
	leeway := cfg.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultLeeway
	case leeway < 0 || leeway > MaxLeeway:
		return nil, fmt.Errorf("%w: Leeway %v is outside (0, %v]", ErrConfig, cfg.Leeway, MaxLeeway)
	}
	lifetime := cfg.MaxLifetime
	switch {
	case lifetime == 0:
		lifetime = DefaultMaxLifetime
	case lifetime < time.Second:
		return nil, fmt.Errorf("%w: MaxLifetime %v is under a second; JWT times are whole seconds", ErrConfig, cfg.MaxLifetime)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	v := &Verifier{
		current:  clone(cfg.Secret),
		parser:   jwt.NewParser(parserOptions(cfg.Issuer, cfg.Audience, leeway, now)...),
		now:      now,
		leeway:   leeway,
		lifetime: lifetime,
	}
	if cfg.Previous != nil {
		v.previous = clone(cfg.Previous)
	}
	return v, nil
}

// parserOptions are the jwt/v5 options Verify parses with: HS256 only, exp
// required, iss and aud checked, exp and nbf checked at now() with the given
// leeway.
func parserOptions(issuer, audience string, leeway time.Duration, now func() time.Time) []jwt.ParserOption {
	return []jwt.ParserOption{
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(),
		jwt.WithIssuer(issuer),
		jwt.WithAudience(audience),
		jwt.WithLeeway(leeway),
		jwt.WithTimeFunc(now),
	}
}

func checkSecret(name string, s []byte) error {
	if len(s) < MinSecretBytes {
		return fmt.Errorf("%w: %s is %d bytes; at least %d are required (generate one with `openssl rand -hex 32`)",
			ErrConfig, name, len(s), MinSecretBytes)
	}
	return nil
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// wireClaims is the token payload as it travels.
type wireClaims struct {
	jwt.RegisteredClaims
	Tenant string `json:"tenant"`
	Tier   string `json:"tier"`
}

// VerifyValues is Verify for every value of a request's Authorization
// header (http.Header.Values): none is ErrMissing, and more than one is
// ErrInvalid (ReasonRepeatedHeader) whatever they hold — a proxy may read the
// first where the gateway would read the last, so which caller this is would
// depend on who reads it.
func (v *Verifier) VerifyValues(values []string) (Claims, error) {
	switch len(values) {
	case 0:
		return v.Verify("")
	case 1:
		return v.Verify(values[0])
	}
	return Claims{}, refuse(ErrInvalid, ReasonRepeatedHeader)
}

// Verify checks the raw value of an Authorization header and returns the
// caller's claims, or a refusal matching ErrUnauthorized (see the package doc).
//
// The header is "Bearer" (any case, RFC 6750 §2.1 and RFC 9110 §11.1: the
// scheme is case-insensitive), one or more spaces, and the token. A missing
// header, "Bearer" without a token and another scheme (RFC 6750 §3.1: no
// bearer credentials were presented) are ErrMissing.
func (v *Verifier) Verify(authorization string) (Claims, error) {
	tok, err := bearerToken(authorization)
	if err != nil {
		return Claims{}, err
	}
	if reason := checkSegments(tok); reason != "" {
		// Before the library reads it: it would take the last of two
		// claims (and fold "TENANT" into "tenant"), and an exp of 1e30
		// overflows into "expired".
		return Claims{}, refuse(ErrInvalid, reason)
	}
	var wc wireClaims
	token, err := v.parser.ParseWithClaims(tok, &wc, v.keys)
	if err != nil {
		return Claims{}, v.classify(token, &wc, err)
	}
	if _, ok := token.Header["crit"]; ok {
		// RFC 7515 §4.1.11: a recipient that does not understand every
		// listed extension must refuse the token; we understand none.
		return Claims{}, refuse(ErrInvalid, ReasonCrit)
	}
	if reason := checkNames(wc.Tenant, wc.Tier); reason != "" {
		return Claims{}, refuse(ErrInvalid, reason)
	}
	if reason := v.checkLifetime(&wc); reason != "" {
		return Claims{}, refuse(ErrInvalid, reason)
	}
	if v.issuedInFuture(&wc) {
		return Claims{}, refuse(ErrInvalid, ReasonIssuedInFuture)
	}
	c := Claims{
		Tenant:    wc.Tenant,
		Tier:      wc.Tier,
		Subject:   wc.Subject,
		IssuedAt:  wc.IssuedAt.UTC(),
		ExpiresAt: wc.ExpiresAt.UTC(),
	}
	if v.previous != nil {
		c.SignedWithPrevious = !signedWith(v.current, tok, token.Signature)
	}
	return c, nil
}

// maxTime is the last second of year 9999: a time claim past it is no time.
const maxTime = 253402300799

// readClaims are the claims Verify decodes (wireClaims: the registered ones
// of RFC 7519 §4.1 and ours). encoding/json fills each from any key equal to
// it under Unicode case folding ("TENANT", "Exp", "iſs" with a long s), the
// last one winning.
var readClaims = []string{"iss", "sub", "aud", "exp", "nbf", "iat", "jti", "tenant", "tier"}

// readParams are the registered JOSE header parameters (RFC 7515 §4.1, and
// "b64" of RFC 7797, which changes what is signed). Header names are case-
// sensitive and jwt/v5 decodes the header into a map, so "ALG" is not "alg"
// here; but a reader that folds (any struct decoded by encoding/json) would
// take it for one, and no honest minter writes it.
var readParams = []string{"alg", "jku", "jwk", "kid", "x5u", "x5c", "x5t", "x5t#S256", "typ", "cty", "crit", "b64"}

// checkSegments holds the signed JSON to what encoding/json lets slide,
// before any library decodes it: in the header, a parameter named twice or
// a registered one in another case; in the payload, a claim named twice (the
// last would win, so what a reader of the token sees is not what the gateway
// believes), a key that folds to a claim the verifier reads without being it
// (encoding/json would read it as that claim), and time claims that are not
// plain numbers of seconds (a string, or 1e30 overflowing into the past).
func checkSegments(tok string) Reason {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "" // malformed: the parser says so
	}
	if r := checkObject(parts[0], readParams, ReasonDuplicateParam, ReasonParamCase, nil); r != "" {
		return r
	}
	return checkObject(parts[1], readClaims, ReasonDuplicateClaim, ReasonClaimCase, func(k string, v gjson.Result) Reason {
		if (k == "exp" || k == "nbf" || k == "iat") && (v.Type != gjson.Number || v.Num < 0 || v.Num > maxTime) {
			return ReasonClaimType
		}
		return ""
	})
}

// checkObject decodes one base64url segment and walks its top-level keys:
// a key seen before is dup, a key that folds to one of names without being
// it is folded, and value (when set) judges each value. A segment that is
// not base64url JSON passes: the parser refuses it with the right reason.
func checkObject(seg string, names []string, dup, folded Reason, value func(string, gjson.Result) Reason) Reason {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil || !json.Valid(raw) { // not gjson's: it recurses once a level of nesting
		return ""
	}
	seen := map[string]bool{}
	var reason Reason
	gjson.ParseBytes(raw).ForEach(func(k, v gjson.Result) bool {
		switch {
		case seen[k.Str]:
			reason = dup
		case foldsToAnother(k.Str, names):
			reason = folded
		case value != nil:
			reason = value(k.Str, v)
		}
		seen[k.Str] = true
		return reason == ""
	})
	return reason
}

// foldsToAnother reports whether k equals one of names under Unicode case
// folding (strings.EqualFold, the folding encoding/json applies) without
// being it.
func foldsToAnother(k string, names []string) bool {
	for _, n := range names {
		if k != n && strings.EqualFold(k, n) {
			return true
		}
	}
	return false
}

// checkLifetime applies the "iat" rules that make a payload not ours
// whatever the time: "iat" present, and "exp" no more than the maximum
// lifetime after it.
func (v *Verifier) checkLifetime(wc *wireClaims) Reason {
	switch {
	case wc.IssuedAt == nil:
		return ReasonMissingIssuedAt
	case wc.ExpiresAt != nil && wc.ExpiresAt.Sub(wc.IssuedAt.Time) > v.lifetime:
		return ReasonLifetimeTooLong
	}
	return ""
}

// issuedInFuture reports an "iat" beyond the leeway ahead of the clock: a
// minter whose clock runs ahead, or a token made to outlive the cap.
func (v *Verifier) issuedInFuture(wc *wireClaims) bool {
	return wc.IssuedAt != nil && wc.IssuedAt.After(v.now().Add(v.leeway))
}

func (v *Verifier) keys(*jwt.Token) (any, error) {
	if v.previous == nil {
		return v.current, nil
	}
	return jwt.VerificationKeySet{Keys: []jwt.VerificationKey{v.current, v.previous}}, nil
}

// signedWith reports whether sig is the HS256 signature of tok's first two
// segments under key.
func signedWith(key []byte, tok string, sig []byte) bool {
	i := strings.LastIndexByte(tok, '.')
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(tok[:i]))
	return hmac.Equal(sig, mac.Sum(nil))
}

// bearerToken extracts the token from an Authorization header value, refusing
// every shape that is not "Bearer" SP+ three base64url segments.
func bearerToken(h string) (string, error) {
	if h == "" {
		return "", refuse(ErrMissing, ReasonNoHeader)
	}
	if len(h) > MaxHeaderBytes {
		return "", refuse(ErrInvalid, ReasonHeaderTooLong)
	}
	scheme, rest, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return "", refuse(ErrMissing, ReasonNotBearer)
	}
	tok := strings.TrimLeft(rest, " ")
	if tok == "" {
		return "", refuse(ErrMissing, ReasonEmptyToken)
	}
	dots := 0
	for i := 0; i < len(tok); i++ {
		switch c := tok[i]; {
		case c == '.':
			dots++
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return "", refuse(ErrInvalid, ReasonMalformed)
		}
	}
	if dots != 2 {
		return "", refuse(ErrInvalid, ReasonMalformed)
	}
	return tok, nil
}

// checkNames applies the tenant and tier rules, returning a reason or "".
func checkNames(tenant, tier string) Reason {
	if r := checkName(tenant, ReasonMissingTenant, ReasonTenantTooLong, ReasonTenantChars); r != "" {
		return r
	}
	return checkName(tier, ReasonMissingTier, ReasonTierTooLong, ReasonTierChars)
}

func checkName(s string, missing, tooLong, chars Reason) Reason {
	switch {
	case s == "":
		return missing
	case len(s) > MaxNameBytes:
		return tooLong
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return chars
		}
	}
	return ""
}

// classify turns a jwt/v5 error into a refusal. The order is the order a
// caller should be told in: a token that is not ours at all (malformed,
// wrong algorithm, bad signature, wrong issuer or audience, missing claims,
// a lifetime over the cap) is invalid even when it has also expired; ErrExpired is kept for a token
// whose only fault is its age.
func (v *Verifier) classify(token *jwt.Token, wc *wireClaims, err error) error {
	if errors.Is(err, jwt.ErrTokenMalformed) || token == nil {
		return refuse(ErrInvalid, ReasonMalformed)
	}
	alg, ok := token.Header["alg"].(string)
	switch {
	case !ok || alg == "":
		return refuse(ErrInvalid, ReasonAlgMissing)
	case strings.EqualFold(alg, "none"):
		return refuse(ErrInvalid, ReasonAlgNone)
	case alg != jwt.SigningMethodHS256.Alg():
		return refuse(ErrInvalid, ReasonAlgNotAllowed)
	}
	if !errors.Is(err, jwt.ErrTokenInvalidClaims) {
		if errors.Is(err, jwt.ErrTokenSignatureInvalid) {
			return refuse(ErrInvalid, ReasonSignature)
		}
		return refuse(ErrInvalid, ReasonUnverifiable)
	}
	// The signature is good; wc holds the decoded payload.
	switch {
	case wc.Issuer == "":
		return refuse(ErrInvalid, ReasonMissingIssuer)
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return refuse(ErrInvalid, ReasonWrongIssuer)
	case len(wc.Audience) == 0 || len(wc.Audience) == 1 && wc.Audience[0] == "":
		return refuse(ErrInvalid, ReasonMissingAudience)
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return refuse(ErrInvalid, ReasonWrongAudience)
	case wc.ExpiresAt == nil:
		return refuse(ErrInvalid, ReasonMissingExp)
	}
	if reason := checkNames(wc.Tenant, wc.Tier); reason != "" {
		return refuse(ErrInvalid, reason)
	}
	if reason := v.checkLifetime(wc); reason != "" {
		return refuse(ErrInvalid, reason)
	}
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return refuse(ErrExpired, ReasonExpired)
	case errors.Is(err, jwt.ErrTokenNotValidYet):
		return refuse(ErrInvalid, ReasonNotYetValid)
	case v.issuedInFuture(wc):
		return refuse(ErrInvalid, ReasonIssuedInFuture)
	}
	return refuse(ErrInvalid, ReasonUnverifiable)
}
