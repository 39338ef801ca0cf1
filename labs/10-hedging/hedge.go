// Package hedging cuts tail latency with hedged requests and keeps retries
// from multiplying an outage with a retry budget.
//
// A hedge is a second attempt, on the next target, started because the
// first is slower than usual — a fixed delay, or a percentile of the
// target's recent latency — not because it failed. The first success wins;
// the loser is cancelled and waited for, so no goroutine outlives Do and the
// loser's slot (a connection, a semaphore permit) is back before Do returns.
//
// Every extra attempt — a hedge or a retry — spends the retry Budget of the
// target it goes to. The budget allows a fraction of that target's recent
// requests plus a small floor per second (Finagle's model), so when a
// provider is down a fleet adds at most that fraction of load on top of its
// traffic, however many replicas retry. An exhausted budget ends the request
// at once with the last error.
//
// A request that must not run twice (a non-idempotent write; a stream whose
// first byte has reached the client) is marked with NonIdempotent and gets
// exactly one attempt.
//
// Lab 10: write the budget in budget.go and Do in hedge.go (latency.go, the
// percentile window, is given). Read README.md, then make `make lab-10` green.
package hedging

import (
	"context"
	"errors"
	"time"
)

// ErrNoTargets is returned by Do when it is given no target to call.
var ErrNoTargets = errors.New("hedging: no targets")

// Config says when to hedge and how many extra attempts a request may make.
type Config struct {
	// Delay is how long an attempt may run before a hedge starts (> 0 when
	// MaxHedges > 0). With Percentile set it is the delay used until a
	// target's latency window is full.
	Delay time.Duration
	// Percentile, in (0, 1), hedges at that percentile of the target's last
	// LatencyWindow successful latencies instead of at Delay. 0: always Delay.
	Percentile float64
	// LatencyWindow is how many recent successful latencies per target the
	// percentile is taken over (≥ 1 when Percentile is set).
	LatencyWindow int
	// MaxHedges is the most hedges one request starts (≥ 0; 0: never hedge).
	MaxHedges int
	// MaxRetries is the most attempts one request starts after a failure,
	// when no other attempt of it is still running (≥ 0).
	MaxRetries int
	// Budget, if not nil, must allow every hedge and retry.
	Budget *Budget
}

// Hedger runs requests under one Config. It is safe for concurrent use.
type Hedger struct {
	cfg Config
	lat latencies // the latency window (latency.go, given); TODO(lab 10): New sets it up for cfg.LatencyWindow
}

// New returns a Hedger, or an error wrapping ErrInvalidConfig.
//
// TODO(lab 10): refuse negative Delay, MaxHedges, MaxRetries or
// LatencyWindow; MaxHedges > 0 with no Delay; a Percentile outside [0, 1);
// a Percentile with no LatencyWindow.
func New(cfg Config) (*Hedger, error) {
	return nil, ErrNotImplemented
}

type nonIdempotentKey struct{}

// NonIdempotent marks ctx's request as one that must not run twice: Do
// neither hedges nor retries it.
func NonIdempotent(ctx context.Context) context.Context {
	return context.WithValue(ctx, nonIdempotentKey{}, true)
}

func isNonIdempotent(ctx context.Context) bool {
	v, _ := ctx.Value(nonIdempotentKey{}).(bool)
	return v
}

// delay is when to hedge an attempt on target (given).
func (h *Hedger) delay(target string) time.Duration {
	if h.cfg.Percentile > 0 {
		if d, ok := h.lat.percentile(target, h.cfg.Percentile); ok {
			return d
		}
	}
	return h.cfg.Delay
}

// Do calls call on targets[0] and returns the first success of it, its
// hedges and its retries. Attempt k goes to targets[k mod len(targets)].
//
// TODO(lab 10): make these true:
//   - no targets → ErrNoTargets; ctx already done → its error, no attempt;
//   - one Deposit to targets[0]'s budget per request; one Withdraw from the
//     receiving target's budget per hedge or retry, before it starts;
//   - a hedge starts when the newest attempt has run for the hedge delay
//     (Delay, or the target's observed Percentile once its window is full);
//     at most MaxHedges; a budget that refuses one means no hedge;
//   - a failure while another attempt runs waits for that attempt; a
//     failure with none running is retried at once (at most MaxRetries), or
//     ends the request wrapping the last error — with ErrBudgetExhausted if
//     the budget refused the retry;
//   - a request marked NonIdempotent gets one attempt: no hedge, no retry;
//   - every attempt runs under ctx: the same deadline, the same
//     cancellation; when ctx ends, Do returns at once wrapping ctx.Err();
//   - before Do returns, every attempt still running is cancelled and
//     waited for; a success records its latency (h.lat.observe).
func Do[R any](ctx context.Context, h *Hedger, targets []string, call func(ctx context.Context, target string) (R, error)) (R, error) {
	var zero R
	_, _, _ = isNonIdempotent, (*Hedger).delay, (*latencies).observe // TODO(lab 10): use them
	return zero, ErrNotImplemented
}
