// Package bridge runs blocking calls — a library that takes no context, or
// ignores it — with a concurrency bound that counts the work actually
// running, not the callers still waiting for it.
//
// A goroutine cannot be killed. When a caller's context ends, the caller can
// stop waiting, but the blocking call it started runs to its own end. If the
// caller owned the concurrency permit, the permit would come back the moment
// the caller left, and new work would pile onto a dependency that is still
// busy with the old. Here the permit is handed, with nothing in between that
// could lose it, to the goroutine that runs the call, and only that goroutine
// gives it back, when the call returns.
//
// The call gets the caller's context values but not its cancellation
// (context.WithoutCancel): ending the caller must not half-cancel work that
// is going to run anyway. Bound the work itself with WithWorkTimeout and, better,
// with the library's own timeouts. Outcomes that arrive after their caller
// left are reported to WithOnLate, never dropped.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrClosed is returned by Call after Close.
	ErrClosed = errors.New("bridge: closed")
	// ErrPanic is wrapped by the error a Call returns when fn panicked.
	ErrPanic = errors.New("bridge: call panicked")
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("bridge: invalid config")
)

// Outcome is how one call ended, for calls whose caller had already left.
type Outcome struct {
	ID       uint64        // unique per Bridge
	Err      error         // nil if the call succeeded (nobody used the result)
	Duration time.Duration // from when fn started to when it returned (the wait for a permit not included)
}

// Option configures a Bridge.
type Option func(*Bridge) error

// WithOnLate sets a function called with the outcome of every call that
// finished after its caller stopped waiting. It runs on the call's goroutine
// after the permit is returned; keep it quick (record a metric, log).
func WithOnLate(f func(Outcome)) Option {
	return func(b *Bridge) error {
		b.onLate = f
		return nil
	}
}

// WithWorkTimeout gives each call's context a deadline d after fn starts.
// The permit is still held until fn actually returns.
func WithWorkTimeout(d time.Duration) Option {
	return func(b *Bridge) error {
		if d < 0 {
			return fmt.Errorf("%w: work timeout %s must not be negative", ErrInvalidConfig, d)
		}
		b.workTimeout = d
		return nil
	}
}

// Bridge bounds how many blocking calls run at once.
type Bridge struct {
	permits     chan struct{}
	onLate      func(Outcome)
	workTimeout time.Duration
	ids         atomic.Uint64
	running     atomic.Int64 // fn calls in progress: Pending

	mu      sync.Mutex
	workers int // goroutines not yet finished (fn plus reporting)
	closed  bool
	closing chan struct{} // closed by Close: wakes callers waiting for a permit
	idle    chan struct{} // closed when closed and workers reaches 0
}

// New returns a Bridge that runs at most capacity calls at once.
func New(capacity int, opts ...Option) (*Bridge, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("%w: capacity %d must be at least 1", ErrInvalidConfig, capacity)
	}
	b := &Bridge{permits: make(chan struct{}, capacity), closing: make(chan struct{}), idle: make(chan struct{})}
	for _, o := range opts {
		if err := o(b); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// call is one Call's shared state between the caller and the worker.
type call[T any] struct {
	mu        sync.Mutex
	abandoned bool // the caller left before the result
	finished  bool // the worker has a result for the caller
	result    chan result[T]
}

type result[T any] struct {
	v   T
	err error
}

// Call runs fn on its own goroutine once a permit is free, and waits for its
// result or for ctx to end. If ctx has already ended, or ends while waiting
// for a permit, fn never starts. If ctx ends while fn runs, Call returns
// ctx.Err() at once and fn keeps running — and keeps its permit — until it
// returns; its outcome then goes to WithOnLate, and reaches exactly one of the
// caller and WithOnLate even when both happen in the same instant. fn's
// context has the caller's values but neither its cancellation nor its
// deadline. A panic in fn becomes an error wrapping ErrPanic.
func Call[T any](ctx context.Context, b *Bridge, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if err := b.enter(); err != nil {
		return zero, err
	}
	// A caller that has already left starts nothing. The select below cannot
	// promise that: with a free permit and a done ctx it picks at random.
	if err := ctx.Err(); err != nil {
		b.exit()
		return zero, err
	}
	select {
	case b.permits <- struct{}{}:
	case <-ctx.Done():
		b.exit()
		return zero, ctx.Err()
	case <-b.closing:
		b.exit()
		return zero, ErrClosed
	}
	// The permit now belongs to the worker goroutine: no statement between
	// acquiring it and starting the worker can fail or wait.
	c := &call[T]{result: make(chan result[T], 1)}
	go work(b, ctx, c, fn)

	select {
	case r := <-c.result:
		return r.v, r.err
	case <-ctx.Done():
		c.mu.Lock()
		if c.finished { // finished in the same instant: the result is ours
			c.mu.Unlock()
			r := <-c.result
			return r.v, r.err
		}
		c.abandoned = true
		c.mu.Unlock()
		return zero, ctx.Err()
	}
}

// work runs fn and owns the permit until fn returns.
func work[T any](b *Bridge, callerCtx context.Context, c *call[T], fn func(context.Context) (T, error)) {
	defer b.exit()
	id := b.ids.Add(1)
	b.running.Add(1)
	start := time.Now()
	v, err := runFn(callerCtx, b.workTimeout, id, fn)
	elapsed := time.Since(start)
	b.running.Add(-1)
	<-b.permits // fn has returned: only now is the capacity free

	c.mu.Lock()
	late := c.abandoned
	c.finished = !late
	c.mu.Unlock()
	if !late {
		c.result <- result[T]{v, err}
		return
	}
	if b.onLate != nil {
		b.onLate(Outcome{ID: id, Err: err, Duration: elapsed})
	}
}

// runFn calls fn with the caller's values but not its cancellation, under
// the work timeout, turning a panic into an error.
func runFn[T any](callerCtx context.Context, timeout time.Duration, id uint64, fn func(context.Context) (T, error)) (v T, err error) {
	ctx := context.WithoutCancel(callerCtx)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: call %d: %v", ErrPanic, id, r)
		}
	}()
	return fn(ctx)
}

// enter counts a worker-to-be; it fails once the bridge is closed.
func (b *Bridge) enter() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	b.workers++
	return nil
}

func (b *Bridge) exit() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.workers--
	if b.closed && b.workers == 0 {
		close(b.idle)
	}
}

// Pending is the number of calls whose fn is running now — abandoned ones
// included, waiting callers not.
func (b *Bridge) Pending() int { return int(b.running.Load()) }

// Close rejects new calls (and calls still waiting for a permit) with
// ErrClosed, then waits for running calls to return and their late outcomes
// to be reported, or for ctx. It closes even when ctx has already ended, and
// fails only if calls are still running when ctx ends: with nothing running
// it returns nil whatever ctx's state. Calling it again waits again.
func (b *Bridge) Close(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		close(b.closing)
		if b.workers == 0 {
			close(b.idle)
		}
	}
	b.mu.Unlock()
	select {
	case <-b.idle: // nothing running: done, whatever state ctx is in
		return nil
	default:
	}
	select {
	case <-b.idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("bridge: close: %d calls still running: %w", b.Pending(), ctx.Err())
	}
}
