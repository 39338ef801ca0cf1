package quotas

import "math"

// DefaultAnswerTokens is the answer Estimate reserves for a request that
// sets no limit on it. A gateway that reserved it should also send it
// upstream as the limit (max_completion_tokens), or the answer may run
// past what was reserved.
const DefaultAnswerTokens = 1024

// Estimate is what to reserve for a request before its call: its prompt,
// at about four bytes a token (an overestimate for most text, an
// underestimate for some scripts: Settle corrects either way), plus
// choices answers of up to maxTokens each (DefaultAnswerTokens when ≤ 0).
// choices ≤ 0 means one. It never wraps: an estimate too large for an int
// is math.MaxInt, which no quota holds.
func Estimate(promptBytes, maxTokens, choices int) int {
	if maxTokens <= 0 {
		maxTokens = DefaultAnswerTokens
	}
	prompt, n := max(promptBytes, 0)/4, max(choices, 1)
	if maxTokens > (math.MaxInt-prompt)/n {
		return math.MaxInt // max_tokens and n are the caller's: never wrap round to a small estimate
	}
	return prompt + n*maxTokens
}

// Outcome is how an upstream call ended, as far as the bill goes.
type Outcome int

// The outcomes Charge tells apart.
const (
	// NotSent: the request never reached the upstream — refused by the
	// gateway, or its connection was never made.
	NotSent Outcome = iota
	// Refused: the upstream answered with a status other than 2xx. It
	// did no work it bills.
	Refused
	// Answered: the upstream answered in full.
	Answered
	// Broken: the upstream had the request, then the caller left, the
	// call timed out, or the stream was cut. The upstream bills what it
	// generated, and the gateway cannot know how much that was.
	Broken
)

// Charge is what a call costs its tenant, the number to Settle with:
// reserved is what Reserve took, used what the upstream reported (0 for
// no report).
//
//   - NotSent, Refused: nothing — the upstream provably did no work.
//   - Answered: what it reported using, less or more than reserved; with
//     no report, the reservation.
//   - Broken: at least the reservation, more if a report says so.
//
// The naive rule — refund every call that did not succeed — hands out the
// whole prompt of every cancelled or timed-out request for free, after the
// upstream has billed it: a tenant that hangs up after the first chunk
// pays nothing.
func Charge(o Outcome, reserved, used int) int {
	switch o {
	case NotSent, Refused:
		return 0
	case Answered:
		if used > 0 {
			return used
		}
		return reserved
	}
	return max(reserved, used)
}
