package tenant

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/production-go/gateway-lab/gateway/internal/inflight"
	"github.com/production-go/gateway-lab/gateway/policy"
	admission "github.com/production-go/gateway-lab/solutions/02-admission"
)

// Gate holds each tenant to its rate and to its requests in flight: the
// limits that cost nothing to check, asked once the caller is known and
// before a byte of its body is read. It is the one place a tenant's rate
// and in-flight cap are held in this process (a gate's Admit — secure_app's
// guard — adds what depends on the request: a tier's models, prompt size,
// tokens, and the cap shared by every replica). Safe for concurrent use.
type Gate struct {
	cfg GateConfig
	n   inflight.Counter
}

// GateConfig configures a Gate.
type GateConfig struct {
	// Limiter holds each tenant key to its rate (lab 02's token bucket, or
	// lab 07's Redis limiter shared by every replica). nil: no rate limit.
	// If it is also a Refunder, a request the gateway then turns away for
	// want of capacity gets its token back (see Enter).
	Limiter admission.Limiter
	// MaxInFlight caps each tenant's requests in flight, counted from Enter
	// until its leave; an Identity's own MaxInFlight, when smaller, is its
	// cap instead. 0: no cap but the Identity's.
	MaxInFlight int
	// Observer hears every refusal; nil hears nothing.
	Observer Observer
}

// Refunder is a GateConfig.Limiter that can give back the token Allow took.
type Refunder interface {
	Refund(ctx context.Context, key string) error
}

// Observer hears a Gate's refusals, for metrics.
type Observer interface {
	// Refused: a request of id was refused for limit (policy.LimitRate or
	// policy.LimitInFlight).
	Refused(id Identity, limit policy.Limit)
	// LimitFailed: the rate limiter could not decide, and the request was
	// refused (ErrLimitFailed).
	LimitFailed()
}

// Refusal is a request refused for one of its tenant's limits: a 429 whose
// Retry-After is RetryAfter. errors.As finds it.
type Refusal struct {
	Limit      policy.Limit  // policy.LimitRate or policy.LimitInFlight
	RetryAfter time.Duration // when asking again may succeed
	// Max is the cap that was reached, for policy.LimitInFlight; Own says
	// it was the identity's own (its tier's) rather than the gate's.
	Max int
	Own bool
}

func (r *Refusal) Error() string {
	if r.Limit == policy.LimitInFlight {
		return fmt.Sprintf("tenant: %d requests in flight already, retry after %s", r.Max, r.RetryAfter)
	}
	return fmt.Sprintf("tenant: over its rate, retry after %s", r.RetryAfter)
}

// ErrLimitFailed: the rate limiter could not decide (a shared one whose
// store is down, failing closed); the request was refused.
var ErrLimitFailed = errors.New("tenant: the rate limiter failed")

// busyRetry is the Retry-After of a request refused for its cap: a request
// in flight usually ends within about a second.
const busyRetry = time.Second

// NewGate returns a Gate.
func NewGate(cfg GateConfig) (*Gate, error) {
	if cfg.MaxInFlight < 0 {
		return nil, fmt.Errorf("tenant: MaxInFlight %d must not be negative", cfg.MaxInFlight)
	}
	return &Gate{cfg: cfg}, nil
}

// Enter counts one request of id against its cap, then holds it to its
// rate: a request over its cap takes no rate token. A refusal is a
// *Refusal; a limiter that cannot decide is ErrLimitFailed; a caller who
// left gets ctx's error. On success the caller calls leave exactly once,
// when the request ends, with refund true if the gateway turned the request
// away for want of capacity — it did no work, and was refused for what
// other tenants were doing — so that its rate token comes back (a
// Refunder's Refund, detached from the caller, best effort). A refusal the
// tenant caused itself keeps its token, so the rate still bounds a tenant
// that keeps asking while at its cap.
func (g *Gate) Enter(ctx context.Context, id Identity) (leave func(refund bool), err error) {
	if id.Key == "" {
		return nil, errors.New("tenant: an identity without a key")
	}
	capacity, own := g.capOf(id)
	if capacity > 0 && !g.n.Enter(id.Key, capacity) {
		g.refused(id, policy.LimitInFlight)
		return nil, &Refusal{Limit: policy.LimitInFlight, RetryAfter: busyRetry, Max: capacity, Own: own}
	}
	out := func() {
		if capacity > 0 {
			g.n.Leave(id.Key)
		}
	}
	if err := g.allow(ctx, id); err != nil {
		out()
		return nil, err
	}
	return func(refund bool) {
		out()
		if rf, ok := g.cfg.Limiter.(Refunder); ok && refund {
			_ = rf.Refund(context.WithoutCancel(ctx), id.Key)
		}
	}, nil
}

// capOf is id's cap, and whether it is the identity's own.
func (g *Gate) capOf(id Identity) (int, bool) {
	switch {
	case id.MaxInFlight > 0 && (g.cfg.MaxInFlight == 0 || id.MaxInFlight <= g.cfg.MaxInFlight):
		return id.MaxInFlight, true
	default:
		return g.cfg.MaxInFlight, false
	}
}

// allow asks the rate limiter, if there is one.
func (g *Gate) allow(ctx context.Context, id Identity) error {
	if g.cfg.Limiter == nil {
		return nil
	}
	d, err := g.cfg.Limiter.Allow(ctx, id.Key)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctx.Err() // the caller left: no failure of the limiter's
	case err != nil:
		if g.cfg.Observer != nil {
			g.cfg.Observer.LimitFailed()
		}
		return fmt.Errorf("%w: %w", ErrLimitFailed, err)
	case !d.Allowed:
		g.refused(id, policy.LimitRate)
		return &Refusal{Limit: policy.LimitRate, RetryAfter: d.RetryAfter}
	}
	return nil
}

func (g *Gate) refused(id Identity, limit policy.Limit) {
	if g.cfg.Observer != nil {
		g.cfg.Observer.Refused(id, limit)
	}
}

// Busy is how many tenants have a request in flight in this process: what
// the gate holds of them besides the limiter's own state. It shrinks back to
// zero when traffic stops.
func (g *Gate) Busy() int { return g.n.Busy() }
