package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/solutions/03-timeouts"
)

// StreamingProvider is a Provider that can stream its answer. emit sends one
// chunk to the client; an error from emit means the client is gone.
type StreamingProvider interface {
	Provider
	Stream(ctx context.Context, req Request, emit func(chunk string) error) (Completion, error)
}

// StreamLimits bound a stream where a whole-request timeout cannot: an
// upstream that accepts the connection and then says nothing.
type StreamLimits struct {
	// FirstToken bounds the wait for the first chunk of an attempt
	// (time to first token). Before the first chunk a failure may still
	// fall back to another provider.
	FirstToken time.Duration
	// Idle bounds the gap between two chunks.
	Idle time.Duration
}

var (
	// ErrFirstTokenTimeout: no chunk arrived within StreamLimits.FirstToken.
	// It wraps context.DeadlineExceeded: a timeout of the attempt, retryable.
	ErrFirstTokenTimeout = fmt.Errorf("gateway: no first token in time: %w", context.DeadlineExceeded)
	// ErrStreamIdle: the stream went silent for longer than StreamLimits.Idle.
	ErrStreamIdle = fmt.Errorf("gateway: stream went idle: %w", context.DeadlineExceeded)
	// ErrAfterFirstByte wraps a failure that happened after the client had
	// received part of the answer: the gateway never switches providers
	// then, and the caller must end the stream with an error, not a clean end.
	ErrAfterFirstByte = errors.New("gateway: stream failed after the first byte")
)

// Stream is Generate for streamed answers: the same admission and retries,
// with one rule more. Until the first chunk reaches emit, a failed attempt
// may fall back to the next provider; after it, a failure ends the stream
// with an error wrapping ErrAfterFirstByte — never a silent switch to
// another provider mid-answer. Providers that cannot stream answer in one chunk.
func (g *Gateway) Stream(ctx context.Context, req Request, limits StreamLimits, emit func(chunk string) error) (Response, error) {
	if limits.FirstToken <= 0 || limits.Idle <= 0 {
		return Response{}, fmt.Errorf("%w: stream limits must be positive", ErrInvalidConfig)
	}
	a, err := g.enter(ctx, req)
	if err != nil {
		return Response{}, err
	}
	defer a.release()
	pinned := a.pinned

	var (
		answer Completion
		used   string
		last   string
	)
	// No per-attempt timeout: a healthy stream may run long. The watchdog
	// below bounds the silence instead, and TotalTimeout bounds the whole.
	attempts, err := timeouts.Do(ctx, g.policy(pinned != nil, 0), func(ctx context.Context, attempt int) error {
		var sent bool
		c, p, err := g.try(pinned, req, &last, attempt, func(p Provider, req Request) (Completion, error) {
			c, s, err := g.streamOnce(ctx, p, req, limits, emit)
			sent = s
			return c, err
		})
		if err != nil && sent {
			return timeouts.Permanent(fmt.Errorf("%w: %s: %w", ErrAfterFirstByte, p.Name(), err))
		}
		if err != nil {
			return err
		}
		answer, used = c, p.Name()
		return nil
	})
	return Response{Provider: used, Model: answer.Model, Text: answer.Text, Usage: answer.Usage, Attempts: attempts,
		QueueWait: a.ticket.QueueWait, Latency: time.Since(a.at)}, err
}

// errClientGone marks an attempt ended because the client stopped reading.
// It wraps context.Canceled, so the provider's breaker does not count it.
var errClientGone = fmt.Errorf("gateway: client stopped reading: %w", context.Canceled)

// streamOnce runs one streaming attempt under the first-token and idle
// watchdog, and reports whether any chunk reached the client.
func (g *Gateway) streamOnce(ctx context.Context, p Provider, req Request, limits StreamLimits, emit func(string) error) (Completion, bool, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu   sync.Mutex
		sent bool
	)
	watchdog := time.AfterFunc(limits.FirstToken, func() {
		mu.Lock()
		defer mu.Unlock()
		if sent {
			cancel(ErrStreamIdle)
		} else {
			cancel(ErrFirstTokenTimeout)
		}
	})
	defer watchdog.Stop()
	relay := func(chunk string) error {
		if chunk == "" {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if err := context.Cause(ctx); err != nil {
			return err // the watchdog already ended this attempt
		}
		watchdog.Stop()
		sent = true
		if err := emit(chunk); err != nil {
			cancel(errClientGone)
			return errClientGone
		}
		watchdog.Reset(limits.Idle)
		return nil
	}
	var (
		c   Completion
		err error
	)
	if sp, ok := p.(StreamingProvider); ok {
		c, err = sp.Stream(ctx, req, relay)
	} else {
		c, err = p.Generate(ctx, req)
		if err == nil {
			err = relay(c.Text)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if cause := context.Cause(ctx); cause != nil && errors.Is(err, context.Canceled) {
		// The provider saw only "canceled"; the cause says why. A watchdog
		// timeout is the provider's failure (its breaker counts it); a
		// client that left is not (errClientGone wraps Canceled).
		err = cause
	}
	return c, sent, err
}
