package linear

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sim is lab 07's script, in Go, for histories made up by the tests: the
// model must accept every sequence it produces.
type sim struct {
	rate, burst float64
	tokens, ts  float64
	fresh       bool
}

func (s *sim) allow(now float64) Decision {
	if s.fresh {
		s.tokens, s.ts, s.fresh = s.burst, now, false
	}
	if now > s.ts {
		s.tokens = math.Min(s.burst, s.tokens+(now-s.ts)*s.rate)
		s.ts = now
	}
	if s.tokens >= 1 {
		s.tokens--
		return Decision{Allowed: true, Remaining: int(math.Floor(s.tokens))}
	}
	us := math.Ceil((1 - s.tokens) * 1e6 / s.rate)
	return Decision{RetryAfter: time.Duration(us) * time.Microsecond}
}

// op is one call on key "k" over [start, end] seconds.
func op(client int, start, end float64, in any, out Reply) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Call: int64(start * 1e6), Return: int64(end * 1e6),
		Input: Call{Key: "k", Start: start, End: end, Input: in}, Output: out}
}

func known(d Decision) Reply { return Reply{Output: d} }

func check(t *testing.T, rate float64, burst int, h []porcupine.Operation) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(Bucket(rate, burst), h, 10*time.Second)
}

func TestASequenceTheScriptProducesIsLinearizable(t *testing.T) {
	s := &sim{rate: 2, burst: 3, fresh: true}
	var h []porcupine.Operation
	for i := range 40 {
		at := float64(i) * 0.13 // refills and refusals mixed
		h = append(h, op(i%4, at, at+0.001, Allow{}, known(s.allow(at+0.0005))))
	}
	assert.Equal(t, porcupine.Ok, check(t, 2, 3, h))
}

func TestTwoCallersToldTheSameLastTokenAreCaught(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 0, 0.001, Allow{}, known(Decision{Allowed: true, Remaining: 0})),
		op(1, 0.002, 0.003, Allow{}, known(Decision{Allowed: true, Remaining: 0})),
	}
	assert.Equal(t, porcupine.Illegal, check(t, 0.01, 1, h), "one token, no refill to speak of: two callers cannot both have it")
	h[1].Output = known(Decision{RetryAfter: 99998 * time.Millisecond})
	assert.Equal(t, porcupine.Ok, check(t, 0.01, 1, h))
}

func TestARetryAfterThatPromisesTooMuchIsCaught(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 0, 0.001, Allow{}, known(Decision{Allowed: true})),
		op(1, 0.002, 0.003, Allow{}, known(Decision{RetryAfter: 200 * time.Millisecond})), // the truth is about 998 ms
	}
	assert.Equal(t, porcupine.Illegal, check(t, 1, 1, h))
	h[1].Output = known(Decision{RetryAfter: 998 * time.Millisecond})
	assert.Equal(t, porcupine.Ok, check(t, 1, 1, h))
}

func TestACallThatSeesTokensBeforeTheyRefillIsCaught(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 0, 0.001, Allow{}, known(Decision{Allowed: true})),
		op(1, 0.5, 0.501, Allow{}, known(Decision{Allowed: true})), // 1 token a second: half a token back
	}
	assert.Equal(t, porcupine.Illegal, check(t, 1, 1, h))
	h[1].Call, h[1].Return = 1.01e6, 1.011e6
	h[1].Input = Call{Key: "k", Start: 1.01, End: 1.011, Input: Allow{}}
	assert.Equal(t, porcupine.Ok, check(t, 1, 1, h))
}

func TestACallOfUnknownOutcomeMayHaveTakenATokenOrNot(t *testing.T) {
	unknown := op(2, 0, math.Inf(1), Allow{}, Reply{Unknown: true})
	unknown.Input = Call{Key: "k", Start: 0, End: math.Inf(1), Input: Allow{}, UnknownAfter: true}
	unknown.Return = int64(10 * 1e6)
	took := []porcupine.Operation{unknown, op(0, 1, 1.001, Allow{}, known(Decision{Allowed: true, Remaining: 0}))}
	assert.Equal(t, porcupine.Ok, check(t, 0.001, 2, took), "it took one of the two")
	didNot := []porcupine.Operation{unknown, op(0, 1, 1.001, Allow{}, known(Decision{Allowed: true, Remaining: 1}))}
	assert.Equal(t, porcupine.Ok, check(t, 0.001, 2, didNot), "or it has not run yet")
	h := []porcupine.Operation{unknown,
		op(0, 1, 1.001, Allow{}, known(Decision{Allowed: true, Remaining: 1})),
		op(1, 2, 2.001, Allow{}, known(Decision{Allowed: true, Remaining: 0})),
		op(0, 3, 3.001, Allow{}, known(Decision{Allowed: true, Remaining: 0}))}
	assert.Equal(t, porcupine.Illegal, check(t, 0.001, 2, h), "two tokens, three known takers: one too many, whatever the unknown did")
}

