//go:build !race

package router_test

import (
	"context"
	"testing"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTheDirectPathAllocatesLittle guards BenchmarkGenerate/direct's count
// (6 allocations a request: the attempt's context, admission's ticket and
// the run; docs/performance.md): a second context per request, or a
// closure that escapes, shows here before it shows in a profile. Not under
// -race, which allocates on its own.
func TestTheDirectPathAllocatesLittle(t *testing.T) {
	g, err := router.New(benchConfig(), honouring{})
	require.NoError(t, err)
	defer func() { assert.NoError(t, g.Close(context.Background())) }()
	req := router.Request{Tenant: "bench", Chat: chatapi.NewRequest("hi", false)}
	allocs := testing.AllocsPerRun(200, func() {
		if _, err := g.Generate(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	})
	assert.LessOrEqual(t, allocs, 8.0, "allocations per request on the direct path")
}
