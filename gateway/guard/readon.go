package guard

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/quota"
)

// A call whose caller hangs up is read on for its bill.
//
// Lab 08 teaches that a caller who leaves stops the upstream call: nobody
// reads the answer, so nobody should pay for the rest of it. Under a token
// quota that rule meets another, which wins: a tenant never pays less than
// the upstreams billed for its calls. An upstream bills the prompt as it
// counted it and the answer it wrote, and only its usage report says how
// much that was — the gateway's estimate counts a prompt at four bytes a
// token, which dense text (code, CJK, base64) outruns, and cannot price a
// file part at all. A tenant who hung up after five deltas was charged the
// reservation: a fraction of the bill for a prompt of files.
//
// So a metered call whose caller hangs up is not cut: it is read on,
// detached from the request, until the upstream ends it with its usage,
// and charged that. Its answer goes nowhere. The upstream writes no more
// than the call reserved (Meter asks for no more), so the tenant pays the
// bill and the operator pays for nothing it is not paid for. It is
// bounded: Config.ReadOnTime and ReadOnBytes per call, MaxReadOn calls at
// once per guard; past a bound the call is cut and charged its reservation,
// as before. Only the caller's leaving detaches a call — not a hedge's
// loser, an attempt's timeout, a silent stream or the tier's deadline,
// which the gateway cut for reasons of its own — and without a token quota
// (production_app, a tier without tokens_per_minute) lab 08's rule stands.
// Observer.ReadOn counts each outcome.

// The bounds of reading on, when Config leaves them 0.
const (
	// DefaultReadOnTime bounds how long a call is read on after its caller
	// left: an answer of DefaultMaxTokens streams in well under it.
	DefaultReadOnTime = 30 * time.Second
	// DefaultReadOnBytes bounds how much of it is read after its caller
	// left.
	DefaultReadOnBytes = 4 << 20
	// DefaultMaxReadOn bounds the calls read on at once by one guard; past
	// it, a call whose caller left is cut at once.
	DefaultMaxReadOn = 256
)

// ReadOnOutcome is how a call read on after its caller left ended.
type ReadOnOutcome string

// The outcomes Observer.ReadOn is given.
const (
	// ReadOnBilled: the upstream reported its usage; the call is charged it.
	ReadOnBilled ReadOnOutcome = "billed"
	// ReadOnUnbilled: the call ended, or reached Config.ReadOnTime or
	// ReadOnBytes, with no usage; it is charged its reservation.
	ReadOnUnbilled ReadOnOutcome = "unbilled"
	// ReadOnRefused: Config.MaxReadOn calls were being read on already (or
	// the guard was closing); the call was cut at once.
	ReadOnRefused ReadOnOutcome = "refused"
)

// ReadOnOutcomes lists every ReadOnOutcome, for metrics that start each
// series at 0.
var ReadOnOutcomes = []ReadOnOutcome{ReadOnBilled, ReadOnUnbilled, ReadOnRefused}

// errReadOnBound ends a call read on past one of its bounds.
var errReadOnBound = errors.New("guard: a call read on for its bill reached its bound")

// errClosing ends the calls read on when the guard closes.
var errClosing = errors.New("guard: closing")

// readOn is the guard's calls: every metered call runs on a goroutine of
// its own here, so that one whose caller leaves can go on without it.
type readOn struct {
	time    time.Duration // per call
	bytes   int           // per call
	max     int           // at once
	wg      sync.WaitGroup
	mu      sync.Mutex
	closed  bool
	reading map[*upcall]struct{} // the calls being read on
}

// start runs call on a goroutine the guard waits for, unless it is
// closing.
func (r *readOn) start(call func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Go(call)
	return true
}

// take makes c one of the calls read on, if there is room.
func (r *readOn) take(c *upcall) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || len(r.reading) >= r.max {
		return false
	}
	if r.reading == nil {
		r.reading = map[*upcall]struct{}{}
	}
	r.reading[c] = struct{}{}
	return true
}

func (r *readOn) leave(c *upcall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.reading, c)
}