func TestARestartRefillsEveryBucket(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 0, 0.001, Allow{}, known(Decision{Allowed: true})),
		op(1, 0.002, 0.003, Allow{}, known(Decision{Allowed: true})),
	}
	assert.Equal(t, porcupine.Illegal, check(t, 0.001, 1, h))
	restart := op(9, 0.0015, 0.0018, Restart{}, Reply{Output: Restart{}})
	assert.Equal(t, porcupine.Ok, check(t, 0.001, 1, append(h, restart)), "the restart forgot the spent bucket")
}

func TestTheNaiveLimitersBoolIsReadAlone(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 0, 0.001, Allow{}, known(Decision{Allowed: true, OnlyAllowed: true})),
		op(1, 0.002, 0.003, Allow{}, known(Decision{Allowed: true, OnlyAllowed: true})),
	}
	assert.Equal(t, porcupine.Ok, check(t, 0.001, 2, h))
	h = append(h, op(2, 0.004, 0.005, Allow{}, known(Decision{Allowed: true, OnlyAllowed: true})))
	assert.Equal(t, porcupine.Illegal, check(t, 0.001, 2, h))
}

func TestTheRecorderGivesAnUnknownCallTheEndOfTheHistory(t *testing.T) {
	r := NewRecorder()
	r.Record(0, "a", Allow{}, func() (any, bool) { return nil, false })
	r.Record(1, "b", Allow{}, func() (any, bool) { return Decision{Allowed: true}, true })
	h := r.History()
	calls, unknown := Counts(h)
	assert.Equal(t, 2, calls)
	assert.Equal(t, 1, unknown)
	assert.Equal(t, h[1].Return, h[0].Return, "the unknown call may take effect until the history ends")
	assert.True(t, h[0].Input.(Call).UnknownAfter)
	assert.Len(t, ByKey(h), 2)
}

func TestASettleMarkBoundsAnUnknownCallAndNotRunIsLeftOut(t *testing.T) {
	r := NewRecorder()
	r.Record(0, "a", Allow{}, func() (any, bool) { return nil, false })
	r.Settle()
	r.Record(1, "a", Allow{}, func() (any, bool) { return NotRun, false })
	r.Record(1, "a", Allow{}, func() (any, bool) { return Decision{Allowed: true}, true })
	h := r.History()
	assert.Len(t, h, 3, "the unknown call, the mark, the known call: the call that never ran is not in the history")
	assert.Equal(t, Settled{}, h[1].Input.(Call).Input, "the mark is a call on every key seen")
	assert.Equal(t, 1, h[1].ClientId, "on the row after the clients recorded so far")
	assert.LessOrEqual(t, h[0].Return, h[2].Call, "the unknown call took effect, if at all, by the mark")
	assert.True(t, h[0].Input.(Call).UnknownAfter)
}

func TestAFailedCheckWritesItsDrawingAndSaysWhere(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(OutDirEnv, dir)
	h := []porcupine.Operation{
		op(0, 0, 0.001, Allow{}, known(Decision{Allowed: true})),
		op(1, 0.002, 0.003, Allow{}, known(Decision{Allowed: true})),
	}
	rec := &logs{TB: t}
	assert.Equal(t, porcupine.Illegal, Check(rec, "two takers", Bucket(0.001, 1), h, 10*time.Second))
	files, err := filepath.Glob(filepath.Join(dir, "two-takers-*.html"))
	require.NoError(t, err)
	require.Len(t, files, 1, "one drawing, named for the check")
	page, err := os.ReadFile(files[0])
	require.NoError(t, err)
	assert.Contains(t, string(page), "allow → yes", "the calls are described in the drawing")
	assert.Contains(t, strings.Join(rec.lines, "\n"), files[0], "its path is printed")
}

// logs is a testing.TB that keeps what Check logs.
type logs struct {
	testing.TB
	lines []string
}

func (l *logs) Logf(format string, args ...any) {
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}
func (l *logs) Helper() {}
