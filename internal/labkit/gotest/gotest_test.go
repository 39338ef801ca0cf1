package gotest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseEventsCollectsTestsAndBuildFailures(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"m/a"}`,
		`{"Action":"run","Package":"m/a","Test":"TestX"}`,
		`{"Action":"output","Package":"m/a","Test":"TestX","Output":"=== RUN   TestX\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestX/sub","Output":"    x_test.go:9: boom\n"}`,
		`{"Action":"fail","Package":"m/a","Test":"TestX/sub","Elapsed":0}`,
		`{"Action":"fail","Package":"m/a","Test":"TestX","Elapsed":0.5}`,
		`{"Action":"pass","Package":"m/a","Test":"TestY","Elapsed":0}`,
		`{"Action":"fail","Package":"m/a","Elapsed":0.6}`,
		`{"ImportPath":"m/b","Action":"build-output","Output":"b.go:3: undefined: x\n"}`,
		`{"ImportPath":"m/b","Action":"build-fail"}`,
		`{"Action":"fail","Package":"m/b","Elapsed":0,"FailedBuild":"m/b"}`,
	}, "\n")
	run, err := parseEvents(strings.NewReader(stream), nil)
	require.NoError(t, err)
	a := run.Package("a")
	require.NotNil(t, a)
	assert.Equal(t, Fail, a.Test("TestX").Status)
	assert.Contains(t, a.Test("TestX").Output, "boom", "a subtest's output belongs to its top-level test")
	assert.Equal(t, Pass, a.Test("TestY").Status)
	assert.Equal(t, NotRun, a.Test("TestZ").Status)
	assert.Equal(t, []string{"TestX", "TestY"}, a.Order)
	assert.Equal(t, "boom", strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(FailureMessage(a.Test("TestX").Output)), "x_test.go:9:")))
	b := run.Package("b")
	require.NotNil(t, b)
	assert.True(t, b.BuildFailed)
	assert.Contains(t, b.Output, "undefined: x")
}

func TestFailureMessageDropsGoroutineDumps(t *testing.T) {
	msg := FailureMessage("=== RUN   TestX\npanic: deadlock: main bubble goroutine has exited but blocked goroutines remain\n\ngoroutine 7 [running]:\nmain.f()\n")
	assert.Contains(t, msg, "every goroutine needs an owner")
	assert.NotContains(t, msg, "main.f()")
}

func TestRaceRunsSkipTheExitSleepUnlessToldOtherwise(t *testing.T) {
	assert.Equal(t, "atexit_sleep_ms=0", noExitSleep(""))
	assert.Equal(t, "halt_on_error=1 atexit_sleep_ms=0", noExitSleep("halt_on_error=1"), "other options are kept")
	assert.Equal(t, "atexit_sleep_ms=500", noExitSleep("atexit_sleep_ms=500"), "a value the user chose wins")
}
