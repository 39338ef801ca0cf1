// Command secure_app is the reference deployment: everything production_app
// does, plus verified tenant identity, tier policy and limits every replica
// shares.
//
//   - Identity: "Authorization: Bearer <JWT>" (once), HS256 only,
//     exp/nbf/iat/iss/aud checked, a lifetime of at most -jwt-max-lifetime;
//     the tenant and its tier come from the token's claims, never from a
//     header a caller can set (package identity). A generated secret only:
//     a typed one, or one this repository publishes, is refused unless -dev.
//   - Tier policy: rate, burst, in-flight cap, prompt size, allowed models,
//     request timeout and a token quota per tier, from a JSON or YAML file
//     checked at start (package policy).
//   - Shared limits on Redis: lab 07's token bucket per tenant, a token quota
//     reserved before the call and settled with the usage after it, and an
//     in-flight lease per tenant (package quota) — one quota for N replicas.
//   - Egress: upstreams come from flags only, redirects are refused, and every
//     dial is checked after DNS against loopback, private and metadata
//     addresses unless the upstream is marked local=true (package egress).
//   - /metrics on its own listener (-admin-addr).
//
// Run it with `make run-secure`, or:
//
//	JWT_SECRET=$(openssl rand -hex 32) REDIS_URL=redis://127.0.0.1:6379/0 go run ./solutions/secure_app
//	go run ./solutions/secure_app token --tenant acme --tier pro --ttl 1h   # a dev token, alone on stdout
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}
