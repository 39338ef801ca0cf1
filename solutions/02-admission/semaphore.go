package admission

import (
	"container/list"
	"context"
	"fmt"
	"sync"
)

// Semaphore bounds how many holders run at once. Waiters are served first
// come, first served: a released slot is handed straight to the longest
// waiter, so a newcomer cannot barge past the queue.
type Semaphore struct {
	mu      sync.Mutex
	size    int
	held    int
	waiters list.List // of chan struct{}, closed when the slot is handed over
}

// NewSemaphore returns a semaphore with n slots. n < 1 is a programming
// error and panics, as make(chan) with a negative size would.
func NewSemaphore(n int) *Semaphore {
	if n < 1 {
		panic(fmt.Sprintf("admission: NewSemaphore(%d): n must be at least 1", n))
	}
	return &Semaphore{size: n}
}

// Acquire takes a slot, waiting until one is free or ctx ends. On ctx's end
// it returns ctx.Err() and holds nothing.
func (s *Semaphore) Acquire(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.held < s.size && s.waiters.Len() == 0 {
		s.held++
		s.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	elem := s.waiters.PushBack(ready)
	s.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		select {
		case <-ready:
			// Handed a slot in the same instant ctx ended: the caller is
			// leaving, so pass the slot on rather than keep it.
			s.mu.Unlock()
			s.Release()
		default:
			s.waiters.Remove(elem)
			s.mu.Unlock()
		}
		return ctx.Err()
	}
}

// TryAcquire takes a slot if one is free now and nobody is queued for it.
func (s *Semaphore) TryAcquire() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held < s.size && s.waiters.Len() == 0 {
		s.held++
		return true
	}
	return false
}

// Release returns a slot, handing it to the longest waiter if there is one.
// Releasing more than was acquired is a bug in the caller and panics rather
// than silently adding capacity.
func (s *Semaphore) Release() {
	s.mu.Lock()
	if s.held == 0 {
		s.mu.Unlock()
		panic("admission: Semaphore.Release without a matching Acquire")
	}
	if front := s.waiters.Front(); front != nil {
		s.waiters.Remove(front)
		close(front.Value.(chan struct{})) // the slot moves to the waiter; held is unchanged
	} else {
		s.held--
	}
	s.mu.Unlock()
}

// InFlight is the number of slots held now.
func (s *Semaphore) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// Capacity is the number of slots.
func (s *Semaphore) Capacity() int { return s.size }
