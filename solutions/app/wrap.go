package app

import (
	"context"

	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
)

// wrapped is what every provider wrapper here shares: it passes p's name
// and optional interfaces through, so a wrapped provider that names its
// default model still does, and one that honours its context is still
// called directly.
type wrapped struct{ p gateway.Provider }

func (w wrapped) Name() string { return w.p.Name() }

// DefaultModel is p's, or "" (which the gateway reads as "none").
func (w wrapped) DefaultModel() string {
	if dm, ok := w.p.(gateway.DefaultModeler); ok {
		return dm.DefaultModel()
	}
	return ""
}

// HonoursContext is p's: a wrapper itself never outlives its context.
func (w wrapped) HonoursContext() bool {
	h, ok := w.p.(gateway.ContextHonourer)
	return ok && h.HonoursContext()
}

// streamOrWhole streams through p when p can stream; otherwise it sends
// generate's whole answer as one chunk, as the gateway would do for p
// without the wrapper.
func (w wrapped) streamOrWhole(ctx context.Context, req gateway.Request, emit func(gateway.Chunk) error,
	generate func(context.Context, gateway.Request) (gateway.Completion, error),
	stream func(gateway.StreamingProvider) (gateway.Completion, error)) (gateway.Completion, error) {
	if sp, ok := w.p.(gateway.StreamingProvider); ok {
		return stream(sp)
	}
	c, err := generate(ctx, req)
	if err == nil {
		err = emit(gateway.Chunk{Text: c.Text, Model: c.Model})
	}
	return c, err
}
