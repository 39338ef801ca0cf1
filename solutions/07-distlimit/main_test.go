package distlimit

import (
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
)

// TestMain fails the package if any test leaves a goroutine running, and
// stops the redis-server the real-Redis test may have started.
func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }
