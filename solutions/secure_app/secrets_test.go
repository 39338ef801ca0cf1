package main

import (
	"bufio"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return root
}

// composeSecret is the JWT secret stack/env/gateway.env publishes.
func composeSecret(t *testing.T) string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "stack", "env", "gateway.env"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), identity.EnvSecret+"="); ok {
			return v
		}
	}
	require.NoError(t, sc.Err())
	t.Fatal("stack/env/gateway.env sets no JWT_SECRET")
	return ""
}

func TestRefusesToStartWithAWeakOrPublishedSecret(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret func(t *testing.T) string
		want   string
	}{
		{name: "32 times a", secret: func(*testing.T) string { return strings.Repeat("a", 32) }, want: "at least 128 are required"},
		{name: "a word repeated", secret: func(*testing.T) string { return strings.Repeat("gateway!", 5) }, want: "at least 128 are required"},
		{name: "the compose stack's published dev secret", secret: composeSecret, want: "one this repository publishes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sec := tc.secret(t)
			t.Setenv(identity.EnvSecret, sec)
			var out, errOut testkit.LogBuffer
			assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", "redis://127.0.0.1:1"}, &out, &errOut, nil), "the start is refused")
			assert.Contains(t, errOut.String(), tc.want)
			assert.Contains(t, errOut.String(), "openssl rand -hex 32", "the refusal says what to do")
			assert.NotContains(t, errOut.String()+out.String(), sec, "and never prints the secret")
		})
	}
	t.Run("the published secret as the previous one", func(t *testing.T) {
		t.Setenv(identity.EnvSecret, secret)
		t.Setenv(identity.EnvSecretPrevious, composeSecret(t))
		var out, errOut testkit.LogBuffer
		assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", "redis://127.0.0.1:1"}, &out, &errOut, nil))
		assert.Contains(t, errOut.String(), "one this repository publishes")
	})
}

func TestDevFlagAcceptsThePublishedSecretAndSaysSoLoudly(t *testing.T) {
	dev := composeSecret(t)
	for _, tc := range []struct {
		name string
		args []string
		env  string
	}{
		{name: "-dev", args: []string{"-dev"}},
		{name: "GATEWAY_DEV=true, as the compose stack sets it", env: "true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(identity.EnvSecret, dev)
			if tc.env != "" {
				t.Setenv("GATEWAY_DEV", tc.env)
			}
			in := start(t, prefix(t), tc.args...)
			tok, err := identity.Mint([]byte(dev), defaultIssuer, defaultAudience, "acme", "pro", time.Hour, time.Now())
			require.NoError(t, err)
			code, _, body := call(t, in.url, tok, hello)
			assert.Equal(t, http.StatusOK, code, body)
			assert.Contains(t, in.stdout.String(), "WARNING: -dev", "the startup lines announce development mode")
			assert.Regexp(t, `"level":"WARN","msg":"DEVELOPMENT MODE`, in.stderr.String(), "and the log says it at WARN")
			assert.NotContains(t, in.stdout.String()+in.stderr.String(), dev, "never the secret")
		})
	}
}

func TestWithoutTheDevFlagTheStartupLinesSayNothingOfIt(t *testing.T) {
	in := start(t, prefix(t))
	assert.NotContains(t, in.stdout.String(), "-dev")
	assert.NotContains(t, in.stderr.String(), "DEVELOPMENT MODE")
}

// TestPublishedSecretsAreAllListed finds every JWT secret the repository
// writes down (JWT_SECRET=…, JWT_SECRET_PREVIOUS=… with a literal value) and
// requires each one to be refused without -dev.
func TestPublishedSecretsAreAllListed(t *testing.T) {
	root := repoRoot(t)
	assign := regexp.MustCompile(`JWT_SECRET(?:_PREVIOUS)?\s*[=:]\s*["']?([A-Za-z0-9][^\s"'$…)` + "`" + `]{7,})`)
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "node_modules" || name == "grade-report") {
				return filepath.SkipDir
			}
			return nil
		}
		if info, err := d.Info(); err != nil || info.Size() > 1<<20 || strings.HasSuffix(name, "secrets_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range assign.FindAllStringSubmatch(string(b), -1) {
			found++
			rel, _ := filepath.Rel(root, path)
			assert.True(t, published([]byte(m[1])), "%s publishes the JWT secret %q, which publishedSecrets (secrets.go) does not list", rel, m[1])
		}
		return nil
	})
	require.NoError(t, err)
	assert.Positive(t, found, "the compose stack's env file at least")
}

