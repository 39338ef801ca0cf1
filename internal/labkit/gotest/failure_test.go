package gotest

import (
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit/redismark"
	"github.com/stretchr/testify/assert"
)

// Outputs as `go test -json` reports them for one test, copied from real runs.
const (
	unexpectedError = "=== RUN   TestAllowsBurstThenRefuses\n" +
		"    limiter_test.go:75: \n" +
		"        \tError Trace:\t/work/labs/07-distlimit/limiter_test.go:56\n" +
		"        \t            \t\t\t\t/work/labs/07-distlimit/limiter_test.go:75\n" +
		"        \tError:      \tReceived unexpected error:\n" +
		"        \t            \tlab 07: not implemented yet\n" +
		"        \tTest:       \tTestAllowsBurstThenRefuses\n" +
		"--- FAIL: TestAllowsBurstThenRefuses (0.01s)\n"

	notEqualTwice = "=== RUN   TestRetryAfter\n" +
		"=== RUN   TestRetryAfter/burst_of_3\n" +
		"    limiter_test.go:101: \n" +
		"        \tError Trace:\t/work/labs/07-distlimit/limiter_test.go:101\n" +
		"        \tError:      \tNot equal: \n" +
		"        \t            \texpected: 500000000\n" +
		"        \t            \tactual  : 0\n" +
		"        \t            \t\n" +
		"        \t            \tDiff:\n" +
		"        \t            \t--- Expected\n" +
		"        \t            \t+++ Actual\n" +
		"        \t            \t@@ -1 +1 @@\n" +
		"        \t            \t-500000000\n" +
		"        \t            \t+0\n" +
		"        \tTest:       \tTestRetryAfter/burst_of_3\n" +
		"        \tMessages:   \ta refused request waits for one token\n" +
		"    limiter_test.go:102: \n" +
		"        \tError Trace:\t/work/labs/07-distlimit/limiter_test.go:102\n" +
		"        \tError:      \tShould be true\n" +
		"        \tTest:       \tTestRetryAfter/burst_of_3\n" +
		"    testkit.go:31: random seed 42; replay from the repository root with: SEED=42 go test -race -run '^TestRetryAfter$/^burst_of_3$' ./labs/07-distlimit\n" +
		"--- FAIL: TestRetryAfter (0.00s)\n" +
		"    --- FAIL: TestRetryAfter/burst_of_3 (0.00s)\n"

	plainErrorf = "=== RUN   TestLoopback\n" +
		"    loopback_test.go:96: Serve returned before shutdown began\n" +
		"        second line of the message\n" +
		"--- FAIL: TestLoopback (0.01s)\n"
)

func TestFirstFailureIsOneShortAssertion(t *testing.T) {
	msg, more := FirstFailure(notEqualTwice)
	assert.Equal(t, "TestRetryAfter/burst_of_3:\n"+
		"limiter_test.go:101: a refused request waits for one token\n"+
		"    Not equal:\n"+
		"    expected: 500000000\n"+
		"    actual  : 0\n"+
		"testkit.go:31: random seed 42; replay from the repository root with: SEED=42 go test -race -run '^TestRetryAfter$/^burst_of_3$' ./labs/07-distlimit",
		msg, "the first assertion only: its message, expected and actual; no trace, no diff, no second block; the seed line kept")
	assert.Equal(t, 1, more, "the second failing assertion is counted, not shown")
}

func TestFirstFailureKeepsTheErrorAfterItsLabel(t *testing.T) {
	msg, more := FirstFailure(unexpectedError)
	assert.Equal(t, "limiter_test.go:75:\n    Received unexpected error:\n    lab 07: not implemented yet", msg)
	assert.Zero(t, more)

	msg, _ = FirstFailure(plainErrorf)
	assert.Equal(t, "loopback_test.go:96: Serve returned before shutdown began\n    second line of the message", msg)
}

