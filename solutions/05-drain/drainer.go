// Package drain shuts an HTTP server down without dropping the requests it
// already accepted.
//
// A Drainer counts requests in flight. Draining is two steps in a fixed
// order: first stop accepting (new requests get 503 with Connection: close,
// and /readyz turns 503 so the load balancer routes elsewhere), then wait for
// the in-flight count to reach zero — within a budget. Drain reports whether
// everything finished; a false is a record that requests were cut, instead of
// a silent SIGKILL.
//
// Readiness and liveness are different questions. /readyz: should traffic
// come here? — no, once draining. /healthz: is the process alive? — yes,
// draining or not; an orchestrator that saw a draining pod as dead would kill
// it mid-drain.
package drain

import (
	"context"
	"errors"
	"sync"
)

// ErrDraining is returned by Enter once draining has begun.
var ErrDraining = errors.New("drain: draining, not accepting new requests")

// ErrCut is the cause Serve gives the requests' base context when Grace
// ends with requests still running: context.Cause(r.Context()) is ErrCut
// in a handler the server cut, so it can tell that from a client that left.
var ErrCut = errors.New("drain: request cut at the end of the drain grace")

// Drainer tracks in-flight requests and drains them. The zero value is not
// usable; call New.
type Drainer struct {
	mu        sync.Mutex
	active    int
	accepting bool
	ready     bool
	idle      chan struct{} // closed when active drops to zero while draining
	draining  chan struct{} // closed when draining begins
}

// New returns a Drainer that is accepting and ready.
func New() *Drainer {
	return &Drainer{accepting: true, ready: true, draining: make(chan struct{})}
}

// Enter registers one request. It fails with ErrDraining once draining has
// begun. leave must be called when the request ends (defer it); calling it
// more than once, from any goroutines, is harmless.
func (d *Drainer) Enter() (leave func(), err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.accepting {
		return nil, ErrDraining
	}
	d.active++
	var once sync.Once
	return func() { once.Do(d.leave) }, nil
}

func (d *Drainer) leave() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.active--
	if d.active == 0 && d.idle != nil {
		close(d.idle)
		d.idle = nil
	}
}

// Active is the number of requests in flight.
func (d *Drainer) Active() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.active
}

// Accepting reports whether Enter still admits new requests.
func (d *Drainer) Accepting() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.accepting
}

// Draining returns a channel closed when draining begins. A long-running
// handler (a stream) can select on it to finish early and cleanly.
func (d *Drainer) Draining() <-chan struct{} { return d.draining }

// MarkUnready turns /readyz to 503 while still accepting requests: the first
// step of a shutdown, giving load balancers time to stop routing here
// before anything is refused.
func (d *Drainer) MarkUnready() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ready = false
}

// Drain stops accepting new requests, then waits until none are in flight
// or ctx ends. It returns true only if every request finished. It stops
// accepting even when ctx is already done (and then returns at once: true if
// nothing is in flight). Calling it again (say, with a longer budget) waits
// again; Drains waiting at once all return when the last request leaves.
func (d *Drainer) Drain(ctx context.Context) bool {
	d.mu.Lock()
	if d.accepting {
		d.accepting = false
		d.ready = false
		close(d.draining)
	}
	if d.active == 0 {
		d.mu.Unlock()
		return true
	}
	if d.idle == nil {
		d.idle = make(chan struct{})
	}
	idle := d.idle
	d.mu.Unlock()

	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}
