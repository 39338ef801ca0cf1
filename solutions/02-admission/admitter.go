package admission

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures an Admitter.
type Config struct {
	// Limiter decides the rate per key. nil means no rate limit.
	Limiter Limiter
	// MaxConcurrent is how many admitted requests may be in flight at once.
	MaxConcurrent int
	// MaxQueueWait bounds how long Admit waits for a slot. 0 means don't
	// wait: refuse at once when every slot is taken.
	MaxQueueWait time.Duration
}

// Admitter admits requests: rate limit first, then a slot within MaxQueueWait.
type Admitter struct {
	limiter Limiter
	sem     *Semaphore
	maxWait time.Duration

	closed    atomic.Bool
	closing   context.Context // done once Close is called: wakes queued Admits
	closeFunc context.CancelFunc
}

// New validates cfg and returns an Admitter.
func New(cfg Config) (*Admitter, error) {
	if cfg.MaxConcurrent < 1 {
		return nil, fmt.Errorf("%w: MaxConcurrent %d must be at least 1", ErrInvalidConfig, cfg.MaxConcurrent)
	}
	if cfg.MaxQueueWait < 0 {
		return nil, fmt.Errorf("%w: MaxQueueWait %s must not be negative", ErrInvalidConfig, cfg.MaxQueueWait)
	}
	closing, closeFunc := context.WithCancel(context.Background())
	return &Admitter{
		limiter:   cfg.Limiter,
		sem:       NewSemaphore(cfg.MaxConcurrent),
		maxWait:   cfg.MaxQueueWait,
		closing:   closing,
		closeFunc: closeFunc,
	}, nil
}

// errQueueTimeout is the cause recorded when MaxQueueWait ran out.
var errQueueTimeout = errors.New("queue wait limit reached")

// Admit admits one request for key, or says why not:
//   - ErrClosed after Close (checked first, and for requests still queued);
//   - ctx.Err() when the caller's ctx has already ended;
//   - a *RateLimitError (errors.Is ErrRateLimited) when key has no token;
//   - the limiter's own error, wrapped, when it could not decide;
//   - ErrOverloaded when no slot freed up within MaxQueueWait;
//   - ctx.Err() when the caller gave up while queued.
//
// Only the first two steps take no slot at all; a returned Ticket holds one
// until Ticket.Release.
func (a *Admitter) Admit(ctx context.Context, key string) (*Ticket, error) {
	if a.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var decision Decision
	if a.limiter != nil {
		d, err := a.limiter.Allow(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("admission: rate limiter for %q: %w", key, err)
		}
		if !d.Allowed {
			return nil, &RateLimitError{RetryAfter: d.RetryAfter}
		}
		decision = d
	}

	start := time.Now()
	if !a.sem.TryAcquire() {
		if err := a.wait(ctx); err != nil {
			return nil, err
		}
	}
	return &Ticket{QueueWait: time.Since(start), RateLimit: decision, sem: a.sem}, nil
}

// wait queues for a slot until one frees up, MaxQueueWait passes, the caller
// leaves, or the Admitter closes — and reports which.
func (a *Admitter) wait(ctx context.Context) error {
	if a.maxWait == 0 {
		return fmt.Errorf("%w: all %d slots busy and queueing is off", ErrOverloaded, a.sem.Capacity())
	}
	waitCtx, cancel := context.WithTimeoutCause(ctx, a.maxWait, errQueueTimeout)
	defer cancel()
	waitCtx, cancelCause := context.WithCancelCause(waitCtx)
	defer cancelCause(nil)
	stop := context.AfterFunc(a.closing, func() { cancelCause(ErrClosed) })
	defer stop()

	if err := a.sem.Acquire(waitCtx); err != nil {
		switch {
		case ctx.Err() != nil: // the caller's own cancellation or deadline
			return ctx.Err()
		case errors.Is(context.Cause(waitCtx), ErrClosed):
			return ErrClosed
		default:
			return fmt.Errorf("%w: no slot of %d within %s", ErrOverloaded, a.sem.Capacity(), a.maxWait)
		}
	}
	return nil
}

// InFlight is the number of tickets out now.
func (a *Admitter) InFlight() int { return a.sem.InFlight() }

// Capacity is MaxConcurrent.
func (a *Admitter) Capacity() int { return a.sem.Capacity() }

// Close makes later Admits, and Admits still waiting for a slot, return
// ErrClosed. Tickets already out stay valid. Close is idempotent.
func (a *Admitter) Close() {
	a.closed.Store(true)
	a.closeFunc()
}

// Ticket is an admitted request's slot. Release it when the request ends,
// whatever happened (defer it).
type Ticket struct {
	// QueueWait is how long Admit waited for a slot: zero when one was free.
	// It is its own number because it is invisible in a provider's latency.
	QueueWait time.Duration
	// RateLimit is the limiter's decision (for X-RateLimit-* headers);
	// zero when the Admitter has no Limiter.
	RateLimit Decision

	sem  *Semaphore
	once sync.Once
}

// Release returns the slot. Calling it more than once is harmless.
func (t *Ticket) Release() {
	t.once.Do(t.sem.Release)
}
