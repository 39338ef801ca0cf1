package identity

import (
	"fmt"
	"strings"
)

// The environment variables SecretsFromEnv reads.
const (
	EnvSecret           = "JWT_SECRET"
	EnvSecretFile       = "JWT_SECRET_FILE"
	EnvSecretPrevious   = "JWT_SECRET_PREVIOUS"
	EnvSecretPrevFile   = "JWT_SECRET_PREVIOUS_FILE"
	maxSecretFileLength = 64 << 10
)

// SecretsFromEnv reads the verification secrets the way a deployment hands
// them over: the current one from JWT_SECRET or JWT_SECRET_FILE (exactly one
// of the two; the file form keeps the secret out of the process environment,
// which leaks into crash reports and /proc), and an optional previous one,
// for rotation, from JWT_SECRET_PREVIOUS or JWT_SECRET_PREVIOUS_FILE (at most
// one). A variable set to "" counts as unset. One trailing newline ("\n" or
// "\r\n") is trimmed from a file, since editors and `echo` add one; nothing
// else is trimmed. Each secret must be at least MinSecretBytes long and
// score at least MinSecretBits (SecretBits): a secret typed by hand —
// repeats, runs, a handful of distinct characters — is refused with how to
// make a real one.
//
// getenv is os.Getenv and readFile os.ReadFile in production. Errors match
// ErrConfig and name the variable (and the file) and the problem, never the
// value.
func SecretsFromEnv(getenv func(string) string, readFile func(string) ([]byte, error)) (current, previous []byte, err error) {
	current, err = secretFromEnv(getenv, readFile, EnvSecret, EnvSecretFile)
	if err != nil {
		return nil, nil, err
	}
	if current == nil {
		return nil, nil, fmt.Errorf("%w: set %s or %s to a secret of at least %d bytes", ErrConfig, EnvSecret, EnvSecretFile, MinSecretBytes)
	}
	previous, err = secretFromEnv(getenv, readFile, EnvSecretPrevious, EnvSecretPrevFile)
	if err != nil {
		return nil, nil, err
	}
	return current, previous, nil
}

// checkStrength refuses a secret under MinSecretBits. The estimate, not the
// secret, goes into the message.
func checkStrength(name string, s []byte) error {
	if bits := SecretBits(s); bits < MinSecretBits {
		return fmt.Errorf("%w: %s looks typed, not generated: about %.0f bits of entropy by its characters (repeats and runs count once), at least %d are required; generate one with `openssl rand -hex 32`",
			ErrConfig, name, bits, MinSecretBits)
	}
	return nil
}

// secretFromEnv returns the secret from the variable or the file it names,
// nil when neither is set.
func secretFromEnv(getenv func(string) string, readFile func(string) ([]byte, error), env, fileEnv string) ([]byte, error) {
	value, path := getenv(env), getenv(fileEnv)
	switch {
	case value != "" && path != "":
		return nil, fmt.Errorf("%w: both %s and %s are set; set one", ErrConfig, env, fileEnv)
	case value != "":
		if len(value) < MinSecretBytes {
			return nil, fmt.Errorf("%w: %s is %d bytes; at least %d are required (generate one with `openssl rand -hex 32`)", ErrConfig, env, len(value), MinSecretBytes)
		}
		if err := checkStrength(env, []byte(value)); err != nil {
			return nil, err
		}
		return []byte(value), nil
	case path != "":
		b, err := readFile(path)
		if err != nil {
			// The error is the reader's (os.ReadFile: operation, path,
			// cause); it cannot contain the secret it failed to read.
			return nil, fmt.Errorf("%w: %s: %w", ErrConfig, fileEnv, err)
		}
		if len(b) > maxSecretFileLength {
			return nil, fmt.Errorf("%w: %s (%s) is %d bytes; a secret file is at most %d", ErrConfig, fileEnv, path, len(b), maxSecretFileLength)
		}
		s := strings.TrimSuffix(string(b), "\n")
		if len(s) < len(b) {
			s = strings.TrimSuffix(s, "\r")
		}
		if len(s) < MinSecretBytes {
			return nil, fmt.Errorf("%w: %s (%s) holds %d bytes after its trailing newline; at least %d are required (generate one with `openssl rand -hex 32`)",
				ErrConfig, fileEnv, path, len(s), MinSecretBytes)
		}
		if err := checkStrength(fileEnv+" ("+path+")", []byte(s)); err != nil {
			return nil, err
		}
		return []byte(s), nil
	}
	return nil, nil
}
