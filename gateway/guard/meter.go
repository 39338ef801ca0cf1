package guard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/quota"
	quotas "github.com/production-go/gateway-lab/solutions/12-quotas"
)

// Token accounting, the rules (docs/SECURITY_AND_RUNTIME.md, "Token
// accounting", states them with their tests):
//
//   - Each upstream call reserves for itself. The first uses the
//     reservation Admit took; a retry, a fail-over or a hedge reserves
//     anew, and one the quota cannot hold is refused before it is sent:
//     the request ends with 429 tokens_per_minute (llm.ErrNotSent).
//   - A call is asked for no more answer than it reserved: when the caller
//     set no max_tokens, the upstream gets max_completion_tokens.
//   - A call that answered is charged the usage its upstream reported, or
//     its reservation when it reported none (the most it could have used).
//   - A call is refunded in full only when it provably never reached the
//     upstream — its dial failed — or the upstream answered with a status
//     other than 2xx before sending anything.
//   - Anything else — the caller hung up, an attempt or the tier timed
//     out, a stream was cut, the connection reset after the request went
//     out — is charged at least its reservation: the upstream had the
//     prompt, and bills for it.
//   - A request that made no call at all (no slot, every breaker open, the
//     caller gone while queued) is refunded its first reservation.
//   - All of it is settled when the request ends, after its answer is
//     written; a call abandoned by its attempt (a provider that ignores its
//     context) is settled when it returns. Each settle is idempotent by
//     reservation.

// meter is one request's token account.
type meter struct {
	g        *Guard
	caller   context.Context // the request's, as Admit got it: its end is the caller leaving (see callerLeft)
	key      string
	tier     policy.Tier
	answer   int // the answer's tokens a call may use: the caller's max_tokens, or DefaultMaxTokens
	estimate int // one call's reservation: the prompt at four bytes a token (an estimate, which code and CJK text can exceed), and the answer
	answers  int // the answers' share of the estimate; the rest is the prompt's

	mu       sync.Mutex
	from, to *chatapi.Request   // the caller's request, and the same held to the answer (see cap)
	first    *quota.Reservation // Admit's, for the first call; nil once a call took it
	pending  []charge           // calls that ended, settled when the request does
	finished bool

	readingOn int    // calls being read on after the caller left (readon.go)
	afterRead func() // what waits for them: the lease's release
}

// charge is what one call's reservation is settled at.
type charge struct {
	res    *quota.Reservation
	tokens int
}

// cap is c asking for no more answer than a call reserves. Every call of
// a request — retries, fail-overs, hedges — sends the same request, so it
// is made once (WithMaxTokens parses the body again).
func (m *meter) cap(c *chatapi.Request) *chatapi.Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.from != c {
		m.from, m.to = c, c.WithMaxTokens(m.answer)
	}
	return m.to
}

// take is the reservation for one call: the first call's, taken at
// admission, or a new one.
func (m *meter) take(ctx context.Context) (*quota.Reservation, error) {
	m.mu.Lock()
	res := m.first
	m.first = nil
	m.mu.Unlock()
	if res != nil {
		return res, nil
	}
	res, e := m.reserve(ctx)
	if e != nil {
		return nil, fmt.Errorf("%w: %w", llm.ErrNotSent, e)
	}
	return res, nil
}

// ended records what one call is charged, and returns it; after the
// request has finished (an abandoned call returning late) it is settled at
// once.
func (m *meter) ended(res *quota.Reservation, u *llm.Usage, err error, sentOutput bool) int {
	c := charge{res: res, tokens: tokensFor(res.Estimate(), u, err, sentOutput)}
	m.mu.Lock()
	if !m.finished {
		m.pending = append(m.pending, c)
		m.mu.Unlock()
		return c.tokens
	}
	m.mu.Unlock()
	c.settle()
	return c.tokens
}

// asUsage is what a call was charged, told as a usage (llm.Completion's
// Charged): its upstream's report when that is what it was charged, or else
// the prompt's share of the charge and the rest as the answer. A stream
// continued after a cut tells its caller the sum of its calls' charges, so
// the caller is told what the tenant pays (docs/SECURITY_AND_RUNTIME.md,
// "Token accounting").
func (m *meter) asUsage(charged int, reported *llm.Usage) *llm.Usage {
	if reported != nil && counted(reported) == charged {
		u := *reported
		u.TotalTokens = charged
		return &u
	}
	prompt := min(max(m.estimate-m.answers, 0), charged)
	return &llm.Usage{PromptTokens: prompt, CompletionTokens: charged - prompt, TotalTokens: charged}
}

