package testkit

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// failingTB records what Seed logs when the test it stands in for has failed.
type failingTB struct {
	testing.TB
	cleanups []func()
	logs     []string
}

func (f *failingTB) Helper()           {}
func (f *failingTB) Name() string      { return "TestBackoff/burst_of_3" }
func (f *failingTB) Failed() bool      { return true }
func (f *failingTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *failingTB) Logf(format string, args ...any) {
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func TestFailureLogsAReplayCommandThatWorksFromTheRoot(t *testing.T) {
	t.Setenv(SeedEnv, "7")
	tb := &failingTB{}
	Seed(tb)
	for _, fn := range tb.cleanups {
		fn()
	}
	require.Len(t, tb.logs, 1, "a failed test logs its seed once")
	assert.Contains(t, tb.logs[0], "SEED=7 go test -race -run '^TestBackoff$/^burst_of_3$' ./internal/testkit",
		"the package path is relative to the module root and the subtest is anchored on its own")
}
