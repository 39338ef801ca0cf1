// Package inflight counts requests in flight per key, up to a cap: the
// per-tenant caps of the router (one cap for every tenant) and of the HTTP
// layer (each caller's own, from its identity).
package inflight

import "sync"

// Counter counts each key's requests in flight. A key with nothing in
// flight holds no entry, so the map is as small as the number of keys busy
// right now. The zero value is ready to use and safe for concurrent use.
type Counter struct {
	mu   sync.Mutex
	n    map[string]int
	peak int // the most entries n has held since it was last made
}

// Enter counts one more request for key, or reports false if key already
// has limit in flight.
func (c *Counter) Enter(key string, limit int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] >= limit {
		return false
	}
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	c.peak = max(c.peak, len(c.n))
	return true
}

// Leave undoes one Enter of key.
func (c *Counter) Leave(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[key] > 1 {
		c.n[key]--
		return
	}
	delete(c.n, key)
	if len(c.n) == 0 && c.peak > 64 {
		// A Go map keeps the space its peak needed; start afresh so a
		// burst of distinct keys does not hold memory for ever.
		c.n, c.peak = nil, 0
	}
}

// Busy is how many keys have a request in flight.
func (c *Counter) Busy() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}
