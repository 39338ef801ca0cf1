package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/production-go/gateway-lab/gateway/tenant"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	"github.com/stretchr/testify/assert"
)

// unhealthy is ErrNoHealthyProvider with the time to the first probe, as
// the router returns it.
type unhealthy struct{ wait time.Duration }

func (u unhealthy) Error() string             { return "every breaker is open" }
func (u unhealthy) Unwrap() error             { return router.ErrNoHealthyProvider }
func (u unhealthy) RetryAfter() time.Duration { return u.wait }

// TestEveryRouterErrorHasItsStatusCodeAndRetryAfter is the table of what a
// caller is told for each way a request can fail.
func TestEveryRouterErrorHasItsStatusCodeAndRetryAfter(t *testing.T) {
	upstream := func(status int, retryAfter time.Duration) error {
		return chatapi.NewUpstreamError("up", status, []byte(`{"error":{"message":"from upstream","type":"t","code":"c"}}`), retryAfter)
	}
	for _, tc := range []struct {
		name       string
		err, cause error
		status     int
		code       string
		retryAfter time.Duration
	}{
		{"unknown provider", fmt.Errorf("x: %w", router.ErrUnknownProvider), nil, 404, "model_not_found", 0},
		{"invalid request", router.ErrInvalidRequest, nil, 400, "invalid_request", 0},
		{"rate limited, less than a second", &tenant.Refusal{Limit: policy.LimitRate, RetryAfter: 300 * time.Millisecond}, nil, 429, "rate_limited", time.Second},
		{"rate limited, longer", &tenant.Refusal{Limit: policy.LimitRate, RetryAfter: 2500 * time.Millisecond}, nil, 429, "rate_limited", 2500 * time.Millisecond},
		{"tenant busy", fmt.Errorf("x: %w", &tenant.Refusal{Limit: policy.LimitInFlight, RetryAfter: time.Second, Max: 2}), nil, 429, "too_many_concurrent_requests", time.Second},
		{"the caller's own cap", &tenant.Refusal{Limit: policy.LimitInFlight, RetryAfter: time.Second, Max: 2, Own: true}, nil, 429, "too_many_concurrent_requests", time.Second},
		{"overloaded", fmt.Errorf("x: %w", router.ErrOverloaded), nil, 503, "overloaded", time.Second},
		{"limiter failed", fmt.Errorf("x: %w", tenant.ErrLimitFailed), nil, 503, "rate_limiter_unavailable", time.Second},
		{"no healthy provider", unhealthy{7 * time.Second}, nil, 503, "no_healthy_provider", 7 * time.Second},
		{"closed", router.ErrClosed, nil, 503, "draining", time.Second},
		{"cut by the drain", context.Canceled, drain.ErrCut, 503, "draining", time.Second},
		{"upstream rate limited", upstream(429, 3*time.Second), nil, 429, "upstream_rate_limited", 3 * time.Second},
		{"upstream refusal passes on", upstream(400, 0), nil, 400, "c", 0},
		{"upstream refused the gateway's key", upstream(401, 0), nil, 502, "upstream_auth_failed", 0},
		{"upstream forbade the gateway", upstream(403, 0), nil, 502, "upstream_auth_failed", 0},
		{"a proxy wanted the gateway's credentials", upstream(407, 0), nil, 502, "upstream_auth_failed", 0},
		{"upstream 503", upstream(503, 0), nil, 502, "upstream_error", 0},
		{"client left", fmt.Errorf("x: %w", context.Canceled), nil, telemetry.StatusClientClosed, "client_closed", 0},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), nil, 504, "deadline_exceeded", 0},
		{"anything else", errors.New("malformed"), nil, 502, "upstream_error", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := classify(tc.err, tc.cause)
			if tc.code == "upstream_auth_failed" {
				assert.NotContains(t, e.Message, "from upstream", "the upstream's words may quote the gateway's key: never the caller's to read")
			}
			assert.Equal(t, tc.status, e.Status)
			assert.Equal(t, tc.code, e.Code)
			assert.Equal(t, tc.retryAfter, e.RetryAfter, "Retry-After, where the status says to come back")
			if tc.status == http.StatusServiceUnavailable {
				assert.Positive(t, e.RetryAfter, "every 503 says when to retry")
			}
		})
	}
}
