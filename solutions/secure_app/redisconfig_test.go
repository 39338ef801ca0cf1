package main

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const redisPassword = "hunter2-Zq8v"

func TestHelpNamesTheRedisVariablesButNeverTheirValues(t *testing.T) {
	t.Setenv("REDIS_URL", "redis://app:"+redisPassword+"@redis.internal:6379/0")
	t.Setenv("REDIS_CLUSTER_ADDRS", "a.internal:6379,b.internal:6379")
	t.Setenv("REDIS_PASSWORD", redisPassword)
	var out, errOut testkit.LogBuffer
	require.Equal(t, 0, run(t.Context(), []string{"-h"}, &out, &errOut, nil))
	help := out.String() + errOut.String()
	assert.Contains(t, help, "$REDIS_URL", "-h names the variable")
	assert.Contains(t, help, "$REDIS_CLUSTER_ADDRS")
	for _, s := range []string{redisPassword, "redis.internal", "a.internal"} {
		assert.NotContains(t, help, s, "-h prints no value read from the environment")
	}
}

func TestRedisErrorsNeverCarryThePassword(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		secrets   []string // none may appear on stderr
		want      string   // does
	}{
		{"a bad percent escape in the password", "redis://app:p%zz" + redisPassword + "@127.0.0.1:6379/0",
			[]string{redisPassword, "%zz", "p%zz"}, "does not parse as a URL"},
		{"a slash in the password", "redis://app:pa/ss" + redisPassword + "@127.0.0.1:6379/0",
			[]string{redisPassword, "pa/ss", "ss" + redisPassword}, "does not parse as a URL"},
		{"a space in the password", "redis://app:pa ss" + redisPassword + "@127.0.0.1:6379/0",
			[]string{redisPassword}, "-redis-url redis://xxxxx@127.0.0.1:6379/0"},
		{"a database that is not a number", "redis://app:" + redisPassword + "@127.0.0.1:6379/zero",
			[]string{redisPassword}, "credentials as user:password@ before the host"}, // the hint, unmangled by the redaction
		{"a password as a query parameter", "redis://127.0.0.1:6379/0?password=" + redisPassword,
			[]string{redisPassword}, "password=xxxxx"},
		{"the wrong scheme", "http://app:" + redisPassword + "@127.0.0.1:6379/0",
			[]string{redisPassword}, "invalid URL scheme"},
		{"no scheme at all", "app:" + redisPassword + "@127.0.0.1:6379",
			[]string{redisPassword}, "xxxxx@127.0.0.1:6379"},
		{"an encoded password, a server that does not answer", "redis://app:" + url.QueryEscape(redisPassword+"/é") + "@127.0.0.1:1/0",
			[]string{redisPassword, url.QueryEscape(redisPassword + "/é")}, "does not answer"},
	} {
		for _, via := range []string{"-redis-url", "REDIS_URL"} {
			t.Run(tc.name+" via "+via, func(t *testing.T) {
				t.Setenv("JWT_SECRET", secret)
				args := []string{}
				if via == "REDIS_URL" {
					t.Setenv("REDIS_URL", tc.url)
				} else {
					args = append(args, "-redis-url", tc.url)
				}
				var out, errOut testkit.LogBuffer
				assert.Equal(t, 2, run(t.Context(), args, &out, &errOut, nil))
				assert.Contains(t, errOut.String(), tc.want)
				for _, s := range tc.secrets {
					assert.NotContains(t, errOut.String()+out.String(), s, "the error quotes the password")
				}
			})
		}
	}
}

func TestRedisSettingsComeFromTheEnvironmentAfterTheFlags(t *testing.T) {
	t.Setenv("JWT_SECRET", secret)
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	var out, errOut testkit.LogBuffer
	assert.Equal(t, 2, run(t.Context(), nil, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "redis at 127.0.0.1:1 does not answer", "REDIS_URL is read when -redis-url is not given")

	errOut = testkit.LogBuffer{}
	assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", ""}, &out, &errOut, nil))
	assert.Contains(t, errOut.String(), "no Redis for the shared limits", "an explicit -redis-url wins over REDIS_URL, even empty")
}

func TestIntegrationClusterModeSpeaksTLSWithAPassword(t *testing.T) {
	node := startTLSClusterNode(t, redisPassword)
	t.Setenv("REDIS_URL", "")
	t.Setenv("REDIS_PASSWORD", redisPassword)
	in := start(t, prefix(t), "-redis-url", "", "-redis-cluster", node.addr, "-redis-tls", "-redis-tls-ca", node.caFile)
	code, _, body := call(t, in.url, token(t, "tls-co", "pro", time.Hour), hello)
	assert.Equal(t, http.StatusOK, code, "the limits run on a TLS cluster that needs a password: %s", body)

	t.Run("without the password the start fails and says why", func(t *testing.T) {
		t.Setenv("REDIS_PASSWORD", "")
		var out, errOut testkit.LogBuffer
		assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", "", "-redis-cluster", node.addr, "-redis-tls", "-redis-tls-ca", node.caFile}, &out, &errOut, nil))
		assert.Contains(t, errOut.String(), "does not answer")
		assert.Regexp(t, `NOAUTH|WRONGPASS|[Aa]uthentication`, errOut.String())
	})
	t.Run("without the CA the certificate is not trusted", func(t *testing.T) {
		var out, errOut testkit.LogBuffer
		assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", "", "-redis-cluster", node.addr, "-redis-tls"}, &out, &errOut, nil))
		assert.Contains(t, errOut.String(), "certificate")
		assert.NotContains(t, errOut.String(), redisPassword)
	})
	t.Run("with the wrong password nothing leaks", func(t *testing.T) {
		t.Setenv("REDIS_PASSWORD", "wrong-"+redisPassword)
		var out, errOut testkit.LogBuffer
		assert.Equal(t, 2, run(t.Context(), []string{"-redis-url", "", "-redis-cluster", node.addr, "-redis-tls", "-redis-tls-ca", node.caFile}, &out, &errOut, nil))
		assert.NotContains(t, errOut.String(), redisPassword)
	})
}
