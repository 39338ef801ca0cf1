package gotest

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestHangWatchStopsOnlyATestRunningAloneAndPastTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stopped := 0
		h := newHangWatch(time.Second, func() { stopped++ })
		h.event(Event{Action: "run", Test: "TestA"})
		h.event(Event{Action: "run", Test: "TestB"})
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, 0, stopped, "two running: not for the watch to guess which one holds the binary")
		h.event(Event{Action: "output", Test: "TestA", Output: "--- PASS: TestA (2.00s)\n"})
		h.event(Event{Action: "run", Test: "TestB/sub"})
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 1, stopped, "TestA's own report line ended it (its event is held back): TestB alone, past the limit")
		assert.Equal(t, "TestB", h.close())

		h = newHangWatch(time.Second, func() { stopped++ })
		h.event(Event{Action: "run", Test: "TestC"})
		h.event(Event{Action: "pause", Test: "TestC"})
		h.event(Event{Action: "run", Test: "TestD"})
		h.event(Event{Action: "pass", Test: "TestD"})
		time.Sleep(5 * time.Second)
		synctest.Wait()
		h.event(Event{Action: "cont", Test: "TestC"})
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 1, stopped, "a paused test is not running; its clock starts again at cont")
		assert.Empty(t, h.close())
		assert.Empty(t, (*hangWatch)(nil).close(), "no watch: nothing stopped")
	})
}