func TestTokenCommandRefusesATTLOverTheMaxLifetime(t *testing.T) {
	t.Setenv(identity.EnvSecret, secret)
	var out, errOut testkit.LogBuffer
	assert.Equal(t, 2, run(t.Context(), []string{"token", "--tenant", "acme", "--ttl", "876000h"}, &out, &errOut, nil))
	assert.Empty(t, out.String(), "no token")
	assert.Contains(t, errOut.String(), "--ttl 876000h0m0s is over the 24h0m0s a token may live")

	out, errOut = testkit.LogBuffer{}, testkit.LogBuffer{}
	require.Equal(t, 0, run(t.Context(), []string{"token", "--tenant", "acme", "--ttl", "48h", "--jwt-max-lifetime", "48h"}, &out, &errOut, nil),
		"a gateway run with -jwt-max-lifetime 48h takes a 48 h token: %s", errOut.String())
	v, err := identity.NewVerifier(identity.Config{Secret: []byte(secret), Issuer: defaultIssuer, Audience: defaultAudience, MaxLifetime: 48 * time.Hour})
	require.NoError(t, err)
	c, err := v.Verify("Bearer " + strings.TrimSpace(out.String()))
	require.NoError(t, err, "refused: %q", identity.ReasonOf(err))
	assert.Equal(t, 48*time.Hour, c.ExpiresAt.Sub(c.IssuedAt))
}

func TestServerHoldsTokensToItsMaxLifetime(t *testing.T) {
	in := start(t, prefix(t), "-jwt-max-lifetime", "1h")
	hour := token(t, "acme", "pro", time.Hour)
	code, _, body := call(t, in.url, hour, hello)
	require.Equal(t, http.StatusOK, code, body)

	long, err := identity.Mint([]byte(secret), defaultIssuer, defaultAudience, "acme", "pro", 2*time.Hour, time.Now(), identity.WithMaxLifetime(2*time.Hour))
	require.NoError(t, err)
	code, _, body = call(t, in.url, long, hello)
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.Equal(t, "invalid_token", errorCode(t, body))
	assert.Contains(t, in.stderr.String(), `"reason":"lifetime too long"`)
}

func TestTwoAuthorizationHeadersAreRefused(t *testing.T) {
	in := start(t, prefix(t))
	req, err := http.NewRequest(http.MethodPost, in.url+"/v1/chat/completions", strings.NewReader(hello))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add("Authorization", "Bearer "+token(t, "acme", "pro", time.Hour))
	req.Header.Add("Authorization", "Bearer "+token(t, "victim", "enterprise", time.Hour))
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, in.stderr.String(), `"reason":"authorization header repeated"`)
}

// hint is the token command and the curl the startup lines print.
var hint = regexp.MustCompile(`(?m)^try:  TOKEN=\$\(((?:[A-Z_]+=\S+ )*)go run \./solutions/secure_app (token [^)]*)\) && \\$`)

// TestStartupHintWorksInANewShell runs the startup lines' token command the
// way a new shell would: with nothing in the environment but what the line
// itself sets, then calls the server with the token.
func TestStartupHintWorksInANewShell(t *testing.T) {
	file := filepath.Join(t.TempDir(), "jwt-secret")
	require.NoError(t, os.WriteFile(file, []byte(secret+"\n"), 0o600))
	t.Setenv(identity.EnvSecret, "")
	t.Setenv(identity.EnvSecretFile, file)
	in := start(t, prefix(t))
	startupLines(t, in)
	m := hint.FindStringSubmatch(in.stdout.String())
	require.NotNil(t, m, "the startup lines mint a token with what a new shell needs, and curl only if that worked:\n%s", in.stdout)
	assert.Equal(t, identity.EnvSecretFile+"="+file+" ", m[1], "the token command is pointed at this server's secret file")
	assert.Contains(t, in.stdout.String(), `curl -s http://`+strings.TrimPrefix(in.url, "http://")+`/v1/chat/completions -H "Authorization: Bearer $TOKEN"`)

	// A new shell: none of this process's secrets, only what the line sets.
	t.Setenv(identity.EnvSecretFile, "")
	for _, kv := range strings.Fields(m[1]) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var out, errOut testkit.LogBuffer
	require.Equal(t, 0, run(t.Context(), strings.Fields(m[2]), &out, &errOut, nil), "the hint's token command: %s", errOut.String())
	code, _, body := call(t, in.url, strings.TrimSpace(out.String()), hello)
	assert.Equal(t, http.StatusOK, code, "the hint's token works: %s", body)
}

func TestStartupHintNeverPrintsASecretFromTheEnvironment(t *testing.T) {
	in := start(t, prefix(t))
	startupLines(t, in)
	assert.Contains(t, in.stdout.String(), "export JWT_SECRET=…", "a secret from JWT_SECRET is named, never shown")
	assert.NotContains(t, in.stdout.String(), secret)
}

// startupLines waits until the startup lines are written: /readyz, which
// start waits for, may answer before they are.
func startupLines(t *testing.T, in *instance) {
	t.Helper()
	require.Eventually(t, func() bool { return strings.Contains(in.stdout.String(), "curl -s http://") },
		10*time.Second, time.Millisecond, "no startup lines:\n%s", in.stdout)
}
