// Package testkit holds helpers shared by the exercise and solution tests
// that are not exercises themselves: replayable randomness, a log buffer
// safe to share with a server's goroutines, and
// (in redistest) a real Redis for the tests that need one.
package testkit

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// SeedEnv names the environment variable that replays a random test run.
const SeedEnv = "SEED"

// Seed returns the seed for this test: SEED from the environment when set
// (to replay a failure), else a fresh random one. When the test fails, the
// seed is printed with the command that replays it.
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	seed := rand.Uint64()
	if s := os.Getenv(SeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			tb.Fatalf("testkit: %s=%q is not an unsigned integer", SeedEnv, s)
		}
		seed = v
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("random seed %d; replay from the repository root with: %s", seed, ReplayCommand(seed, tb.Name()))
		}
	})
	return seed
}

// ReplayCommand is the shell command that re-runs the test named name (as
// testing.TB.Name gives it, subtests included) with seed, from the root of
// the module: go test runs a test binary in its package's directory, so the
// package path is that directory relative to the nearest go.mod.
func ReplayCommand(seed uint64, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return fmt.Sprintf("%s=%d go test -race -run '%s' %s", SeedEnv, seed, strings.Join(parts, "/"), packageFromRoot())
}

// packageFromRoot is the working directory relative to the module root, as
// a ./path package pattern; "." when no go.mod is found above it.
func packageFromRoot() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			rel, err := filepath.Rel(dir, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		if filepath.Dir(dir) == dir {
			return "."
		}
	}
}

// Rand returns a generator seeded by Seed. It is not safe for concurrent use:
// give each goroutine its own.
func Rand(tb testing.TB) *rand.Rand {
	tb.Helper()
	seed := Seed(tb)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// LogBuffer is a bytes.Buffer that a logger and a test may share: an
// slog handler writes to it from the server's goroutines while the test
// reads what was logged.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
