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
// Lab 10: write the budget in budget.go and Do in hedge.go. Read README.md,
// then make `make lab-10` green.
package hedging

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	lat latencies
}

// New returns a Hedger, or an error wrapping ErrInvalidConfig.
func New(cfg Config) (*Hedger, error) {
	switch {
	case cfg.Delay < 0 || cfg.MaxHedges < 0 || cfg.MaxRetries < 0 || cfg.LatencyWindow < 0:
		return nil, fmt.Errorf("%w: Delay, MaxHedges, MaxRetries and LatencyWindow must not be negative", ErrInvalidConfig)
	case cfg.MaxHedges > 0 && cfg.Delay == 0:
		return nil, fmt.Errorf("%w: hedging needs a Delay (the fallback, with Percentile)", ErrInvalidConfig)
	case !(cfg.Percentile >= 0 && cfg.Percentile < 1):
		return nil, fmt.Errorf("%w: Percentile must be in [0, 1), got %v", ErrInvalidConfig, cfg.Percentile)
	case cfg.Percentile > 0 && cfg.LatencyWindow == 0:
		return nil, fmt.Errorf("%w: Percentile needs a LatencyWindow", ErrInvalidConfig)
	}
	return &Hedger{cfg: cfg, lat: latencies{n: cfg.LatencyWindow, by: make(map[string]*ring)}}, nil
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

// delay is when to hedge an attempt on target.
func (h *Hedger) delay(target string) time.Duration {
	if h.cfg.Percentile > 0 {
		if d, ok := h.lat.percentile(target, h.cfg.Percentile); ok {
			return d
		}
	}
	return h.cfg.Delay
}

type outcome[R any] struct {
	v      R
	err    error
	target string
	took   time.Duration
}

// Do calls call on targets[0] and returns the first success of it, its
// hedges and its retries. Attempt k goes to targets[k mod len(targets)].
//
//   - One Deposit to targets[0]'s budget per request; one Withdraw from the
//     receiving target's budget per hedge or retry, before it starts.
//   - A hedge starts when the newest attempt has run for the hedge delay; at
//     most MaxHedges; a budget that refuses one means no hedge.
//   - A failure while another attempt runs waits for that attempt. A
//     failure with none running is retried at once (at most MaxRetries), or
//     ends the request wrapping the last error — with ErrBudgetExhausted if
//     the budget refused the retry.
//   - Every attempt runs under ctx: the same deadline, the same
//     cancellation. When ctx ends, Do returns wrapping ctx.Err().
//   - Before Do returns, every attempt still running is cancelled and
//     waited for.
func Do[R any](ctx context.Context, h *Hedger, targets []string, call func(ctx context.Context, target string) (R, error)) (R, error) {
	var zero R
	if len(targets) == 0 {
		return zero, ErrNoTargets
	}
	if err := ctx.Err(); err != nil {
		return zero, fmt.Errorf("hedging: no attempt: %w", err)
	}
	h.cfg.Budget.Deposit(targets[0])
	rq := newRequest(ctx, h, targets, call)
	defer rq.stop() // nothing outlives Do, whichever way it returns

	rq.launch()
	for { // wait for whichever comes first: an outcome, the hedge timer, the end of ctx
		select {
		case o := <-rq.results:
			rq.inFlight--
			if o.err == nil {
				h.lat.observe(o.target, o.took)
				return o.v, nil
			}
			if err := rq.afterFailure(o.err); err != nil {
				return zero, err
			}
		case <-rq.hedgeC:
			rq.hedge()
		case <-ctx.Done():
			return zero, rq.interrupted()
		}
	}
}

// request is one call of Do: its attempts, their outcomes, and the hedge
// timer. Its methods are Do's steps: launch an attempt (and arm the hedge
// timer), hedge, decide what a failure leads to, stop the losers. Only Do's
// goroutine touches it; an attempt's goroutine only sends on results.
type request[R any] struct {
	ctx       context.Context
	h         *Hedger
	targets   []string
	call      func(ctx context.Context, target string) (R, error)
	mayRepeat bool // false for a NonIdempotent request: one attempt, no hedge, no retry

	results           chan outcome[R] // one slot per attempt it may start: a sender never blocks
	wg                sync.WaitGroup
	cancels           []context.CancelFunc
	started, inFlight int
	hedges, retries   int
	last              error // the newest attempt error

	timer  *time.Timer
	hedgeC <-chan time.Time // the timer's channel while a hedge is due; nil (never ready) otherwise
}

func newRequest[R any](ctx context.Context, h *Hedger, targets []string, call func(ctx context.Context, target string) (R, error)) *request[R] {
	mayRepeat := !isNonIdempotent(ctx)
	maxAttempts := 1
	if mayRepeat {
		maxAttempts += h.cfg.MaxHedges + h.cfg.MaxRetries
	}
	return &request[R]{
		ctx: ctx, h: h, targets: targets, call: call, mayRepeat: mayRepeat,
		results: make(chan outcome[R], maxAttempts),
	}
}

// next is the target the next attempt goes to.
func (rq *request[R]) next() string { return rq.targets[rq.started%len(rq.targets)] }

// launch starts the next attempt on a goroutine of its own, under a context
// derived from the caller's, and arms the hedge timer for it.
func (rq *request[R]) launch() {
	target := rq.next()
	actx, cancel := context.WithCancel(rq.ctx) // the caller's deadline, and ours to cancel
	rq.cancels = append(rq.cancels, cancel)
	rq.started++
	rq.inFlight++
	rq.wg.Go(func() {
		t0 := time.Now()
		v, err := rq.call(actx, target)
		rq.results <- outcome[R]{v: v, err: err, target: target, took: time.Since(t0)}
	})
	rq.armHedge(target)
}

// armHedge makes the hedge due when the attempt just started on target has
// run for the hedge delay, or never when no hedge is left.
func (rq *request[R]) armHedge(target string) {
	if !rq.mayRepeat || rq.hedges >= rq.h.cfg.MaxHedges {
		rq.hedgeC = nil // a nil channel is never ready: no hedge
		return
	}
	d := rq.h.delay(target)
	if rq.timer == nil {
		rq.timer = time.NewTimer(d)
	} else {
		rq.timer.Reset(d)
	}
	rq.hedgeC = rq.timer.C
}

// hedge runs when the newest attempt is slow: it launches the next one if
// the receiving target's budget allows. A refusal just means no hedge.
func (rq *request[R]) hedge() {
	rq.hedgeC = nil
	if rq.h.cfg.Budget.Withdraw(rq.next()) {
		rq.hedges++
		rq.launch()
	}
}

// afterFailure decides what a failed attempt leads to: waiting for another
// attempt still running, a retry on the next target, or — when it returns
// an error — the end of the request.
func (rq *request[R]) afterFailure(err error) error {
	rq.last = err
	if rq.ctx.Err() != nil {
		return rq.interrupted() // the context's doing, not the attempt's
	}
	if rq.inFlight > 0 {
		return nil // another attempt may still succeed
	}
	if !rq.mayRepeat || rq.retries == rq.h.cfg.MaxRetries {
		return fmt.Errorf("hedging: %d attempts failed: %w", rq.started, rq.last)
	}
	if !rq.h.cfg.Budget.Withdraw(rq.next()) {
		return fmt.Errorf("%w after %d attempts: %w", ErrBudgetExhausted, rq.started, rq.last)
	}
	rq.retries++
	rq.launch()
	return nil
}

// interrupted is the error once ctx has ended: ctx.Err() itself, so a
// cancel never reads as a deadline, and the last attempt's error if any.
func (rq *request[R]) interrupted() error {
	if rq.last != nil {
		return fmt.Errorf("hedging: %w (last attempt: %w)", rq.ctx.Err(), rq.last)
	}
	return fmt.Errorf("hedging: %w", rq.ctx.Err())
}

// stop collects the losers: it cancels every attempt still running, then
// waits for each to report and for its goroutine to end, so an attempt's
// slot (a connection, a permit) is back before Do returns.
func (rq *request[R]) stop() {
	if rq.timer != nil {
		rq.timer.Stop()
	}
	for _, cancel := range rq.cancels {
		cancel()
	}
	for ; rq.inFlight > 0; rq.inFlight-- {
		<-rq.results // an attempt still running reports when its call returns
	}
	rq.wg.Wait() // and its goroutine has ended
}
