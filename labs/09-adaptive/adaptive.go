// Package adaptive bounds concurrency by a limit it measures instead of a
// number someone typed.
//
// A fixed semaphore size is a guess about the downstream's capacity, and the
// capacity moves: a provider slows down at peak, sheds load in a brown-out,
// comes back. Set the size too high and requests queue inside the provider,
// where nobody sees them, until they time out; too low and capacity is paid
// for and left idle.
//
// A Limiter is a semaphore whose size an Algorithm moves after every request.
// Each admitted request holds a Token and reports how it ended with Done:
//
//   - Success: the provider answered. Its latency is a sample.
//   - Dropped: the provider failed or the attempt timed out. Overload.
//   - Ignored: the caller left (context.Canceled), or the request ended for a
//     reason that says nothing about the provider. The permit comes back and
//     the limit does not move.
//
// Two algorithms implement Algorithm:
//
//   - AIMD (TCP's congestion avoidance): one more permit per round trip of
//     successes, a multiplicative cut on a drop.
//   - Gradient (the gradient/Vegas family's minimum-latency baseline;
//     Netflix's Gradient2 uses a long moving average instead): the limit
//     follows the ratio of the long-window minimum latency (the provider
//     unloaded) to the short-window latency (now), plus a small queue
//     allowance, so it shrinks as soon as requests start to queue, before
//     anything fails.
//
// Both keep the limit between a floor and a ceiling, and both grow only while
// the limit is actually in use.
//
// Lab 09: the types and errors in this file are given; write outcome.go,
// limiter.go, aimd.go and gradient.go. Read README.md, then make
// `make lab-09` green.
package adaptive

import (
	"errors"
	"time"
)

// Sentinel errors. Test with errors.Is.
var (
	// ErrInvalidConfig: a constructor was given a setting that cannot work.
	ErrInvalidConfig = errors.New("adaptive: invalid config")
	// ErrNotImplemented is what the stubs return until you write them.
	ErrNotImplemented = errors.New("lab 09: not implemented yet")
)

// Outcome is how an admitted request ended, as far as the limit is concerned.
type Outcome int

const (
	// Success: the provider answered; the latency is a sample of its load.
	Success Outcome = iota
	// Dropped: the provider failed or the attempt timed out; back off.
	Dropped
	// Ignored: the request ended for a reason that says nothing about the
	// provider (the caller cancelled). The permit is returned, nothing else.
	Ignored
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Dropped:
		return "dropped"
	case Ignored:
		return "ignored"
	}
	return "outcome(?)"
}

// Sample is what an Algorithm learns from one finished request.
type Sample struct {
	// Latency is the time from Acquire's return to Done.
	Latency time.Duration
	// InFlight is the number of permits held when this request was
	// admitted, itself included: how much of the limit was in use.
	InFlight int
	// Dropped is true for the Dropped outcome.
	Dropped bool
}

// Algorithm decides the limit. A Limiter calls it under its own lock, one
// call at a time, so an Algorithm needs no locking; give each Limiter its own.
type Algorithm interface {
	// InitialLimit is the limit before any sample.
	InitialLimit() int
	// Update takes one sample and returns the new limit, within the
	// algorithm's floor and ceiling.
	Update(s Sample) int
}
