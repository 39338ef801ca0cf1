// Package bridge runs blocking calls — a library that takes no context, or
// ignores it — with a concurrency bound that counts the work actually
// running, not the callers still waiting for it.
//
// A goroutine cannot be killed. When a caller's context ends, the caller can
// stop waiting, but the blocking call it started runs to its own end. If the
// caller owned the concurrency permit, the permit would come back the moment
// the caller left, and new work would pile onto a dependency that is still
// busy with the old. Here the permit belongs to the call: it is held from the
// moment fn starts until fn returns, however long the caller waits, and it
// is never lost on the way nor returned twice.
//
// The call gets the caller's context values but not its cancellation or its
// deadline: ending the caller must not half-cancel work that is going to run
// anyway. Bound the work itself with WithWorkTimeout and, better,
// with the library's own timeouts. Outcomes that arrive after their caller
// left are reported to WithOnLate, never dropped.
//
// Lab 06: the errors, Outcome and the options are given; write the Bridge.
// Read README.md, then make `make lab-06` green.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrClosed is returned by Call after Close.
	ErrClosed = errors.New("bridge: closed")
	// ErrPanic is wrapped by the error a Call returns when fn panicked.
	ErrPanic = errors.New("bridge: call panicked")
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("bridge: invalid config")
	// ErrNotImplemented is what the stubs return until you write them.
	ErrNotImplemented = errors.New("lab 06: not implemented yet")
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
//
// TODO(lab 06): the fields you need besides the two the options set.
type Bridge struct {
	onLate      func(Outcome)
	workTimeout time.Duration
}

// New returns a Bridge that runs at most capacity calls at once.
//
// TODO(lab 06): capacity < 1 → an error wrapping ErrInvalidConfig; apply the
// options, returning the first error.
func New(capacity int, opts ...Option) (*Bridge, error) {
	return &Bridge{}, nil
}

// Call runs fn on its own goroutine once a permit is free, and waits for its
// result or for ctx to end.
//
// TODO(lab 06):
//   - after Close → ErrClosed; ctx already ended, or ends while waiting for a
//     permit → ctx.Err(), and fn never starts — not even when a permit was
//     free at that instant;
//   - a permit is held from fn's start until fn returns, whoever still
//     waits for it: never lost on the way, never returned twice;
//   - fn's context carries ctx's values but neither its cancellation nor its
//     deadline, plus WithWorkTimeout's deadline, measured from when fn starts;
//   - the caller returns ctx.Err() as soon as ctx ends; fn keeps running;
//   - an outcome that finishes after its caller left goes to WithOnLate's
//     function (ID, Err, Duration of fn alone); each outcome reaches exactly
//     one of the caller and that function, even when fn returns as the
//     caller's ctx ends;
//   - a panic in fn becomes an error wrapping ErrPanic, and the permit still comes back.
func Call[T any](ctx context.Context, b *Bridge, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	return zero, ErrNotImplemented
}

// Pending is the number of calls whose fn is running now (abandoned ones
// included, waiting callers not).
func (b *Bridge) Pending() int {
	return -1
}

// Close rejects new calls (and callers still waiting for a permit) with
// ErrClosed, then waits for running calls to return and their late outcomes
// to be reported, or for ctx.
//
// TODO(lab 06): close even when ctx has already ended; fail (wrapping
// ctx.Err()) only if calls are still running when ctx ends: with nothing
// running, return nil whatever ctx's state. Calling Close again is safe.
func (b *Bridge) Close(ctx context.Context) error {
	return ErrNotImplemented
}