// close cuts every call being read on and waits for every call.
func (r *readOn) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.reading {
		c.cancel(errClosing)
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// upcall is one metered upstream call: the caller's emit, until the
// caller leaves.
type upcall struct {
	r      *readOn
	cancel context.CancelCauseFunc
	emit   func(llm.Chunk) error // nil for a whole answer

	mu       sync.Mutex // held while a chunk goes to the caller: no chunk after detach returns
	sent     bool       // a chunk reached the caller
	finished bool       // a chunk with a finish reason came: the answer was whole
	detached bool       // the caller left: chunks go nowhere
	ended    bool       // the call returned
	read     int        // bytes read since detached
	bound    *time.Timer
}

// relay is the emit the provider is given.
func (c *upcall) relay(ch llm.Chunk) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, err := llm.PieceOf(ch); err == nil && p.Finish != "" {
		c.finished = true
	}
	if c.detached {
		c.read += len(ch.Raw)
		if c.read > c.r.bytes {
			return errReadOnBound
		}
		return nil
	}
	c.sent = true
	err := c.emit(ch)
	if errors.Is(err, llm.ErrCallerGone) {
		return nil // read on, or be cut: the request's goroutine decides once its context ends
	}
	return err
}

// detach lets the call go on without its caller, unless it has ended; m
// counts it until it does (see meter.afterReadOn).
func (c *upcall) detach(m *meter) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return false
	}
	m.readOnStarted()
	c.detached = true
	c.bound = time.AfterFunc(c.r.time, func() { c.cancel(errReadOnBound) })
	return true
}

// end marks the call returned and reports whether it had been detached,
// whether any of it reached the caller, and whether its answer finished.
func (c *upcall) end() (detached, sent, finished bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.bound != nil {
		c.bound.Stop()
	}
	return c.detached, c.sent, c.finished
}

// callerLeft reports whether ctx ended because the caller left: the
// router's word for it, or the request's own context canceled (a client
// that hung up) — not a deadline, a hedge's loser or a watchdog.
func (m *meter) callerLeft(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), llm.ErrCallerGone) ||
		m.caller.Err() != nil && errors.Is(context.Cause(m.caller), context.Canceled)
}

// call makes one metered call, do, on a goroutine of its own, and charges
// it when it returns; if the caller leaves first, the call is read on for
// its bill (above) and call returns at once.
func (g *Guard) call(ctx context.Context, m *meter, res *quota.Reservation, emit func(llm.Chunk) error,
	do func(context.Context, func(llm.Chunk) error) (llm.Completion, error)) (llm.Completion, error) {
	callCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx)) // run cancels it when the call returns
	c := &upcall{r: &g.readOn, cancel: cancel, emit: emit}
	var comp llm.Completion
	var err error
	done := make(chan struct{})
	run := func() {
		defer close(done)
		comp, err = do(callCtx, c.relay)
		detached, sent, finished := c.end()
		cancel(nil)
		ended := err
		if finished {
			ended = nil // the answer was whole: charged as answered, whoever closed it after
		}
		comp.Charged = m.asUsage(m.ended(res, comp.Usage, ended, sent), comp.Usage)
		if detached {
			g.readOn.leave(c)
			m.readOnEnded()
			outcome := ReadOnUnbilled
			if counted(comp.Usage) > 0 {
				outcome = ReadOnBilled
			}
			g.cfg.Observer.ReadOn(outcome)
		}
	}
	if !g.readOn.start(run) {
		run() // closing: no call outlives its request now
		return comp, err
	}
	select {
	case <-done:
		return comp, err
	case <-ctx.Done():
	}
	cause := context.Cause(ctx)
	switch {
	case !m.callerLeft(ctx):
		cancel(cause) // cut by the gateway (a deadline, a watchdog, a hedge's loser): lab 08's rule
	case !g.readOn.take(c):
		g.cfg.Observer.ReadOn(ReadOnRefused)
		cancel(cause)
	case c.detach(m):
		return llm.Completion{}, cause // read on, charged when it ends
	default:
		g.readOn.leave(c) // it had returned already: charged as it ended
	}
	<-done
	if errors.Is(err, context.Canceled) && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// The call saw its own context canceled; its caller's ended as it
		// did — a deadline is a timeout, for the retry loop and the breaker.
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return comp, err
}
