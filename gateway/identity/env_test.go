package identity_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/gateway/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeEnv is an environment and a file system in maps.
type fakeEnv struct {
	vars  map[string]string
	files map[string]string
	reads []string
}

func (e *fakeEnv) getenv(k string) string { return e.vars[k] }

func (e *fakeEnv) readFile(p string) ([]byte, error) {
	e.reads = append(e.reads, p)
	s, ok := e.files[p]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	return []byte(s), nil
}

func TestSecretsFromEnv(t *testing.T) {
	const (
		cur  = "current-secret-Kq7vX2mPzR9tLw4nB8hJ"
		prev = "previous-secret-Zt3wQ8nLp5Rv1Xk6Hm"
		s31  = "thirty-one-bytes-0123456789abcd"
	)
	require.Len(t, s31, 31)
	tests := []struct {
		name      string
		vars      map[string]string
		files     map[string]string
		cur, prev string
		err       string // in the error text; "" = no error
	}{
		{name: "JWT_SECRET", vars: map[string]string{"JWT_SECRET": cur}, cur: cur},
		{name: "JWT_SECRET of exactly 32 bytes", vars: map[string]string{"JWT_SECRET": cur[:32]}, cur: cur[:32]},
		{name: "JWT_SECRET_FILE with a trailing newline", vars: map[string]string{"JWT_SECRET_FILE": "/run/s"},
			files: map[string]string{"/run/s": cur + "\n"}, cur: cur},
		{name: "JWT_SECRET_FILE with a CRLF", vars: map[string]string{"JWT_SECRET_FILE": "/run/s"},
			files: map[string]string{"/run/s": cur + "\r\n"}, cur: cur},
		{name: "JWT_SECRET_FILE: only one newline is trimmed", vars: map[string]string{"JWT_SECRET_FILE": "/run/s"},
			files: map[string]string{"/run/s": cur + "\n\n"}, cur: cur + "\n"},
		{name: "JWT_SECRET_FILE: spaces are part of the secret", vars: map[string]string{"JWT_SECRET_FILE": "/run/s"},
			files: map[string]string{"/run/s": " " + cur + " \n"}, cur: " " + cur + " "},
		{name: "JWT_SECRET_FILE: a lone \\r is kept", vars: map[string]string{"JWT_SECRET_FILE": "/run/s"},
			files: map[string]string{"/run/s": cur + "\r"}, cur: cur + "\r"},
		{name: "with JWT_SECRET_PREVIOUS", vars: map[string]string{"JWT_SECRET": cur, "JWT_SECRET_PREVIOUS": prev}, cur: cur, prev: prev},
		{name: "with JWT_SECRET_PREVIOUS_FILE", vars: map[string]string{"JWT_SECRET": cur, "JWT_SECRET_PREVIOUS_FILE": "/run/p"},
			files: map[string]string{"/run/p": prev + "\n"}, cur: cur, prev: prev},
		{name: "empty JWT_SECRET_PREVIOUS counts as unset", vars: map[string]string{"JWT_SECRET": cur, "JWT_SECRET_PREVIOUS": ""}, cur: cur},

		{name: "nothing set", err: "set JWT_SECRET or JWT_SECRET_FILE to a secret of at least 32 bytes"},
		{name: "empty JWT_SECRET counts as unset", vars: map[string]string{"JWT_SECRET": ""}, err: "set JWT_SECRET or JWT_SECRET_FILE"},
		{name: "both JWT_SECRET and JWT_SECRET_FILE", vars: map[string]string{"JWT_SECRET": cur, "JWT_SECRET_FILE": "/run/s"},
			files: map[string]string{"/run/s": cur}, err: "both JWT_SECRET and JWT_SECRET_FILE are set"},
		{name: "short JWT_SECRET", vars: map[string]string{"JWT_SECRET": s31}, err: "JWT_SECRET is 31 bytes; at least 32 are required"},
		{name: "short JWT_SECRET_FILE once its newline is trimmed", vars: map[string]string{"JWT_SECRET_FILE": "/run/s"},
			files: map[string]string{"/run/s": s31 + "\n"}, err: "JWT_SECRET_FILE (/run/s) holds 31 bytes after its trailing newline"},
		{name: "empty JWT_SECRET_FILE", vars: map[string]string{"JWT_SECRET_FILE": "/run/s"},
			files: map[string]string{"/run/s": "\n"}, err: "JWT_SECRET_FILE (/run/s) holds 0 bytes"},
		{name: "JWT_SECRET_FILE missing", vars: map[string]string{"JWT_SECRET_FILE": "/run/nope"},
			err: "JWT_SECRET_FILE: open /run/nope: file does not exist"},
		{name: "huge JWT_SECRET_FILE (a wrong path, e.g. a binary)", vars: map[string]string{"JWT_SECRET_FILE": "/usr/bin/x"},
			files: map[string]string{"/usr/bin/x": strings.Repeat("x", 64<<10+1)}, err: "JWT_SECRET_FILE (/usr/bin/x) is 65537 bytes"},
		{name: "short JWT_SECRET_PREVIOUS", vars: map[string]string{"JWT_SECRET": cur, "JWT_SECRET_PREVIOUS": s31},
			err: "JWT_SECRET_PREVIOUS is 31 bytes"},
		{name: "both previous forms", vars: map[string]string{"JWT_SECRET": cur, "JWT_SECRET_PREVIOUS": prev, "JWT_SECRET_PREVIOUS_FILE": "/run/p"},
			files: map[string]string{"/run/p": prev}, err: "both JWT_SECRET_PREVIOUS and JWT_SECRET_PREVIOUS_FILE are set"},
		{name: "JWT_SECRET_PREVIOUS_FILE missing", vars: map[string]string{"JWT_SECRET": cur, "JWT_SECRET_PREVIOUS_FILE": "/run/p"},
			err: "JWT_SECRET_PREVIOUS_FILE: open /run/p"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := &fakeEnv{vars: tc.vars, files: tc.files}
			c, p, err := identity.SecretsFromEnv(env.getenv, env.readFile)
			if tc.err != "" {
				require.Error(t, err, "want a refusal containing %q", tc.err)
				assert.ErrorIs(t, err, identity.ErrConfig)
				assert.Contains(t, err.Error(), tc.err)
				assert.Nil(t, c, "no current secret with an error")
				assert.Nil(t, p, "no previous secret with an error")
				for _, s := range []string{cur, prev, s31} {
					assert.NotContains(t, err.Error(), s, "the error quotes a secret")
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.cur, string(c), "current secret")
			if tc.prev == "" {
				assert.Nil(t, p, "no previous secret")
			} else {
				assert.Equal(t, tc.prev, string(p), "previous secret")
			}
		})
	}
}

