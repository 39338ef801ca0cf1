// Package drain shuts an HTTP server down without dropping the requests it
// already accepted.
//
// A Drainer counts requests in flight. Draining is two steps in a fixed
// order: first stop accepting, then wait for the in-flight count to reach
// zero — within a budget — and report whether everything finished.
//
// Lab 05: read README.md, then make `make lab-05` green.
package drain

import (
	"context"
	"errors"
)

// ErrDraining is returned by Enter once draining has begun.
var ErrDraining = errors.New("drain: draining, not accepting new requests")

// ErrCut is the cause Serve gives the requests' base context when Grace
// ends with requests still running: context.Cause(r.Context()) is ErrCut
// in a handler the server cut, so it can tell that from a client that left.
var ErrCut = errors.New("drain: request cut at the end of the drain grace")

// ErrNotImplemented is what the stubs return until you write them.
var ErrNotImplemented = errors.New("lab 05: not implemented yet")

// Drainer tracks in-flight requests and drains them.
type Drainer struct{} // TODO(lab 05): the fields you need

// New returns a Drainer that is accepting and ready.
func New() *Drainer {
	return &Drainer{}
}

// Enter registers one request.
//
// TODO(lab 05): ErrDraining once draining has begun; otherwise count the
// request and return a leave func that uncounts it exactly once, however
// many times it is called, from however many goroutines.
func (d *Drainer) Enter() (leave func(), err error) {
	return nil, ErrNotImplemented
}

// Active is the number of requests in flight.
func (d *Drainer) Active() int {
	return 0
}

// Accepting reports whether Enter still admits new requests.
func (d *Drainer) Accepting() bool {
	return false
}

// Draining returns a channel closed when draining begins.
func (d *Drainer) Draining() <-chan struct{} {
	return nil
}

// MarkUnready turns /readyz to 503 while still accepting requests.
func (d *Drainer) MarkUnready() {}

// Drain stops accepting, then waits until nothing is in flight or ctx ends.
//
// TODO(lab 05): from the moment Drain is called, even with ctx already done,
// Enter refuses, Accepting and readiness say no, and Draining() is closed.
// Drain returns true once nothing is in flight (at once if nothing is), or
// false if ctx ends first. Drain may be called again, or by two callers at
// once: each waits, and all return true when the last request leaves.
func (d *Drainer) Drain(ctx context.Context) bool {
	return false
}
