package identity

import (
	"fmt"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MintOption adjusts what Mint accepts.
type MintOption func(*mintOptions)

type mintOptions struct{ maxLifetime time.Duration }

// WithMaxLifetime lets Mint sign a ttl up to d instead of
// DefaultMaxLifetime: the MaxLifetime of the verifiers the token is for.
func WithMaxLifetime(d time.Duration) MintOption {
	return func(o *mintOptions) { o.maxLifetime = d }
}

// Mint signs a development token for tenant at tier, valid from now for ttl
// (whole seconds: JWT times have one-second precision, so now is truncated
// to the second and ttl must be at least a second). It applies the rules
// Verify applies — a ttl over the maximum lifetime (DefaultMaxLifetime, or
// WithMaxLifetime's) is refused rather than signed into a token every
// verifier would refuse — so a token Mint returns verifies with the same
// secret, issuer, audience and lifetime cap until it expires. Errors match
// ErrConfig and never quote the secret.
func Mint(secret []byte, issuer, audience, tenant, tier string, ttl time.Duration, now time.Time, opts ...MintOption) (string, error) {
	o := mintOptions{maxLifetime: DefaultMaxLifetime}
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkSecret("the secret", secret); err != nil {
		return "", err
	}
	switch {
	case issuer == "":
		return "", fmt.Errorf("%w: issuer is empty", ErrConfig)
	case audience == "":
		return "", fmt.Errorf("%w: audience is empty", ErrConfig)
	case ttl < time.Second:
		return "", fmt.Errorf("%w: ttl %v is under a second", ErrConfig, ttl)
	case ttl > o.maxLifetime:
		return "", fmt.Errorf("%w: ttl %v is over the %v a token may live (the verifier's MaxLifetime); mint a shorter one", ErrConfig, ttl, o.maxLifetime)
	}
	if r := checkNames(tenant, tier); r != "" {
		return "", fmt.Errorf("%w: %s (at most %d bytes of visible ASCII)", ErrConfig, r, MaxNameBytes)
	}
	start := now.Truncate(time.Second)
	claims := wireClaims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    issuer,
			Audience:  jwt.ClaimStrings{audience},
			IssuedAt:  jwt.NewNumericDate(start),
			NotBefore: jwt.NewNumericDate(start),
			ExpiresAt: jwt.NewNumericDate(start.Add(ttl)),
		},
		Tenant: tenant,
		Tier:   tier,
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
	if err != nil {
		return "", fmt.Errorf("identity: signing: %w", err)
	}
	return tok, nil
}
