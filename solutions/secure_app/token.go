package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/gateway/policy"
)

// mintToken is `secure_app token`: a dev token signed with JWT_SECRET,
// alone on stdout so that $(secure_app token …) works.
func mintToken(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("secure_app token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	tenant := fs.String("tenant", "", "the tenant the token speaks for (required)")
	tier := fs.String("tier", "free", "the tenant's tier: a name in the tier policy")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid, at most --jwt-max-lifetime")
	issuer := fs.String("jwt-issuer", defaultIssuer, "the token's \"iss\"")
	audience := fs.String("jwt-audience", defaultAudience, "the token's \"aud\"")
	maxLifetime := fs.Duration("jwt-max-lifetime", identity.DefaultMaxLifetime, "the gateway's -jwt-max-lifetime: the longest --ttl it accepts")
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
	if *ttl > *maxLifetime {
		fmt.Fprintf(stderr, "secure_app token: --ttl %v is over the %v a token may live: the gateway refuses it (-jwt-max-lifetime). Mint a shorter one, and a new one when it expires.\n",
			*ttl, *maxLifetime)
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
	tok, err := identity.Mint(secret, *issuer, *audience, *tenant, *tier, *ttl, time.Now(), identity.WithMaxLifetime(*maxLifetime))
	if err != nil {
		return fail(stderr, 2, err)
	}
	fmt.Fprintln(stdout, tok)
	return 0
}

// tryLines are the startup lines that show how to call this server: mint a
// token, then curl with it. They work as written in a new shell at the
// repository's root: the token command reads the secret from the file this
// server read it from (JWT_SECRET_FILE, made absolute) and is told the
// issuer, audience and tiers this server checks; the curl runs only if the
// token command succeeded, so an error never lands in the Authorization
// header. A secret from JWT_SECRET is never printed, so then the first line
// says the shell needs it.
func tryLines(s settings, pol *policy.Policy, getenv func(string) string) string {
	tier := "pro"
	if _, ok := pol.Tier(tier); !ok {
		tier = pol.Names()[0]
	}
	ttl := time.Hour
	if s.maxLifetime > 0 && s.maxLifetime < ttl {
		ttl = s.maxLifetime
	}
	cmd := []string{"go", "run", "./solutions/secure_app", "token", "--tenant", "demo", "--tier", shellQuote(tier), "--ttl", shortDuration(ttl)}
	if s.issuer != defaultIssuer {
		cmd = append(cmd, "--jwt-issuer", shellQuote(s.issuer))
	}
	if s.audience != defaultAudience {
		cmd = append(cmd, "--jwt-audience", shellQuote(s.audience))
	}
	if s.tiersFile != "" {
		cmd = append(cmd, "--tiers", shellQuote(absolute(s.tiersFile)))
	}
	var b strings.Builder
	b.WriteString("try:  ")
	if f := getenv(identity.EnvSecretFile); f != "" {
		cmd = append([]string{identity.EnvSecretFile + "=" + shellQuote(absolute(f))}, cmd...)
	} else {
		b.WriteString("export JWT_SECRET=…   # this server's secret: the token command signs with it\n      ")
	}
	fmt.Fprintf(&b, "TOKEN=$(%s) && \\\n", strings.Join(cmd, " "))
	b.WriteString(`      curl -s http://{addr}/v1/chat/completions -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \` + "\n")
	b.WriteString(`        -d '{"model":"auto","messages":[{"role":"user","content":"hello"}]}'` + "\n")
	return b.String()
}

// shortDuration is d as a person writes it: 1h, not 1h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func absolute(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:@%+=,-]+$`)

// shellQuote makes s one word for a POSIX shell.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
