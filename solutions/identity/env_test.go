package identity_test

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/solutions/identity"
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
		cur  = "current-secret-0123456789abcdefghij"
		prev = "previous-secret-0123456789abcdefghi"
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
