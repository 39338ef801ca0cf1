package llm

import (
	"context"
	"fmt"

	"github.com/production-go/gateway-lab/gateway/chatapi"
)

// Generate calls p.Generate, turning a panic in the provider into an error
// wrapping ErrPanic — a provider's bug fails the request that found it,
// not the process — and an answer with no bytes and no error into one
// wrapping ErrEmptyAnswer.
func Generate(ctx context.Context, p Provider, req Request) (c Completion, err error) {
	defer recovered(p, &err)
	if c, err = p.Generate(ctx, req); err == nil && len(c.Raw) == 0 {
		err = fmt.Errorf("llm: provider %s: %w", p.Name(), ErrEmptyAnswer)
	}
	return c, err
}

// Stream streams p's answer to emit when p can stream. A provider that
// cannot answers whole, and its answer goes to emit as the stream of chunks
// an upstream would have sent: one with the whole message, and one with
// the usage if the caller asked for it. A panic in the provider becomes an
// error wrapping ErrPanic, as in Generate.
func Stream(ctx context.Context, p Provider, req Request, emit func(Chunk) error) (c Completion, err error) {
	defer recovered(p, &err)
	if sp, ok := p.(StreamingProvider); ok {
		return sp.Stream(ctx, req, emit)
	}
	return streamWhole(ctx, p.Name(), p.Generate, req, emit)
}

// StreamWhole is Stream for a middleware that has its own way to answer
// whole (its Generate) and must not call the provider it wraps twice: it
// streams through inner when inner can stream, and otherwise sends
// generate's answer as chunks.
func StreamWhole(ctx context.Context, inner Provider, req Request, emit func(Chunk) error,
	generate func(context.Context, Request) (Completion, error)) (Completion, error) {
	if sp, ok := inner.(StreamingProvider); ok {
		return sp.Stream(ctx, req, emit)
	}
	return streamWhole(ctx, inner.Name(), generate, req, emit)
}

// streamWhole asks generate for the whole answer and emits it as chunks.
func streamWhole(ctx context.Context, name string, generate func(context.Context, Request) (Completion, error),
	req Request, emit func(Chunk) error) (Completion, error) {
	c, err := generate(ctx, req)
	if err != nil {
		return c, err
	}
	if err := EmitWhole(c, req.Chat.IncludeUsage, emit); err != nil {
		return c, fmt.Errorf("llm: %s: %w", name, err)
	}
	return c, nil
}

// EmitWhole sends a whole answer to emit as the stream an upstream would
// have sent for it (see chatapi.ChunksOf), and returns emit's first error.
// It is the one place a whole answer becomes a stream.
func EmitWhole(c Completion, includeUsage bool, emit func(Chunk) error) error {
	chunks, err := chatapi.ChunksOf(c.Raw, includeUsage)
	if err != nil {
		return err
	}
	for _, raw := range chunks {
		if err := emit(Chunk{Raw: raw}); err != nil {
			return err
		}
	}
	return nil
}

// recovered turns a panic in a provider call into an error wrapping
// ErrPanic. It must be deferred directly by the function that calls the
// provider: recover works only there.
func recovered(p Provider, err *error) {
	if v := recover(); v != nil {
		*err = fmt.Errorf("llm: provider %s: %w: %v", p.Name(), ErrPanic, v)
	}
}
