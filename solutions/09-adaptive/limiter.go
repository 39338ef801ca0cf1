package adaptive

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"
)

// Limiter is a semaphore whose size an Algorithm moves. Waiters are served
// first come, first served.
type Limiter struct {
	mu       sync.Mutex
	alg      Algorithm
	limit    int
	inFlight int
	// backoffs counts the decreases a drop caused. A token remembers the
	// count it was admitted under; a drop from an older token measured the
	// congestion that decrease already answered, and must not cut again.
	backoffs uint64
	waiters  list.List // of *waiter
}

type waiter struct {
	ready chan struct{} // closed once tok is filled in: the permit is the waiter's
	tok   *Token
}

// Token is one admitted request's permit. Call Done exactly once when the
// request ends (a second call does nothing).
type Token struct {
	l        *Limiter
	start    time.Time
	inFlight int
	backoffs uint64
	once     sync.Once
}

// New returns a Limiter driven by alg, starting at alg.InitialLimit().
func New(alg Algorithm) (*Limiter, error) {
	if alg == nil {
		return nil, fmt.Errorf("%w: nil Algorithm", ErrInvalidConfig)
	}
	initial := alg.InitialLimit()
	if initial < 1 {
		return nil, fmt.Errorf("%w: initial limit %d, want at least 1", ErrInvalidConfig, initial)
	}
	return &Limiter{alg: alg, limit: initial}, nil
}

// Acquire takes a permit, waiting until one is free or ctx ends. On ctx's
// end it returns ctx.Err() — context.Canceled or context.DeadlineExceeded,
// whichever it was — and holds nothing.
func (l *Limiter) Acquire(ctx context.Context) (*Token, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.inFlight < l.limit && l.waiters.Len() == 0 {
		t := l.admitLocked()
		l.mu.Unlock()
		return t, nil
	}
	w := &waiter{ready: make(chan struct{})}
	elem := l.waiters.PushBack(w)
	l.mu.Unlock()

	select {
	case <-w.ready:
		return w.tok, nil
	case <-ctx.Done():
		l.mu.Lock()
		select {
		case <-w.ready:
			// Handed a permit in the same instant ctx ended: the caller is
			// leaving, so give it back without a sample.
			l.mu.Unlock()
			w.tok.Done(Ignored)
		default:
			l.waiters.Remove(elem)
			l.mu.Unlock()
		}
		return nil, ctx.Err()
	}
}

// admitLocked hands out one permit. l.mu must be held.
func (l *Limiter) admitLocked() *Token {
	l.inFlight++
	return &Token{l: l, start: time.Now(), inFlight: l.inFlight, backoffs: l.backoffs}
}

// Done returns the permit and, unless o is Ignored, feeds the request's
// latency and outcome to the algorithm. Only the first call counts.
func (t *Token) Done(o Outcome) {
	t.once.Do(func() { t.l.done(t, o) })
}

func (l *Limiter) done(t *Token, o Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inFlight--
	stale := o == Dropped && t.backoffs != l.backoffs
	if o != Ignored && !stale {
		before := l.limit
		l.limit = l.alg.Update(Sample{Latency: time.Since(t.start), InFlight: t.inFlight, Dropped: o == Dropped})
		if o == Dropped && l.limit < before {
			l.backoffs++
		}
	}
	// The permit just returned, and any the limit grew by, go to waiters.
	for l.inFlight < l.limit {
		front := l.waiters.Front()
		if front == nil {
			break
		}
		l.waiters.Remove(front)
		w := front.Value.(*waiter)
		w.tok = l.admitLocked()
		close(w.ready)
	}
}

// Limit is the current limit.
func (l *Limiter) Limit() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// InFlight is the number of permits held now.
func (l *Limiter) InFlight() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlight
}
