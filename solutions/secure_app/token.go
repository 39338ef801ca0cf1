package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/production-go/gateway-lab/solutions/identity"
)

// mintToken is `secure_app token`: a dev token signed with JWT_SECRET,
// alone on stdout so that $(secure_app token …) works.
func mintToken(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("secure_app token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "the tenant the token speaks for (required)")
	tier := fs.String("tier", "free", "the tenant's tier: a name in the tier policy")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid")
	issuer := fs.String("jwt-issuer", "gateway-lab", "the token's \"iss\"")
	audience := fs.String("jwt-audience", "gateway-lab-api", "the token's \"aud\"")
	tiers := fs.String("tiers", "", "the tier policy `file` the tier must be in (default: the built-in one)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: secure_app token --tenant NAME [--tier free|pro|enterprise] [--ttl 1h]\n\nPrints a dev token signed with JWT_SECRET (or JWT_SECRET_FILE), alone on stdout.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *tenant == "" {
		fmt.Fprintln(stderr, "secure_app token: --tenant is required")
		return 2
	}
	secret, _, err := identity.SecretsFromEnv(os.Getenv, os.ReadFile)
	if err != nil {
		return fail(stderr, 2, err)
	}
	pol, err := loadPolicy(*tiers)
	if err != nil {
		return fail(stderr, 2, err)
	}
	if _, ok := pol.Tier(*tier); !ok {
		fmt.Fprintf(stderr, "secure_app token: tier %q is not in the policy (have %v)\n", *tier, pol.Names())
		return 2
	}
	tok, err := identity.Mint(secret, *issuer, *audience, *tenant, *tier, *ttl, time.Now())
	if err != nil {
		return fail(stderr, 2, err)
	}
	fmt.Fprintln(stdout, tok)
	return 0
}