func TestHeadlineKeepsTheMeaningfulLine(t *testing.T) {
	assert.Equal(t, "Received unexpected error: lab 07: not implemented yet", Headline(unexpectedError),
		"the error itself, not just the label that introduces it")
	assert.Equal(t, "a refused request waits for one token — Not equal: expected: 500000000 actual : 0 (+1 more)", Headline(notEqualTwice))
	assert.Equal(t, "Serve returned before shutdown began second line of the message", Headline(plainErrorf))

	skip := "=== RUN   TestIntegrationX\n    x_test.go:9: " +
		redismark.SkipMessage("no Redis server: REDIS_URL unset; no redis-server on PATH", "REDIS_URL", "REDIS_INTEGRATION_REQUIRED") +
		"\n--- SKIP: TestIntegrationX (0.00s)\n"
	assert.True(t, strings.HasPrefix(Headline(skip), "skipped: no Redis server: REDIS_URL unset; no redis-server on PATH ("), Headline(skip))

	long := "=== RUN   TestX\n    x_test.go:1: " + strings.Repeat("word ", 100) + "\n"
	assert.LessOrEqual(t, len([]rune(Headline(long))), 240, "a headline is one table row")
}

func TestFailuresSkipTheRealRedisLine(t *testing.T) {
	out := "=== RUN   TestIntegrationAtomic\n" +
		"    integration_test.go:24: " + redismark.Real + " at redis://127.0.0.1:46631/0 (redis-server started for this run)\n" +
		"    integration_test.go:64: \n" +
		"        \tError Trace:\t/work/integration_test.go:64\n" +
		"        \tError:      \tShould be zero, but was 40\n" +
		"        \tTest:       \tTestIntegrationAtomic\n" +
		"        \tMessages:   \tround 0: Redis errors\n" +
		"--- FAIL: TestIntegrationAtomic (0.25s)\n"
	msg, more := FirstFailure(out)
	assert.Equal(t, "integration_test.go:64: round 0: Redis errors\n    Should be zero, but was 40", msg)
	assert.Zero(t, more, "the helper's log line is not a failure")
	assert.Equal(t, "round 0: Redis errors — Should be zero, but was 40", Headline(out))
}

func TestReportOrderPutsRealRedisTestsLast(t *testing.T) {
	assert.Equal(t,
		[]string{"TestA", "TestB", "TestC", "TestIntegrationX", "TestIntegrationY"},
		ReportOrder([]string{"TestIntegrationX", "TestA", "TestB", "TestIntegrationY", "TestC"}))
}

func TestOutcomeSaysWhyRealRedisTestsSkipped(t *testing.T) {
	reason := "no Redis server: REDIS_URL unset; no redis-server on PATH"
	p := &PackageResult{Status: Pass, Tests: map[string]*TestResult{
		"TestIntegrationX": {Status: Skip, Output: "    x_test.go:9: " + redismark.SkipMessage(reason, "REDIS_URL", "REDIS_INTEGRATION_REQUIRED") + "\n"},
		"TestA":            {Status: Pass},
		"TestB":            {Status: Skip, Output: "    x_test.go:3: not on this platform\n"},
	}}
	o := ReadOutcome(p, []string{"TestIntegrationX", "TestA", "TestB"})
	assert.Equal(t, []string{"TestA", "TestB", "TestIntegrationX"}, o.Tests)
	assert.Equal(t, []string{"TestIntegrationX"}, o.NeedRedis)
	assert.Equal(t, []string{"TestB"}, o.Skipped, "a skip for another reason is not a missing Redis")
	assert.False(t, o.Done(), "a skipped test is not a passed one")
	assert.Equal(t, "TestIntegrationX skipped: "+reason+" (install redis-server or set REDIS_URL; REDIS_INTEGRATION_REQUIRED=1 turns this skip into a failure)", o.RedisNote())
	assert.NotContains(t, o.RedisNote(), "\n")

	none := ReadOutcome(nil, []string{"TestA"})
	assert.Equal(t, []string{"TestA"}, none.NotRun, "nothing ran: every test is not run")
}
