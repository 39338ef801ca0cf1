package hedging

import (
	"math"
	"slices"
	"sync"
	"time"
)

// latencies keeps the last n successful latencies per target and answers
// "what is its p-th percentile?".
type latencies struct {
	n  int
	mu sync.Mutex
	by map[string]*ring
}

type ring struct {
	samples []time.Duration
	next    int
}

func (l *latencies) observe(target string, d time.Duration) {
	if l.n == 0 {
		return // no Percentile: nothing to keep
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.by[target]
	if !ok {
		r = &ring{}
		l.by[target] = r
	}
	if len(r.samples) < l.n {
		r.samples = append(r.samples, d)
		return
	}
	r.samples[r.next] = d
	r.next = (r.next + 1) % l.n
}

// percentile is the nearest-rank p-th percentile of target's window, and
// false until the window is full.
func (l *latencies) percentile(target string, p float64) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.by[target]
	if !ok || len(r.samples) < l.n {
		return 0, false
	}
	sorted := slices.Clone(r.samples)
	slices.Sort(sorted)
	rank := int(math.Ceil(p*float64(len(sorted)) - 1e-9)) // 1-based; the epsilon absorbs 0.95×20 = 19.000…04
	return sorted[max(rank, 1)-1], true
}
