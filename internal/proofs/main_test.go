package proofs

import (
	"testing"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }
