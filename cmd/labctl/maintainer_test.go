package main

import (
	"strings"
	"testing"

	"github.com/production-go/gateway-lab/internal/labkit/gotest"
	"github.com/production-go/gateway-lab/internal/testkit/redismark"
	"github.com/stretchr/testify/assert"
)

func TestIntegrationGateCountsOnlyPassesOnRealRedis(t *testing.T) {
	real := "    x_test.go:9: " + redismark.Real + " at redis://127.0.0.1:6379/9 (REDIS_URL)\n"
	run := &gotest.Run{Packages: map[string]*gotest.PackageResult{
		"example.com/m/solutions/07-distlimit": {
			Status: gotest.Fail,
			Order:  []string{"TestIntegrationReal", "TestIntegrationFake", "TestIntegrationSkipped", "TestIntegrationRed"},
			Tests: map[string]*gotest.TestResult{
				"TestIntegrationReal":    {Name: "TestIntegrationReal", Status: gotest.Pass, Output: real},
				"TestIntegrationFake":    {Name: "TestIntegrationFake", Status: gotest.Pass, Output: "    x_test.go:3: miniredis\n"},
				"TestIntegrationSkipped": {Name: "TestIntegrationSkipped", Status: gotest.Skip},
				"TestIntegrationRed":     {Name: "TestIntegrationRed", Status: gotest.Fail, Output: real + "    x_test.go:12: 21 allowed, want 20\n"},
			},
		},
	}}
	g := judgeIntegration(run)
	g.require("TestIntegrationReal, TestIntegrationRenamed")
	assert.Equal(t, map[string]bool{"TestIntegrationReal": true}, g.passed, "only a pass that reached real Redis counts")
	assert.Equal(t, 4, g.ran)
	problems := strings.Join(g.problems, "\n")
	assert.Contains(t, problems, "TestIntegrationFake passed without using the real-Redis helper")
	assert.Contains(t, problems, "TestIntegrationSkipped skipped: the integration gate counts a skip as a failure")
	assert.Contains(t, problems, "TestIntegrationRed fail:\n    x_test.go:12: 21 allowed, want 20", "the failure's own line, not the helper's log")
	assert.Contains(t, problems, "TestIntegrationRenamed is required but did not run and pass")
	assert.Len(t, g.problems, 4)

	var out strings.Builder
	g.print(&out)
	assert.Regexp(t, `solutions/07-distlimit\.TestIntegrationReal\s+pass\s+✓`, out.String())
	assert.Regexp(t, `solutions/07-distlimit\.TestIntegrationFake\s+pass\s+✗`, out.String())
	assert.Contains(t, out.String(), "integration: 1 passed, 4 failed")
}
