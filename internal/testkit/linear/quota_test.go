package linear

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
)

func reserveOp(client int, start, end float64, id, estimate int, d Decision) porcupine.Operation {
	return op(client, start, end, Reserve{ID: id, Estimate: estimate}, known(d))
}

func settleOp(client int, start, end float64, id, used int, applied bool) porcupine.Operation {
	return op(client, start, end, Settle{ID: id, Used: used}, Reply{Output: SettledOut{Applied: applied}})
}

func checkQuota(t *testing.T, h []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(Quota(600, 1), h, 10*time.Second) // 10 tokens a second
}

func TestAQuotaHistoryTheContractAllowsIsLinearizable(t *testing.T) {
	h := []porcupine.Operation{
		reserveOp(0, 0, 0.001, 1, 400, Decision{Allowed: true, Remaining: 200}),
		reserveOp(1, 0.002, 0.003, 2, 300, Decision{Remaining: 200, RetryAfter: 9998 * time.Millisecond}), // 200 left and 2 ms of refill: 100 short at 10 a second
		settleOp(0, 0.004, 0.005, 1, 100, true),                                                           // 300 back: 500
		reserveOp(1, 0.006, 0.007, 3, 300, Decision{Allowed: true, Remaining: 200}),
		settleOp(0, 0.008, 0.009, 1, 100, false), // settled already
	}
	assert.Equal(t, porcupine.Ok, checkQuota(t, h))
}

func TestTwoReservesTheBucketCannotHoldAreCaught(t *testing.T) {
	h := []porcupine.Operation{
		reserveOp(0, 0, 0.001, 1, 400, Decision{Allowed: true, Remaining: 200}),
		reserveOp(1, 0.002, 0.003, 2, 400, Decision{Allowed: true, Remaining: 0}),
	}
	assert.Equal(t, porcupine.Illegal, checkQuota(t, h))
}

func TestASettleAppliedTwiceIsCaught(t *testing.T) {
	h := []porcupine.Operation{
		reserveOp(0, 0, 0.001, 1, 400, Decision{Allowed: true, Remaining: 200}),
		settleOp(0, 0.002, 0.003, 1, 0, true),
		settleOp(1, 0.004, 0.005, 1, 0, true),
	}
	assert.Equal(t, porcupine.Illegal, checkQuota(t, h))
}

func TestARefundThatNeverCameIsCaught(t *testing.T) {
	refused := reserveOp(1, 0.004, 0.005, 2, 300, Decision{Remaining: 100, RetryAfter: 19996 * time.Millisecond})
	h := []porcupine.Operation{
		reserveOp(0, 0, 0.001, 1, 500, Decision{Allowed: true, Remaining: 100}),
		settleOp(0, 0.002, 0.003, 1, 0, true), // all 500 back: full
		refused,                               // as if the refund had not come
	}
	assert.Equal(t, porcupine.Illegal, checkQuota(t, h), "the refund filled the bucket: 300 fit")
	h[1] = settleOp(0, 0.002, 0.003, 1, 0, false)
	assert.Equal(t, porcupine.Illegal, checkQuota(t, h), "an open reservation's settle applies")
	h[1] = settleOp(0, 0.006, 0.007, 1, 0, true)
	assert.Equal(t, porcupine.Ok, checkQuota(t, h), "a refund after the refusal")
}

func TestALateReserveAfterItsSettleTakesNothing(t *testing.T) {
	late := op(0, 0, 0.01, Reserve{ID: 1, Estimate: 500}, Reply{Unknown: true})
	h := []porcupine.Operation{late,
		op(0, 0.011, 0.012, Settle{ID: 1, Used: 0, Late: true}, Reply{Output: SettledOut{Applied: false}}),
		reserveOp(1, 0.02, 0.021, 2, 600, Decision{Allowed: true, Remaining: 0}),
	}
	assert.Equal(t, porcupine.Ok, checkQuota(t, h), "the settle came first: the reserve took nothing, the bucket is full")
}
