package streaming

// Tests for bugs a second outsider aimed at sizes and values just past
// what the suite tried: a ninth target, twenty held chunks, a long
// prefill, limits of hours, a long answer, a big chunk, a finish reason
// nobody listed. The contract caps none of them. Each passes on the
// reference and fails with the mutant named in its comment.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 'a target that fails ... is replaced by the next one' — the ninth too.
func TestANinthTargetIsAskedToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var us []*upstream
		for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
			us = append(us, plays(n, fail(0, errReset)))
		}
		i := plays("i", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(append(us, i)...), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "ok", cl.text())
		assert.Equal(t, []string{"i"}, res.Served)
	})
}

// held chunks go 'with any others like it ... in order' — twenty of them.
func TestTwentyHeldChunksAllGoWithTheFirstThatSaysSomething(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var steps []step
		for i := range 20 {
			steps = append(steps, step{after: 10 * time.Millisecond, chunk: Chunk{Raw: fmt.Appendf(nil, "raw:empty %d", i)}})
		}
		up := plays("up", append(steps, say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF))...)
		cl := newCaller()
		_, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		require.Len(t, cl.chunks, 22)
		for i := range 20 {
			assert.Equal(t, fmt.Sprintf("raw:empty %d", i), string(cl.chunks[i].Raw))
		}
	})
}

// 'a continuation that starts by repeating the prefill has the repeat
// dropped' — a long prefill too.
func TestARepeatOfALongPrefillIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		long := strings.Repeat("The sky is blue. ", 40) // 680 bytes
		first := plays("first", say(0, long), fail(0, errReset))
		cont := continues("cont", say(0, long), say(0, "Then rain."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, long+"Then rain.", cl.text())
		assert.Equal(t, long+"Then rain.", res.Text)
	})
}

// 'FirstToken bounds the wait for a stream's first chunk, from Open' —
// a five-minute limit lets a model think for three.
func TestALongFirstTokenLimitIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{FirstToken: 5 * time.Minute, Idle: time.Second}
		up := plays("up", say(3*time.Minute, "Hi"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(t.Context(), cfg, targets(up), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "Hi", res.Text)
	})
}

// 'Idle bounds the gap between two chunks' — a five-minute idle limit
// lets a stream pause for three.
func TestALongIdleLimitIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{FirstToken: time.Second, Idle: 5 * time.Minute}
		up := plays("up", say(0, "a"), say(3*time.Minute, "b"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(t.Context(), cfg, targets(up), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "ab", res.Text)
	})
}

// Result.Text is 'the answer's text, as the caller read it' — a long
// answer whole, and a continuation's prefill is 'the text so far'.
func TestALongAnswerIsWholeInTheResultAndThePrefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		a, b := strings.Repeat("a", 10000), strings.Repeat("b", 10000)
		first := plays("first", say(0, a), say(0, b), fail(0, errReset))
		cont := continues("cont", say(0, "c"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, a+b+"c", res.Text)
		assert.Equal(t, []string{a + b}, cont.opened())
	})
}

// Raw is 'the event as the upstream sent it, for a caller's stream to
// pass on as it came' — set to nil only on a chunk whose Text was changed.
func TestABigChunkKeepsItsRaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		raw := []byte("data: " + strings.Repeat("x", 20000))
		up := plays("up", step{chunk: Chunk{Text: "Hi", Raw: raw}}, finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		_, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		require.NotEmpty(t, cl.chunks)
		assert.Equal(t, raw, cl.chunks[0].Raw)
	})
}

// 'A chunk with a finish reason ends the answer' — whatever the reason.
func TestAnyFinishReasonEndsTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), finish(0, "abort"), fail(0, io.EOF))
		other := continues("other", say(0, " there"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up, other), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "Hi", res.Text)
		assert.Equal(t, "abort", res.FinishReason)
		assert.Equal(t, []string{"up"}, res.Served)
		assert.Empty(t, other.opened())
	})
}
