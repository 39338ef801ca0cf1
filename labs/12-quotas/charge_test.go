package quotas

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEstimateCountsThePromptAndEveryAnswer(t *testing.T) {
	assert.Equal(t, 100+512, Estimate(400, 512, 1), "400 bytes ≈ 100 tokens, plus the answer's limit")
	assert.Equal(t, 100+3*512, Estimate(400, 512, 3), "n answers of up to max_tokens each")
	assert.Equal(t, 100+512, Estimate(400, 512, 0), "n unset is one answer")
	assert.Equal(t, 100+DefaultAnswerTokens, Estimate(400, 0, 1), "no limit on the answer: the default is reserved (and should be sent upstream)")
	assert.Equal(t, 2*DefaultAnswerTokens, Estimate(0, 0, 2))
	assert.Equal(t, 1, Estimate(-5, 1, 1), "a negative size counts as nothing")
}

func TestChargeRefundsOnlyWhatNeverReachedTheUpstream(t *testing.T) {
	cases := []struct {
		name     string
		o        Outcome
		reserved int
		used     int
		want     int
	}{
		{"not sent", NotSent, 1000, 0, 0},
		{"not sent, whatever a report says", NotSent, 1000, 50, 0},
		{"refused with a non-2xx", Refused, 1000, 0, 0},
		{"answered, shorter than reserved", Answered, 1000, 300, 300},
		{"answered, longer than reserved", Answered, 1000, 1700, 1700},
		{"answered, no usage reported", Answered, 1000, 0, 1000},
		{"broken: cancelled, timed out or cut, no report", Broken, 1000, 0, 1000},
		{"broken after a report of less", Broken, 1000, 300, 1000},
		{"broken after a report of more", Broken, 1000, 1700, 1700},
		{"broken with nothing reserved", Broken, 0, 0, 0},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Charge(c.o, c.reserved, c.used), c.name)
	}
}

// What the naive rule — "refund every call that did not succeed" — gives
// away, in the lesson's numbers: 1,000 requests with a 6,000-token prompt
// (24 KB), each cancelled after the upstream had it.
func TestTheNaiveRefundRuleGivesAwayEveryCancelledPrompt(t *testing.T) {
	perRequest := Estimate(24_000, 0, 1)
	charged := 0
	for range 1000 {
		charged += Charge(Broken, perRequest, 0)
	}
	t.Logf("1,000 cancelled requests of %d reserved tokens each: charged %d tokens; the naive rule charges 0", perRequest, charged)
	assert.Equal(t, 1000*(6000+DefaultAnswerTokens), charged, "7,024,000 tokens the upstream billed, charged; the naive rule charges 0")
}
