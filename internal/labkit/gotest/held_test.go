package gotest

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeldReportsAreSettledFromTheTestsOwnLines(t *testing.T) {
	events := strings.Join([]string{
		`{"Action":"run","Package":"p","Test":"TestA"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: want 4\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"--- FAIL: TestA (0.10s)\n"}`,
		`{"Action":"run","Package":"p","Test":"TestB"}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"--- PASS: TestB/sub (0.00s)\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\n"}`,
	}, "\n")
	run, err := parseEvents(strings.NewReader(events), nil)
	require.NoError(t, err)
	p := run.Packages["p"]
	assert.Equal(t, Fail, p.Test("TestA").Status, "its event never came; its own line says how it ended")
	assert.Equal(t, 100*time.Millisecond, p.Test("TestA").Elapsed)
	assert.Equal(t, NotRun, p.Test("TestB").Status, "a subtest's line is not the test's end")
}
