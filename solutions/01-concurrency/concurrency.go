// Package concurrency runs a batch of calls concurrently with a bound on how
// many run at once, in the two shapes a gateway needs.
//
// FanOut is all-or-nothing: the first failure cancels the rest, nothing new
// starts, and FanOut returns only after every call it started has returned.
// That last rule is what makes it structured: no goroutine outlives the call
// that started it, so nothing leaks and nothing writes to memory the caller
// has already reused.
//
// CollectAll is best-effort: a failure cancels nothing, every outcome is kept
// in input order, and items that never started because the caller gave up
// carry the caller's ctx.Err().
//
// Both take limit, the most calls in flight at once. A goroutine is cheap, but
// the thing it talks to (a model provider, a database) is not: the limit is
// how much load this batch may put on it.
package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// ErrInvalidLimit is returned (or carried in every Result) when limit < 1.
var ErrInvalidLimit = errors.New("concurrency: limit must be at least 1")

// Result is the outcome of one CollectAll call: the value fn returned, or its
// error, or the caller's ctx.Err() when the item never started.
type Result[R any] struct {
	Value R
	Err   error
}

// FanOut calls fn for every item with at most limit calls in flight. The first
// error to happen (any error, a context error from fn's own timeout too)
// cancels the context the other calls received, stops new calls from
// starting, and is returned once every started call has returned. If the
// caller's ctx ends first, FanOut stops starting calls, waits for the started
// ones and returns ctx.Err(); a ctx that has already ended starts nothing.
func FanOut[T any](ctx context.Context, items []T, limit int, fn func(context.Context, T) error) error {
	if limit < 1 {
		return fmt.Errorf("FanOut: limit %d: %w", limit, ErrInvalidLimit)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	slots := make(chan struct{}, limit)
	for _, item := range items {
		if !acquire(ctx, slots) {
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := fn(ctx, item); err != nil {
				// Only the first error counts: the siblings' errors are
				// mostly the cancellation this very call causes.
				once.Do(func() {
					first = err
					cancel()
				})
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return parent.Err()
}

// CollectAll calls fn for every item with at most limit calls in flight and
// returns one Result per item, in input order. A failing call cancels nothing,
// but every call gets ctx itself, so the caller's cancellation or deadline
// reaches the running calls. Items not started when ctx ends get ctx.Err();
// started calls are waited for.
func CollectAll[T, R any](ctx context.Context, items []T, limit int, fn func(context.Context, T) (R, error)) []Result[R] {
	results := make([]Result[R], len(items))
	if limit < 1 {
		err := fmt.Errorf("CollectAll: limit %d: %w", limit, ErrInvalidLimit)
		for i := range results {
			results[i].Err = err
		}
		return results
	}

	var wg sync.WaitGroup
	slots := make(chan struct{}, limit)
	for i, item := range items {
		if !acquire(ctx, slots) {
			for j := i; j < len(items); j++ {
				results[j].Err = ctx.Err()
			}
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			// Each goroutine writes only its own index: no lock needed,
			// and wg.Wait orders these writes before the return.
			v, err := fn(ctx, item)
			results[i] = Result[R]{Value: v, Err: err}
		})
	}
	wg.Wait()
	return results
}

// acquire takes a slot, or reports false once ctx has ended. When both are
// ready select picks at random, so ctx is checked again: a cancelled batch
// must not start one more call just because a slot happened to be free.
func acquire(ctx context.Context, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		if ctx.Err() != nil {
			<-slots
			return false
		}
		return true
	case <-ctx.Done():
		return false
	}
}
