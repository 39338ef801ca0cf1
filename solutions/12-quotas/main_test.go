package quotas

import (
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
)

// TestMain fails the package if any test leaves a goroutine running, and
// stops the redis-server the real-Redis tests may have started.
func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }
