package linear

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
)

func hold(client int, start, end float64, id int, allowed bool, left int) porcupine.Operation {
	return op(client, start, end, Hold{ID: id}, known(Decision{Allowed: allowed, Remaining: left}))
}

func release(client int, start, end float64, id int) porcupine.Operation {
	return op(client, start, end, Release{ID: id}, Reply{})
}

func checkLeases(t *testing.T, max int, h []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(Leases(max), h, 10*time.Second)
}

func TestLeasesAllowUpToTheCapAndFreeOnRelease(t *testing.T) {
	h := []porcupine.Operation{
		hold(0, 0, 1, 1, true, 1), hold(1, 2, 3, 2, true, 0), hold(2, 4, 5, 3, false, 0),
		release(0, 6, 7, 1), hold(2, 8, 9, 4, true, 0),
	}
	assert.Equal(t, porcupine.Ok, checkLeases(t, 2, h))
}

func TestThreeHoldersOfTwoSlotsAreCaught(t *testing.T) {
	h := []porcupine.Operation{hold(0, 0, 1, 1, true, 1), hold(1, 2, 3, 2, true, 0), hold(2, 4, 5, 3, true, 0)}
	assert.Equal(t, porcupine.Illegal, checkLeases(t, 2, h))
}

func TestAWrongCountOfSlotsLeftIsCaught(t *testing.T) {
	h := []porcupine.Operation{hold(0, 0, 1, 1, true, 1), hold(1, 2, 3, 2, true, 1)}
	assert.Equal(t, porcupine.Illegal, checkLeases(t, 2, h))
}

func TestARefusalWithAFreeSlotIsCaught(t *testing.T) {
	h := []porcupine.Operation{hold(0, 0, 1, 1, true, 0), release(0, 2, 3, 1), hold(1, 4, 5, 2, false, 0)}
	assert.Equal(t, porcupine.Illegal, checkLeases(t, 1, h), "the release ran before the hold: the slot was free")
	h[1] = release(0, 2, 6, 1) // overlapping: the hold may have come first
	assert.Equal(t, porcupine.Ok, checkLeases(t, 1, h))
}

func TestAGivenUpHoldMayTakeASlotOnlyUntilTheFaultIsOver(t *testing.T) {
	ghost := op(0, 0, 10, Hold{ID: 9}, Reply{Unknown: true})
	settled := op(3, 10, 10, Settled{}, Reply{Output: Settled{}})
	h := []porcupine.Operation{ghost,
		hold(1, 1, 2, 1, true, 0), // the ghost took the other slot
		hold(2, 3, 4, 2, false, 0),
		settled,
		hold(2, 11, 12, 3, true, 0)} // gone by the mark
	assert.Equal(t, porcupine.Ok, checkLeases(t, 2, h))
	h[4] = hold(2, 11, 12, 3, false, 0)
	assert.Equal(t, porcupine.Illegal, checkLeases(t, 2, h), "after the mark the ghost holds nothing: one slot is free")
}

func TestARestartLosesEveryLease(t *testing.T) {
	h := []porcupine.Operation{hold(0, 0, 1, 1, true, 0), hold(1, 2, 3, 2, false, 0),
		op(3, 4, 5, Restart{}, Reply{Output: Restart{}}), hold(1, 6, 7, 3, true, 0), release(0, 8, 9, 1)}
	assert.Equal(t, porcupine.Ok, checkLeases(t, 1, h))
}
