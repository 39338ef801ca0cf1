// Package tenant is what the HTTP layer and a tenant gate say to each
// other: who is asking (Identity, carried in the request's context), what
// they ask to be admitted for (Admission), and how the gate hears how the
// request ended (Done). The HTTP layer identifies and admits through it;
// the gate (gateway/guard in secure_app) implements it without knowing
// HTTP, so the domain sits below the HTTP layer, never above it.
package tenant

import (
	"context"

	"github.com/production-go/gateway-lab/gateway/llm"
)

// Identity is who is asking.
type Identity struct {
	// Key is the tenant's rate-limit and quota key; never empty.
	Key string
	// Tenant is the tenant as it was named, for logs; "" when anonymous.
	Tenant string
	// Tier is the tenant's tier, when the identity carries one (secure_app).
	Tier string
	// MaxBodyBytes, if positive and below Options.MaxBodyBytes, is the most
	// body this caller may send (its tier's limit): a larger one is refused
	// before it is read.
	MaxBodyBytes int64
	// MaxInFlight, if positive, is how many requests under this Key the
	// server takes at once, each counted from the moment it is identified
	// until its answer is written. One more is refused with 429 before
	// anything else runs — the rate limit's round trip included — so a
	// caller that floods the gateway holds at most this many of what its
	// requests share (a Redis connection pool, say), however many it sends.
	// Set it no lower than what the caller may have in flight anyway (its
	// tier's cap): it only refuses what would have been refused later.
	MaxInFlight int
}

type identityKey struct{}

// WithIdentity returns ctx carrying id, as the HTTP layer passes each
// request's identity on to the router (and to a limiter that needs the
// tier, say).
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity the HTTP layer put in a request's context
// (for a limiter that needs the tier, say).
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}

// Done is what a gate's admission returns: called once when the request
// ends, with the upstream's usage (nil if none came) and the router's
// error (nil on success).
type Done func(usage *llm.Usage, err error)

// Pass is what a gate's admission gives a request it lets in.
type Pass struct {
	// Done, if set, is called once when the request ends.
	Done Done
	// Meter, if set, charges each upstream call the request makes (it
	// rides on every llm.Request of it; llm.Metered runs the calls through
	// it); nil when nothing is metered.
	Meter llm.Meter
}

// Admission is what a gate is shown of a request before it admits it.
type Admission struct {
	Model     string // the public model name asked for; "auto" when none
	BodyBytes int    // the request body's size
	MaxTokens int    // the caller's limit on each answer's tokens; 0 if unset
	Choices   int    // how many answers the caller asked for ("n"); 0 if unset (one)
	// MediaParts is how many content parts are not text (images, audio,
	// files), whose tokens the body's size does not show.
	MediaParts int
	Stream     bool
}
