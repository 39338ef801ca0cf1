package redisconn

import (
	"crypto/tls"
	"flag"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const redisPassword = "hunter2-Zq8v"

// parseRedis parses the Redis flags alone.
func parseRedis(t *testing.T, args ...string) Settings {
	t.Helper()
	var s Settings
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	s.Flags(fs)
	require.NoError(t, fs.Parse(args))
	return s
}

func TestClusterOptionsCarryThePasswordAndTLS(t *testing.T) {
	env := func(k string) string {
		return map[string]string{"REDIS_PASSWORD": redisPassword, "CACHE_PW": "other-pw"}[k]
	}
	s := parseRedis(t, "-redis-cluster", "a:6379, b:6379", "-redis-username", "gw", "-redis-tls")
	o, err := clusterOptions(s.cluster.get(env), s, env(s.passwordEnv))
	require.NoError(t, err)
	assert.Equal(t, []string{"a:6379", "b:6379"}, o.Addrs)
	assert.Equal(t, "gw", o.Username)
	assert.Equal(t, redisPassword, o.Password, "the password comes from $REDIS_PASSWORD")
	require.NotNil(t, o.TLSConfig, "-redis-tls turns TLS on for the cluster")
	assert.Equal(t, uint16(tls.VersionTLS12), o.TLSConfig.MinVersion, "TLS 1.2 at least, as ParseURL sets for rediss://")
	assert.Empty(t, o.TLSConfig.ServerName, "each node's name comes from its own address, not one name for all")
	assert.False(t, o.TLSConfig.InsecureSkipVerify)

	s = parseRedis(t, "-redis-cluster", "a:6379", "-redis-password-env", "CACHE_PW")
	o, err = clusterOptions(s.cluster.get(env), s, env(s.passwordEnv))
	require.NoError(t, err)
	assert.Equal(t, "other-pw", o.Password, "-redis-password-env names the variable")
	assert.Nil(t, o.TLSConfig, "no TLS unless asked")

	for _, bad := range []string{"redis://:" + redisPassword + "@a:6379", ":" + redisPassword + "@a:6379", "a:6379,,b:6379"} {
		s = parseRedis(t, "-redis-cluster", bad)
		_, err = clusterOptions(s.cluster.get(env), s, "")
		require.Error(t, err, "%s is not a list of addresses", bad)
		assert.NotContains(t, err.Error(), redisPassword)
	}
	_, err = clusterOptions("a:6379", parseRedis(t, "-redis-tls-ca", "ca.pem"), "")
	assert.ErrorContains(t, err, "-redis-tls-ca does nothing without TLS", "a setting silently ignored is a setting someone believes is on")
}

func TestURLOptionsTakeThePasswordFromTheEnvironmentOrTheURL(t *testing.T) {
	s := parseRedis(t)
	o, err := urlOptions("redis://127.0.0.1:6379/2", s, redisPassword)
	require.NoError(t, err)
	assert.Equal(t, redisPassword, o.Password, "$REDIS_PASSWORD keeps the password out of the URL")
	assert.Nil(t, o.TLSConfig)

	o, err = urlOptions("rediss://db.internal:6380/0", s, "")
	require.NoError(t, err)
	require.NotNil(t, o.TLSConfig, "rediss:// is TLS")
	assert.Equal(t, "db.internal", o.TLSConfig.ServerName)

	o, err = urlOptions("redis://db.internal:6380/0", parseRedis(t, "-redis-tls"), "")
	require.NoError(t, err)
	require.NotNil(t, o.TLSConfig, "-redis-tls turns TLS on for a redis:// URL too")
	assert.Equal(t, "db.internal", o.TLSConfig.ServerName)
	assert.Equal(t, uint16(tls.VersionTLS12), o.TLSConfig.MinVersion)

	_, err = urlOptions("redis://:x"+redisPassword+"@127.0.0.1:6379/0", s, redisPassword)
	require.ErrorContains(t, err, "keep one", "a password in the URL and in the variable: which one is meant is not ours to guess")
	assert.NotContains(t, err.Error(), redisPassword)
}
