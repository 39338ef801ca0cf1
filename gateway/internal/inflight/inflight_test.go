package inflight

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEachKeyIsHeldToItsLimitAndForgottenWhenIdle(t *testing.T) {
	var c Counter
	assert.True(t, c.Enter("a", 2))
	assert.True(t, c.Enter("a", 2))
	assert.False(t, c.Enter("a", 2), "a has 2 in flight: at its limit")
	assert.True(t, c.Enter("b", 1), "b is counted apart")
	assert.False(t, c.Enter("b", 1))
	assert.Equal(t, 2, c.Busy())
	c.Leave("a")
	assert.True(t, c.Enter("a", 2), "a place given back is taken again")
	c.Leave("a")
	c.Leave("a")
	c.Leave("b")
	assert.Zero(t, c.Busy(), "an idle key holds no entry")
}

func TestABurstOfKeysLeavesNoMapBehind(t *testing.T) {
	var c Counter
	for i := range 100 {
		assert.True(t, c.Enter(fmt.Sprint(i), 1))
	}
	for i := range 100 {
		c.Leave(fmt.Sprint(i))
	}
	assert.Nil(t, c.n, "the map that held 100 keys is dropped once they are all idle")
	assert.True(t, c.Enter("x", 1), "and the counter works on")
}
