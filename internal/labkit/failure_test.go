package labkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit/redismark"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// three hints, each with its three levels.
var threeHints = []Hint{
	{Title: "1. Refill", Nudge: "Where does the bucket refill?", Approach: "Refill it first, then take.", Solution: "```go\nb.refill(now)\n```"},
	{Title: "2. Keys", Nudge: "What may a key hold?", Approach: "Check the key first.", Solution: "```go\ncheck(key)\n```"},
	{Title: "3. Rounding", Nudge: "Which way does it round?", Approach: "Up, never down.", Solution: "```go\nmath.Ceil(x)\n```"},
}

func TestAHintIsRevealedALevelAtATime(t *testing.T) {
	levels := threeHints[0].Levels()
	assert.Equal(t, []Level{{LevelNudge, "Where does the bucket refill?"}, {LevelApproach, "Refill it first, then take."}, {LevelSolution, "```go\nb.refill(now)\n```"}}, levels,
		"each level shows its own hand-written text")
	assert.Equal(t, []string{"nudge", "approach", "near-solution"}, []string{levels[0].Name(), levels[1].Name(), levels[2].Name()})
}

func TestHintStateRevealsLevelByLevelAndRemembers(t *testing.T) {
	root := t.TempDir()
	s, err := LoadHintState(root)
	require.NoError(t, err)
	s.Reveal("07", 2, LevelNudge) // labctl test showed the nudge for the first failure
	s.Current["07"] = 2
	k, ok := s.Next("07", threeHints)
	require.True(t, ok)
	assert.Equal(t, 2, k, "the step the red run pointed at comes first")
	assert.Equal(t, LevelApproach, s.NextLevel("07", 2, threeHints[1]).N, "its next level")
	s.Reveal("07", 2, LevelApproach)
	k, _ = s.Next("07", threeHints)
	assert.Equal(t, 2, k, "until its near-solution is shown")
	s.Reveal("07", 2, LevelSolution)
	k, _ = s.Next("07", threeHints)
	assert.Equal(t, 1, k, "hint 2 is shown whole: the lowest with levels left comes next")
	assert.Equal(t, LevelNudge, s.NextLevel("07", 1, threeHints[0]).N)
	s.Reveal("07", 1, LevelSolution)
	s.Reveal("07", 3, LevelApproach)
	_, ok = s.Next("07", threeHints)
	assert.True(t, ok, "hint 3's near-solution is still to come")
	opened, offered := s.Opened("07", threeHints)
	assert.Equal(t, 2, opened, "hints 1 and 2 had their near-solutions shown; hint 3 only its approach")
	assert.Equal(t, 3, offered, "every hint offers a near-solution")
	s.Reveal("07", 3, LevelSolution)
	_, ok = s.Next("07", threeHints)
	assert.False(t, ok, "every hint shown whole")
	s.Reveal("07", 1, LevelNudge)
	assert.Equal(t, LevelSolution, s.Level("07", 1), "a level once shown stays shown")
	require.NoError(t, s.Save())

	again, err := LoadHintState(root)
	require.NoError(t, err)
	assert.Equal(t, LevelSolution, again.Level("07", 1), "the state survives a save")
	again.Reset("07")
	k, _ = again.Next("07", threeHints)
	assert.Equal(t, 1, k)
}

func TestAnOldHintStateReadsAsShownWhole(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, ".labctl"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, HintStateFile), []byte(`{"shown":{"07":[1,3]},"seen":{"02":1}}`), 0o644))
	s, err := LoadHintState(root)
	require.NoError(t, err)
	assert.Equal(t, LevelSolution, s.Level("07", 1))
	assert.Equal(t, 0, s.Level("07", 2))
	assert.Equal(t, LevelSolution, s.Level("02", 1))
}

func TestHintStateReadsTheOlderCountFormat(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, ".labctl"), 0o755))
	write(t, root, ".labctl/hints.json", `{"seen": {"03": 2}}`)
	s, err := LoadHintState(root)
	require.NoError(t, err)
	k, _ := s.Next("03", append(threeHints, threeHints[0]))
	assert.Equal(t, 3, k, `"seen": 2 meant hints 1 and 2, shown whole`)
}
