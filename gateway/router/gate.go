package router

import (
	"context"
	"sync"
)

// gate counts the router's requests so that Close can refuse new ones and
// wait for the rest: the in-flight half of lab 05's Drainer (which also
// serves readiness and HTTP), kept here because the hot path wants no
// allocation per request, and the lab's Enter hands out a leave func
// that guards itself against a second call. Here each join is left
// exactly once, by run.release, so a plain counter does.
type gate struct {
	mu     sync.Mutex
	n      int
	closed bool
	idle   chan struct{} // closed when n reaches 0 after closing; nil until Close waits
}

// join counts one more request, or reports false once the gate is closed.
func (g *gate) join() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.n++
	return true
}

// leave undoes one join.
func (g *gate) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// close refuses every later join and waits for the requests in flight,
// or for ctx; it reports whether every one finished. Calling it again
// waits again.
func (g *gate) close(ctx context.Context) bool {
	g.mu.Lock()
	g.closed = true
	if g.n == 0 {
		g.mu.Unlock()
		return true
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// active is the number of requests in flight.
func (g *gate) active() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}
