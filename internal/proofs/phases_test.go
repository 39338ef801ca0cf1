package proofs

import (
	"fmt"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/linear"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
)

// clients is how many goroutines call at once: sixteen, over a few keys,
// so that every key sees calls overlap.
const clients = 16

// phases are the three every check runs (linear.OwnRedisPhases).
func phases(srv *redistest.Server, rec *linear.Recorder, keys []string, quiet, stall, restart time.Duration) []linear.Phase {
	return linear.OwnRedisPhases(srv, rec, clients, keys, quiet, stall, restart)
}

func keysOf(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%stenant-%d", prefix, i)
	}
	return keys
}

// long skips a check under -short (make test): each runs for seconds, and
// make integration runs them all, with a skip counted as a failure.
func long(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("a linearizability check takes seconds: make integration runs it")
	}
}
