// Package llm is the provider contract: what the router asks of a model
// provider and what it gets back, and what a provider's errors may say.
//
// A request is the caller's OpenAI chat request as sent (package chatapi
// keeps its bytes) plus the upstream model to ask for; an answer is the
// upstream's own bytes plus the little the gateway reads from them (the
// model that answered, the tokens it used). Providers, the mock upstream and
// the router depend on this package and on chatapi only: nothing here pulls
// in admission, breakers, bridges, Prometheus or OpenTelemetry.
//
// A provider may promise more than Provider asks, through small optional
// interfaces the router looks for: StreamingProvider (it streams),
// DefaultModeler (it names the model it asks for by default) and
// ContextHonourer (it returns promptly once its context ends, so it needs
// no goroutine of its own to be abandoned on).
package llm

import (
	"context"
	"errors"

	"github.com/production-go/gateway-lab/gateway/chatapi"
)

// Request is one call to a provider.
type Request struct {
	// Chat is the caller's OpenAI chat request as sent. A provider that
	// speaks the same wire format forwards it (with Model); others read
	// what they need from it. Never nil.
	Chat *chatapi.Request
	// Model is the upstream model to ask for; "" means the provider's own
	// default.
	Model string
	// Meter, if set, is the accounting of the caller's request that this
	// call is made for (a tenant gate's token quota): every call of one
	// request carries the same one, and Metered runs each through it.
	// Providers themselves never look at it.
	Meter Meter
}

// Meter is one request's accounting, kept by a tenant gate (gateway/guard
// charges its tenant's token quota): every upstream call the request makes
// runs through Call, which may refuse it before it is sent (an error
// wrapping ErrNotSent), may cap what it asks for, and sets the
// Completion's Charged to what it cost — whatever its error.
type Meter interface {
	Call(ctx context.Context, req Request, emit func(Chunk) error, call Call) (Completion, error)
}

// Call is one upstream call as a Meter runs it; emit is nil for a whole
// answer.
type Call func(ctx context.Context, req Request, emit func(Chunk) error) (Completion, error)

// Metered wraps p so that each call to it runs through its request's Meter
// (Request.Meter); a request without one passes through. It must wrap the
// provider itself, inside any middleware that calls it more than once per
// request (hedging), so that each call is charged.
func Metered(p Provider) Provider { return metered{Wrapped{Inner: p}} }

type metered struct{ Wrapped }

func (p metered) Generate(ctx context.Context, req Request) (Completion, error) {
	m := req.Meter
	if m == nil {
		return Generate(ctx, p.Inner, req)
	}
	req.Meter = nil // charged here: a meter further in must not charge it again
	return m.Call(ctx, req, nil, func(ctx context.Context, req Request, _ func(Chunk) error) (Completion, error) {
		return Generate(ctx, p.Inner, req) // a panic in the call comes back as ErrPanic
	})
}

func (p metered) Stream(ctx context.Context, req Request, emit func(Chunk) error) (Completion, error) {
	m := req.Meter
	if m == nil {
		return Stream(ctx, p.Inner, req, emit)
	}
	req.Meter = nil
	return m.Call(ctx, req, emit, func(ctx context.Context, req Request, emit func(Chunk) error) (Completion, error) {
		return Stream(ctx, p.Inner, req, emit)
	})
}

// Completion is a provider's whole answer.
type Completion struct {
	// Raw is the answer as an OpenAI chat.completion object — what the
	// caller receives, byte for byte.
	Raw []byte
	// Model is the upstream model that answered, if the provider knows.
	Model string
	// Usage is the token accounting the upstream reported; nil if it did
	// not. For a stream, it is what the stream's last chunks said.
	Usage *Usage
	// Charged is what a middleware that bills calls charged the tenant for
	// this one, told as a usage (a Meter sets it, whatever the call's
	// error); nil where nothing bills. A router that tells a caller the
	// usage of an answer several calls wrote sums it, so the caller is told
	// what the tenant pays.
	Charged *Usage
}

// Chunk is one piece of a streamed answer.
type Chunk struct {
	// Raw is one chat.completion.chunk event's data, as the upstream sent it.
	Raw []byte
	// Piece is what the provider read of Raw, when it read it already (an
	// upstream's stream is read once, where it arrives); nil for a
	// provider that passes Raw on unread. PieceOf reads either.
	Piece *chatapi.Piece
}

