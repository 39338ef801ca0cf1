// Package concurrency runs a batch of calls concurrently with a bound on how
// many run at once, in the two shapes a gateway needs.
//
// FanOut is all-or-nothing: the first failure cancels the rest, nothing new
// starts, and FanOut returns only after every call it started has returned.
// CollectAll is best-effort: a failure cancels nothing, every outcome is kept
// in input order, and items that never started because the caller gave up
// carry the caller's ctx.Err().
//
// Lab 01: read README.md, then make `make lab-01` green.
package concurrency

import (
	"context"
	"errors"
)

// ErrNotImplemented is what the stubs return until you write them.
var ErrNotImplemented = errors.New("lab 01: not implemented yet")

// ErrInvalidLimit is returned (or carried in every Result) when limit < 1.
var ErrInvalidLimit = errors.New("concurrency: limit must be at least 1")

// Result is the outcome of one CollectAll call: the value fn returned, or its
// error, or the caller's ctx.Err() when the item never started.
type Result[R any] struct {
	Value R
	Err   error
}

// FanOut calls fn for every item with at most limit calls in flight.
//
// TODO(lab 01): make these true, one test at a time:
//   - limit < 1 is refused with an error wrapping ErrInvalidLimit, fn never called;
//   - never more than limit calls at once, and a slot is reused as soon as a call returns;
//   - the first error to happen (any error, a context error from fn's own timeout
//     too) cancels the ctx every other call received and no new call starts;
//   - FanOut returns that first error, and only after every started call has returned;
//   - if the caller's ctx ends, no new call starts, the started ones are still
//     waited for, and FanOut returns ctx.Err(); a ctx already done starts nothing.
func FanOut[T any](ctx context.Context, items []T, limit int, fn func(context.Context, T) error) error {
	return ErrNotImplemented
}

// CollectAll calls fn for every item with at most limit calls in flight and
// returns one Result per item, in input order.
//
// TODO(lab 01): make these true:
//   - one Result per item, results[i] belongs to items[i] whatever order calls finish in;
//   - a failing call cancels nothing: the others run to their own end;
//   - the caller's cancellation or deadline reaches every running call;
//   - never more than limit calls at once;
//   - items not started when ctx ends carry ctx.Err() (whichever it is); started
//     calls are waited for; a ctx already done starts nothing;
//   - limit < 1: every Result carries an error wrapping ErrInvalidLimit, fn never called.
func CollectAll[T, R any](ctx context.Context, items []T, limit int, fn func(context.Context, T) (R, error)) []Result[R] {
	return nil
}
