package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/promtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counter reads one labelled series of a counter; 0 when it does not exist yet.
var counter = promtest.Counter

// TestTimeoutsAndCancellationsAreCounted: the numbers an incident needs
// besides latency — timeouts by layer, and callers who left — are counted,
// and every request lands in the latency histogram p95/p99 are read from.
func TestTimeoutsAndCancellationsAreCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, baseConfig(), silent{"alpha"}) // 2 s attempts under a 5 s total

		rec := r.do(http.MethodPost, "/v1/chat/completions", chatBody)
		require.Equal(t, http.StatusGatewayTimeout, rec.Code)
		assert.Equal(t, 1.0, counter(t, r.reg, "gateway_timeouts_total", "layer", "total"), "the 504 counts as a total-deadline timeout")
		assert.GreaterOrEqual(t, counter(t, r.reg, "gateway_timeouts_total", "layer", "attempt"), 2.0, "each 2 s attempt that ran out counts as an attempt timeout")
		assert.Equal(t, 0.0, counter(t, r.reg, "gateway_cancellations_total"), "a timeout is not a cancellation")

		// A fresh gateway: the three timeouts above opened alpha's breaker.
		c := newRig(t, baseConfig(), silent{"alpha"})
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel) // the client leaves after 1 s (fake time)
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chatBody)).WithContext(ctx)
		req.Header.Set("Content-Type", "application/json")
		c.srv.ServeHTTP(httptest.NewRecorder(), req)
		assert.Equal(t, 1.0, counter(t, c.reg, "gateway_cancellations_total"), "a client that left is counted")
		assert.Equal(t, 0.0, counter(t, c.reg, "gateway_timeouts_total", "layer", "total"), "and is not a timeout")

		for _, rg := range []*rig{r, c} {
			count, _ := histogram(t, rg.reg, "gateway_http_request_duration_seconds")
			assert.Equal(t, uint64(1), count, "the request is in the latency histogram, whatever its end")
		}
	})
}
