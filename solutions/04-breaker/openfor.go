package breaker

import "time"

// OpenFor is how long the breaker will still refuse every call: the time
// until an open breaker half-opens, and 0 when it is closed or half-open.
// A gateway that finds every breaker open answers with it as Retry-After.
// (An extension the gateway uses; the exercise does not require it.)
func (b *Breaker) OpenFor() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.stateAt(now) != Open {
		return 0
	}
	return b.recovery - now.Sub(b.openedAt)
}
