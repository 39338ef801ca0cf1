package gateway

import "time"

// Observer receives the gateway's measurements, so this package does not
// depend on Prometheus. Methods run on the request path: they must be quick
// and safe for concurrent use.
type Observer interface {
	// Admitted: a request got a slot after waiting queueWait.
	Admitted(tenant string, queueWait time.Duration)
	// Rejected: a request was refused before any provider call. reason is
	// "rate_limited", "overloaded", "closed" or "cancelled".
	Rejected(tenant, reason string)
	// Attempt: one provider call ended (err nil on success).
	Attempt(provider string, attempt int, took time.Duration, err error)
	// BreakerChanged: a provider's breaker moved between "closed", "open", "half-open".
	BreakerChanged(provider, from, to string)
	// Late: a provider call finished after its attempt had given up on it
	// (a provider that ignored its context); took is the call's whole duration.
	Late(took time.Duration, err error)
}

// Observer.Rejected's reasons: a caller who left is not an overload.
const (
	rejectRateLimited = "rate_limited"
	rejectOverloaded  = "overloaded"
	rejectClosed      = "closed"
	rejectCancelled   = "cancelled"
)

// NopObserver ignores everything.
type NopObserver struct{}

func (NopObserver) Admitted(string, time.Duration)            {}
func (NopObserver) Rejected(string, string)                   {}
func (NopObserver) Attempt(string, int, time.Duration, error) {}
func (NopObserver) BreakerChanged(string, string, string)     {}
func (NopObserver) Late(time.Duration, error)                 {}
