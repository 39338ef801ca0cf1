package testkit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSeedFromEnvironmentReplays(t *testing.T) {
	t.Setenv(SeedEnv, "42")
	a, b := Rand(t), Rand(t)
	assert.Equal(t, uint64(42), Seed(t))
	for range 10 {
		assert.Equal(t, a.Uint64(), b.Uint64(), "the same seed must give the same sequence")
	}
}

func TestSeedWithoutEnvironmentDiffers(t *testing.T) {
	t.Setenv(SeedEnv, "")
	assert.NotEqual(t, Seed(t), Seed(t), "two fresh seeds should differ")
}
