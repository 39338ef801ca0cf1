package breaker

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine running — a
// breaker that flips its state with a timer goroutine fails here.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
