package redismark

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSkipReasonReadsBackTheSkipMessage(t *testing.T) {
	msg := SkipMessage("no Redis server: REDIS_URL unset; no redis-server on PATH", "REDIS_URL", "REDIS_INTEGRATION_REQUIRED")
	output := "=== RUN   TestIntegrationX\n    x_test.go:12: " + msg + "\n--- SKIP: TestIntegrationX (0.00s)\n"
	reason, ok := SkipReason(output)
	assert.True(t, ok, "the skip message must be found in the test's output")
	assert.Equal(t, "no Redis server: REDIS_URL unset; no redis-server on PATH (install redis-server or set REDIS_URL; REDIS_INTEGRATION_REQUIRED=1 turns this skip into a failure)", reason)

	_, ok = SkipReason("--- SKIP: TestOther (0.00s)\n    x_test.go:3: not on this platform\n")
	assert.False(t, ok, "a skip for another reason is not a missing Redis")
}