// PieceOf is what c adds to an answer: the provider's reading of it, or a
// reading of Raw when the provider made none.
func PieceOf(c Chunk) (chatapi.Piece, error) {
	if c.Piece != nil {
		return *c.Piece, nil
	}
	return chatapi.ReadPiece(c.Raw)
}

// Usage is an upstream's token accounting, in the wire format's own shape.
type Usage = chatapi.Usage

// Provider answers chat requests. Generate answers whole, whatever the
// caller's request says of streaming (Request.Chat is the caller's, as
// sent: chatapi.Request.Upstream makes the body to forward). Generate
// should honour ctx.
type Provider interface {
	Name() string
	Generate(ctx context.Context, req Request) (Completion, error)
}

// StreamingProvider is a Provider that can stream its answer. emit sends
// one chunk on towards the caller; an error from emit means the caller is
// gone (or the router cut the attempt), and Stream should return it.
type StreamingProvider interface {
	Provider
	Stream(ctx context.Context, req Request, emit func(Chunk) error) (Completion, error)
}

// DefaultModeler is a Provider that names the upstream model it asks for
// when a request names none, so that "no model" and that model are one
// target with one breaker, not two.
type DefaultModeler interface{ DefaultModel() string }

// ContextHonourer is a Provider that returns promptly once its context
// ends (an HTTP client does). The router calls it on the request's own
// goroutine; a provider without the promise runs where an attempt that
// gives up on it can leave it behind.
type ContextHonourer interface{ HonoursContext() bool }

// Prober is a Provider that can check its upstream is answering without
// a caller's request: a one-token completion of model, or a models list
// ("" for its default). The router probes a target whose breaker opened,
// and closes the breaker when a probe succeeds.
type Prober interface {
	Probe(ctx context.Context, model string) error
}

// ErrNoProbe: the provider cannot be probed (see Probe).
var ErrNoProbe = errors.New("llm: the provider cannot be probed")

// Probe asks p whether its upstream answers for model; ErrNoProbe when p
// is not a Prober. A panic in the probe comes back as an error wrapping
// ErrPanic, as in Generate.
func Probe(ctx context.Context, p Provider, model string) (err error) {
	pr, ok := p.(Prober)
	if !ok {
		return ErrNoProbe
	}
	defer recovered(p, &err)
	return pr.Probe(ctx, model)
}

// Prefiller is a Provider whose upstream continues an assistant prefill
// (see chatapi.WithPrefill) in a style other than chatapi.PrefillAssistant.
type Prefiller interface{ PrefillStyle() chatapi.PrefillStyle }

// PrefillStyle is the style p's upstream reads a prefill in:
// chatapi.PrefillAssistant unless p says otherwise. Whether the upstream
// continues a prefill at all is the route's to declare, not the provider's.
func PrefillStyle(p Provider) chatapi.PrefillStyle {
	if pf, ok := p.(Prefiller); ok && pf.PrefillStyle() != "" {
		return pf.PrefillStyle()
	}
	return chatapi.PrefillAssistant
}

// HonoursContext reports whether p promises to return promptly once its
// context ends.
func HonoursContext(p Provider) bool {
	h, ok := p.(ContextHonourer)
	return ok && h.HonoursContext()
}

// DefaultModel is the model p names as its default, or "".
func DefaultModel(p Provider) string {
	if dm, ok := p.(DefaultModeler); ok {
		return dm.DefaultModel()
	}
	return ""
}

// Wrapped is what a provider middleware embeds: it passes the wrapped
// provider's name and optional promises through, so a wrapped provider
// that names its default model still does, and one that honours its
// context is still called directly.
type Wrapped struct{ Inner Provider }

// Name is the wrapped provider's.
func (w Wrapped) Name() string { return w.Inner.Name() }

// DefaultModel is the wrapped provider's, or "".
func (w Wrapped) DefaultModel() string { return DefaultModel(w.Inner) }

// Probe is the wrapped provider's: a health check passes the middleware
// by, as it spends no tenant's tokens or slots.
func (w Wrapped) Probe(ctx context.Context, model string) error { return Probe(ctx, w.Inner, model) }

// PrefillStyle is the wrapped provider's.
func (w Wrapped) PrefillStyle() chatapi.PrefillStyle { return PrefillStyle(w.Inner) }

// HonoursContext is the wrapped provider's: a middleware itself never
// outlives its context.
func (w Wrapped) HonoursContext() bool { return HonoursContext(w.Inner) }