func TestSecretsFromEnvKeepsTheReadErrorChain(t *testing.T) {
	env := &fakeEnv{vars: map[string]string{"JWT_SECRET_FILE": "/run/nope"}}
	_, _, err := identity.SecretsFromEnv(env.getenv, env.readFile)
	assert.True(t, errors.Is(err, fs.ErrNotExist), "errors.Is(err, fs.ErrNotExist) so a caller can tell a missing file")
	assert.Equal(t, []string{"/run/nope"}, env.reads)
}

func TestSecretsFromEnvRefusesSecretsTypedByHand(t *testing.T) {
	const strong = "current-secret-Kq7vX2mPzR9tLw4nB8hJ"
	for _, tc := range []struct {
		name, secret string
	}{
		{"32 times the same letter", strings.Repeat("a", 32)},
		{"two letters in turn", strings.Repeat("ab", 20)},
		{"a word repeated", strings.Repeat("password", 4)},
		{"the hex digits twice", strings.Repeat("0123456789abcdef", 2)},
		{"a run of the alphabet", "abcdefghijklmnopqrstuvwxyz0123456789"},
		{"a strong prefix padded with one character", "Kq7vX2mP" + strings.Repeat("x", 40)},
	} {
		t.Run(tc.name+" is refused from JWT_SECRET and from a file", func(t *testing.T) {
			for _, env := range []*fakeEnv{
				{vars: map[string]string{"JWT_SECRET": tc.secret}},
				{vars: map[string]string{"JWT_SECRET_FILE": "/run/s"}, files: map[string]string{"/run/s": tc.secret + "\n"}},
				{vars: map[string]string{"JWT_SECRET": strong, "JWT_SECRET_PREVIOUS": tc.secret}},
			} {
				c, p, err := identity.SecretsFromEnv(env.getenv, env.readFile)
				require.Error(t, err, "a secret scoring %.0f bits must be refused", identity.SecretBits([]byte(tc.secret)))
				assert.ErrorIs(t, err, identity.ErrConfig)
				assert.Nil(t, c)
				assert.Nil(t, p)
				assert.Contains(t, err.Error(), "openssl rand -hex 32", "the refusal says how to make a real secret")
				assert.Contains(t, err.Error(), "at least 128")
				assert.NotContains(t, err.Error(), tc.secret, "the refusal never quotes the secret")
			}
		})
	}
}

func TestSecretBitsTellsTypedSecretsFromGeneratedOnes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		secret string
		below  bool // under MinSecretBits
	}{
		{"nothing", "", true},
		{"32 times a", strings.Repeat("a", 32), true},
		{"abab…", strings.Repeat("ab", 16), true},
		{"the hex digits twice: a repeat counts once", strings.Repeat("0123456789abcdef", 2), true},
		{"a run: a sequence counts as one pattern", "abcdefghijklmnopqrstuvwxyz012345", true},
		{"passwordpassword…", strings.Repeat("password", 4), true},
		{"64 hex digits of openssl rand -hex 32", "3f9a0c7be1d24865a7f3c0e9b5d1264f8a0e7c3b9d5f1a2468ce0b7d3f5a9c1e", false},
		{"base64 of 32 random bytes (openssl rand -base64 32)", "q3Zk9P0vX+7bR2mWc5tL8yJ1hN4sD6gF0aQeUoIiK2E=", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bits := identity.SecretBits([]byte(tc.secret))
			assert.Equal(t, tc.below, bits < identity.MinSecretBits, "SecretBits(%q) = %.1f", tc.secret, bits)
		})
	}
	t.Run("32 random bytes clear the bar every time", func(t *testing.T) {
		for range 2000 {
			b := make([]byte, 32)
			_, err := rand.Read(b)
			require.NoError(t, err)
			for _, s := range [][]byte{b, []byte(hex.EncodeToString(b)), []byte(base64.StdEncoding.EncodeToString(b))} {
				require.GreaterOrEqual(t, identity.SecretBits(s), float64(identity.MinSecretBits), "a generated secret %x must pass", s)
			}
		}
	})
}