// readOnStarted counts a call of this request read on after its caller
// left; readOnEnded counts it done.
func (m *meter) readOnStarted() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.readingOn++
}

func (m *meter) readOnEnded() {
	m.mu.Lock()
	m.readingOn--
	var then func()
	if m.readingOn == 0 {
		then, m.afterRead = m.afterRead, nil
	}
	m.mu.Unlock()
	if then != nil {
		then()
	}
}

// afterReadOn runs then once no call of the request is being read on:
// now, or when the last one ends. The request's in-flight lease is given
// back then, so that a tenant's calls read on count against its in-flight
// cap as the requests they were: hanging up does not free a slot while
// the upstream still works for it.
func (m *meter) afterReadOn(then func()) {
	if m != nil {
		m.mu.Lock()
		if m.readingOn > 0 {
			m.afterRead = then
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
	}
	then()
}

// finish settles every call that ended, and refunds the first reservation
// if no call took it. A nil meter has nothing to settle.
func (m *meter) finish() {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.finished = true
	pending := m.pending
	if m.first != nil {
		pending = append(pending, charge{res: m.first}) // no call was made: a full refund
		m.first = nil
	}
	m.pending = nil
	m.mu.Unlock()
	for _, c := range pending {
		c.settle()
	}
}

func (c charge) settle() {
	// An absurd usage report is held to the most a settle takes (and then
	// to the debt limit), not refused, which would leave the estimate.
	detached(func(ctx context.Context) { _ = c.res.Settle(ctx, min(c.tokens, quota.MaxPerMinute)) })
}

// tokensFor is what a call is charged, by the rules above.
func tokensFor(reserved int, u *llm.Usage, err error, sentOutput bool) int {
	return quotas.Charge(outcomeOf(err, sentOutput), reserved, counted(u))
}

// outcomeOf is how a call ended, in lab 12's terms: answered; never sent
// or refused (see neverReached) — unless some of its answer went out,
// which only a call the upstream took can have done; or broken.
func outcomeOf(err error, sentOutput bool) quotas.Outcome {
	switch {
	case err == nil:
		return quotas.Answered
	case !sentOutput && neverReached(err):
		return quotas.NotSent
	}
	return quotas.Broken
}

// counted is what a usage report says was used: total_tokens, or the
// prompt and completion tokens when they add up to more (an upstream may
// leave the total out, or report it short). A report that counts nothing
// — {}, another schema's names, negative or absurd numbers — is 0: no
// report, so the call keeps its reservation.
func counted(u *llm.Usage) int {
	if u == nil {
		return 0
	}
	part := func(n int) int { return min(max(n, 0), quota.MaxPerMinute) } // no overflow below
	return max(part(u.TotalTokens), part(u.PromptTokens)+part(u.CompletionTokens))
}

// neverReached reports whether a failed call provably cost the upstream
// nothing: its connection was never made, or the upstream answered with a
// status other than 2xx — its own, not an error object it sent in a 200.
func neverReached(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	if ue, ok := errors.AsType[*chatapi.UpstreamError](err); ok && ue.InBody {
		return false
	}
	s := llm.StatusOf(err)
	return s != 0 && (s < 200 || s > 299)
}

// Call runs one upstream call of the request through the meter:
// llm.Meter, which llm.Metered calls. It reserves for the call, asks the
// upstream for no more answer than reserved, and records what the call is
// charged; a stream that failed after it sent output is charged at least
// its reservation, whatever its error.
func (m *meter) Call(ctx context.Context, req llm.Request, emit func(llm.Chunk) error, call llm.Call) (llm.Completion, error) {
	req.Chat = m.cap(req.Chat) // before the reservation: nothing between it and ended may panic
	res, err := m.take(ctx)
	if err != nil {
		return llm.Completion{}, err
	}
	return m.g.call(ctx, m, res, emit, func(ctx context.Context, relay func(llm.Chunk) error) (llm.Completion, error) {
		return call(ctx, req, relay) // a panic in the call comes back as llm.ErrPanic
	})
}
