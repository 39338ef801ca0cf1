package quotas

// Tests for the bugs of an outsider's fifth bank aimed at the tests' gaps:
// each passes on the reference and fails with the bug named in its comment.

import (
	"context"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 01-estimate-prompt-rounds-up: "at four bytes a token (promptBytes/4,
// rounded down ...)" — a partial token of prompt is not reserved.
func TestEstimateRoundsAPartialPromptTokenDown(t *testing.T) {
	assert.Equal(t, 100+512, Estimate(401, 512, 1), "401 bytes: 100 tokens, rounded down")
	assert.Equal(t, 100+512, Estimate(403, 512, 1), "403 bytes: still 100")
	assert.Equal(t, DefaultAnswerTokens, Estimate(3, 0, 1), "3 bytes: no whole token")
}

// 02-estimate-negative-choices: "choices ≤ 0 means one" — a negative n too.
func TestEstimateOfNegativeChoicesIsOneAnswer(t *testing.T) {
	assert.Equal(t, 100+512, Estimate(400, 512, -1))
	assert.Equal(t, 100+DefaultAnswerTokens, Estimate(400, 0, -3))
}

// 03-reserve-deadline-fails-closed: "A caller's cancelled context comes back
// as its error" — for Reserve with a deadline too, not only a cancel.
func TestAReserveWhoseDeadlinePassedGetsItsContextsError(t *testing.T) {
	f := newFixture(t, Config{})
	ctx, stop := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer stop()
	d, err := f.q.Reserve(ctx, "acme", "r1", 100, 10)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, Decision{}, d, "no decision with the error")
	assert.Equal(t, 100, f.left(t, "acme", 100), "nothing was taken")
}

// 04-eval-on-any-error: "run with redis.NewScript(...).Run: EVALSHA, and
// EVAL only when Redis answers NOSCRIPT" — an error of any other kind is
// not answered by sending the whole script again.
func TestARedisErrorIsNotAnsweredWithTheWholeScript(t *testing.T) {
	f := newFixture(t, Config{})
	var log redistest.CommandLog
	f.rdb.AddHook(&log)
	f.reserve(t, "acme", "warm", 100, 1) // the script is cached from here on
	log.Take()
	f.m.SetError("LOADING Redis is loading the dataset in memory")
	defer f.m.SetError("")
	_, err := f.q.Reserve(context.Background(), "acme", "r1", 100, 1)
	require.Error(t, err)
	_, err = f.q.Settle(context.Background(), "acme", "r1", 100, 1)
	require.Error(t, err)
	assert.Equal(t, []string{"evalsha", "evalsha"}, log.Take(), "one EVALSHA each; EVAL is for NOSCRIPT only")
}

// 06-resent-reserve-refused-in-debt: "a resent reserve checked against the
// bucket before its id: refused once the bucket runs low" (README, classic
// bugs) — in debt too: the resend of a reservation that paid is allowed and
// takes nothing.
func TestAResentReserveIsAllowedWhileTheTenantIsInDebt(t *testing.T) {
	f := newFixture(t, Config{})
	require.True(t, f.reserve(t, "acme", "a", 600, 300).Allowed)
	require.True(t, f.reserve(t, "acme", "b", 600, 300).Allowed)
	require.True(t, f.settle(t, "acme", "b", 600, 900)) // 600 over: -600, in debt
	assert.Equal(t, Decision{Allowed: true}, f.reserve(t, "acme", "a", 600, 300),
		"a resend of a, which paid already: allowed, and nothing more taken")
	assert.True(t, f.settle(t, "acme", "a", 600, 0))
	assert.Equal(t, 30100*time.Millisecond, f.reserve(t, "acme", "c", 600, 1).RetryAfter,
		"a's 300 refunded (-300), nothing taken by its resend: 301 tokens at 10 a second")
}

// 10-retry-after-in-debt-rounds-twice: "RetryAfter until the estimate fits,
// rounded up to the millisecond" — once, not the debt and the estimate each.
func TestRetryAfterInDebtIsRoundedUpOnce(t *testing.T) {
	f := newFixture(t, Config{})
	f.reserve(t, "acme", "r1", 7, 7)
	require.True(t, f.settle(t, "acme", "r1", 7, 8)) // one token owed; a token every 8571.43 ms
	d := f.reserve(t, "acme", "r2", 7, 1)
	assert.False(t, d.Allowed)
	assert.Equal(t, 17143*time.Millisecond, d.RetryAfter, "two tokens to go: 17142.86 ms, rounded up once")
	f.advance(17142 * time.Millisecond)
	assert.False(t, f.reserve(t, "acme", "r3", 7, 1).Allowed, "a millisecond early it does not fit")
	f.advance(time.Millisecond)
	assert.True(t, f.reserve(t, "acme", "r4", 7, 1).Allowed, "it fits when RetryAfter said")
}
