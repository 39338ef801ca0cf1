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
	"context"
	"fmt"

	adaptive "github.com/production-go/gateway-lab/solutions/09-adaptive"
	"github.com/production-go/gateway-lab/solutions/llm"
)

// The algorithms a limit can use.
const (
	AIMD     = "aimd"     // additive increase, multiplicative decrease on a drop
	Gradient = "gradient" // follows the latency gradient against a baseline
)

// NewLimiter makes an adaptive limit of the named algorithm between 1 and
// ceiling, starting at half the ceiling.
func NewLimiter(algorithm string, ceiling int) (*adaptive.Limiter, error) {
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

// Generate calls the wrapped provider with a permit.
func (l *Provider) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	tok, err := l.acquire(ctx)
	if err != nil {
		return llm.Completion{}, err
	}
	c, err := l.Inner.Generate(ctx, req)
	tok.Done(outcome(err))
	return c, err
}

// Stream holds the permit for the whole stream: a stream is one call. A
// client that stops reading says nothing about the provider's load.
func (l *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	sp, ok := l.Inner.(llm.StreamingProvider)
	if !ok {
		return llm.StreamWhole(ctx, l.Inner, req, emit, l.Generate)
	}
	tok, err := l.acquire(ctx)
	if err != nil {
		return llm.Completion{}, err
	}
	clientGone := false
	c, err := sp.Stream(ctx, req, func(ch llm.Chunk) error {
		err := emit(ch)
		clientGone = clientGone || err != nil
		return err
	})
	if clientGone {
		tok.Done(adaptive.Ignored)
	} else {
		tok.Done(outcome(err))
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
// caller's own faults (a 4xx other than 408 and 429) and cancellations say
// nothing about the provider's load.
func outcome(err error) adaptive.Outcome {
	switch llm.ReasonOf(err) {
	case llm.ReasonNone:
		return adaptive.Success
	case llm.ReasonCancelled, llm.ReasonClient:
		return adaptive.Ignored
	}
	return adaptive.Dropped
}
