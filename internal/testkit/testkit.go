// Package testkit holds helpers shared by the exercise and solution tests
// that are not exercises themselves: replayable randomness for now, and
// (in redistest) a real Redis for the tests that need one.
package testkit

import (
	"math/rand/v2"
	"os"
	"strconv"
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
			tb.Logf("random seed %d; replay with: %s=%d go test -run '^%s$' .", seed, SeedEnv, seed, tb.Name())
		}
	})
	return seed
}

// Rand returns a generator seeded by Seed. It is not safe for concurrent use:
// give each goroutine its own.
func Rand(tb testing.TB) *rand.Rand {
	tb.Helper()
	seed := Seed(tb)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}
