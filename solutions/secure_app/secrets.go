package main

import (
	"crypto/subtle"
	"fmt"

	"github.com/production-go/gateway-lab/gateway/identity"
)

// publishedSecrets are the JWT secrets this repository publishes for local
// use: anyone who has read it can mint any tenant's tokens with them, so
// secure_app refuses them unless -dev says this is a try-out.
// TestPublishedSecretsAreAllListed finds every JWT_SECRET=… in the
// repository and fails if one is missing here.
var publishedSecrets = []string{
	"dev-only-not-a-secret-gateway-lab-compose-stack", // stack/env/gateway.env: the compose stack's replicas
}

// newVerifier reads the JWT secrets from the environment (identity refuses
// short and typed ones) and refuses the repository's published ones
// unless s.dev.
func newVerifier(s settings, getenv func(string) string, readFile func(string) ([]byte, error)) (*identity.Verifier, error) {
	current, previous, err := identity.SecretsFromEnv(getenv, readFile)
	if err != nil {
		return nil, err
	}
	if !s.dev {
		for _, sec := range [][]byte{current, previous} {
			if published(sec) {
				return nil, fmt.Errorf("%w: the JWT secret (%s, %s or a previous one) is one this repository publishes: anyone can mint any tenant's tokens with it. "+
					"Generate one with `openssl rand -hex 32`, or pass -dev (GATEWAY_DEV=true) for a local try-out",
					identity.ErrConfig, identity.EnvSecret, identity.EnvSecretFile)
			}
		}
	}
	return identity.NewVerifier(identity.Config{Secret: current, Previous: previous, Issuer: s.issuer, Audience: s.audience,
		MaxLifetime: s.maxLifetime})
}

func published(secret []byte) bool {
	for _, p := range publishedSecrets {
		if subtle.ConstantTimeCompare(secret, []byte(p)) == 1 {
			return true
		}
	}
	return false
}
