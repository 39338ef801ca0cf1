// Package limited puts a provider behind its own adaptive concurrency limit
// (lab 09): a permit per call, from a limit that grows while the provider
// answers quickly and shrinks when it slows down or fails, so a gateway
// finds each provider's capacity instead of being told it.
//
// The limit sits inside the attempt: a call that cannot get a permit before
// its context ends fails as a timeout, and the router retries or falls back
// as for any other failure. The router's own MaxConcurrent stays the
// ceiling.
package limited

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/production-go/gateway-lab/gateway/llm"
	adaptive "github.com/production-go/gateway-lab/solutions/09-adaptive"
)

// Algorithm names how a limit moves.
type Algorithm string

// The algorithms a limit can use.
const (
	AIMD     Algorithm = "aimd"     // additive increase, multiplicative decrease on a drop
	Gradient Algorithm = "gradient" // follows the latency gradient against a baseline
)

// NewLimiter makes an adaptive limit of the named algorithm between 1 and
// ceiling, starting at half the ceiling.
func NewLimiter(algorithm Algorithm, ceiling int) (*adaptive.Limiter, error) {
	if ceiling < 1 {
		return nil, fmt.Errorf("limited: the ceiling must be at least 1, got %d", ceiling)
	}
	initial := max(1, ceiling/2)
	var (
		alg adaptive.Algorithm
		err error
	)
	switch algorithm {
	case AIMD:
		alg, err = adaptive.NewAIMD(adaptive.AIMDConfig{Min: 1, Max: ceiling, Initial: initial})
	case Gradient:
		alg, err = adaptive.NewGradient(adaptive.GradientConfig{Min: 1, Max: ceiling, Initial: initial})
	default:
		return nil, fmt.Errorf("limited: %q is not one of %s, %s", algorithm, AIMD, Gradient)
	}
	if err != nil {
		return nil, err
	}
	return adaptive.New(alg)
}

// Provider calls the provider it wraps with a permit from its limit.
type Provider struct {
	llm.Wrapped
	lim *adaptive.Limiter
}

// New puts p behind lim.
func New(p llm.Provider, lim *adaptive.Limiter) *Provider {
	return &Provider{Wrapped: llm.Wrapped{Inner: p}, lim: lim}
}

// Limit is the limit now.
func (l *Provider) Limit() int { return l.lim.Limit() }

// Generate calls the wrapped provider with a permit. A panic in it comes
// back as an error (llm.ErrPanic) and gives the permit back.
func (l *Provider) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	tok, err := l.acquire(ctx)
	if err != nil {
		return llm.Completion{}, err
	}
	c, err := llm.Generate(ctx, l.Inner, req)
	tok.Done(outcome(ctx, err))
	return c, err
}

// Stream holds the permit for the whole stream: a stream is one call. A
// client that stops reading says nothing about the provider's load; a
// stream the router cut for silence (its first-token or idle limit) is a
// drop, like any timeout.
func (l *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	if _, ok := l.Inner.(llm.StreamingProvider); !ok {
		return llm.StreamWhole(ctx, l.Inner, req, emit, l.Generate)
	}
	tok, err := l.acquire(ctx)
	if err != nil {
		return llm.Completion{}, err
	}
	var emitErr error
	c, err := llm.Stream(ctx, l.Inner, req, func(ch llm.Chunk) error {
		err := emit(ch)
		emitErr = cmp.Or(emitErr, err)
		return err
	})
	switch {
	case emitErr != nil && !errors.Is(emitErr, context.DeadlineExceeded):
		tok.Done(adaptive.Ignored) // the caller stopped reading
	default: // a refusal for silence is the timeout it stands for
		tok.Done(outcome(ctx, cmp.Or(emitErr, err)))
	}
	return c, err
}

func (l *Provider) acquire(ctx context.Context) (*adaptive.Token, error) {
	tok, err := l.lim.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: waiting for an adaptive-limit permit: %w", l.Name(), err)
	}
	return tok, nil
}

// outcome is adaptive.OutcomeOf in the provider contract's terms: the
// caller's own faults (a 4xx other than 408 and 429), cancellations and a
// provider's panic (a bug, not load) say nothing about the provider's
// load. A call cancelled for a deadline's sake — the router cuts a silent
// stream with a cause that is one — is the timeout it stands for.
func outcome(ctx context.Context, err error) adaptive.Outcome {
	if errors.Is(err, context.Canceled) && errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
		err = context.Cause(ctx)
	}
	switch reason := llm.ReasonOf(err); {
	case reason == llm.ReasonNone:
		return adaptive.Success
	case reason == llm.ReasonCancelled, reason == llm.ReasonClient, errors.Is(err, llm.ErrPanic):
		return adaptive.Ignored
	}
	return adaptive.Dropped
}
