package streaming

// Edges of the relay's contract an outsider found the first tests left
// open (issue 34): what is held and what is sent, the limits' clocks, a
// caller who leaves at each hand-off.

import (
	"context"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A caller who cancels while the relay waits for the usage after the finish
// gets its own error back, at once.
func TestACallerWhoLeavesWhileTheUsageIsAwaitedGetsItsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		time.AfterFunc(300*time.Millisecond, cancel)
		a := plays("a", say(0, "Hi"), finish(0, "stop")) // then silence: the usage chunk never comes
		start := time.Now()
		_, err := Relay(ctx, limits, targets(a), newCaller().emit)
		assert.ErrorIs(t, err, context.Canceled, "the caller's own reason")
		assert.Equal(t, 300*time.Millisecond, time.Since(start))
	})
}

// A caller who leaves after its first chunk gets its own error, not ErrBroken:
// nothing broke, and nothing more is opened.
func TestACallerWhoCancelsMidAnswerIsNotABrokenAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		time.AfterFunc(300*time.Millisecond, cancel)
		a := plays("a", say(0, "Hel")) // then silence
		b := continues("b", say(0, "lo."), finish(0, "stop"), fail(0, io.EOF))
		_, err := Relay(ctx, limits, targets(a, b), newCaller().emit)
		assert.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, ErrBroken, "the caller left: no upstream broke")
		assert.Empty(t, b.opened())
	})
}

// After the finish, an empty chunk is not the usage: the relay reads on for it.
func TestAnEmptyChunkAfterTheFinishIsNotTakenForTheUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", say(0, "Hi"), finish(0, "stop"), say(0, ""), usage(0, 3, 1), fail(0, io.EOF))
		res, err := Relay(t.Context(), limits, targets(a), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, "Hi", res.Text)
		assert.Equal(t, Usage{3, 1}, res.Usage, "the usage came after an empty chunk: it is counted")
	})
}

// A caller that fails on the held role chunk has gone: nothing more is sent.
func TestACallerWhoLeavesOnTheRoleChunkGetsNothingMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", say(0, ""), say(0, "Hi"), say(0, " there"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		cl.failAt = 1
		_, err := Relay(t.Context(), limits, targets(a), cl.emit)
		assert.ErrorIs(t, err, errGone)
		assert.Len(t, cl.chunks, 1, "nothing after the chunk the caller refused")
	})
}

// The idle limit bounds the upstream's silence, not the caller's: a caller that
// takes 1.5 s to accept each chunk does not make a stream that sends one every
// 100 ms idle.
func TestASlowCallerIsNotAnIdleUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", say(0, "a"), say(100*time.Millisecond, "b"), say(100*time.Millisecond, "c"), finish(100*time.Millisecond, "stop"), fail(0, io.EOF))
		n := 0
		slow := func(Chunk) error { n++; time.Sleep(1500 * time.Millisecond); return nil }
		res, err := Relay(t.Context(), limits, targets(a), slow)
		require.NoError(t, err, "the upstream never paused for more than 100 ms")
		assert.Equal(t, "abc", res.Text)
		assert.Equal(t, 4, n)
	})
}

// The gap between chunks is bounded by Idle, not by FirstToken: a gap of
// 1.5 s is within the first-token limit (2 s) but past the idle limit (1 s).
func TestAGapBetweenChunksIsHeldToIdleNotToFirstToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", say(0, "The sky"), say(1500*time.Millisecond, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		start := time.Now()
		_, err := Relay(t.Context(), limits, targets(a), cl.emit)
		require.ErrorIs(t, err, ErrIdle)
		assert.ErrorIs(t, err, ErrBroken)
		assert.Equal(t, "The sky", cl.text(), "nothing after the stall")
		assert.Equal(t, time.Second, time.Since(start), "cut when the idle limit ran out")
	})
}

// A chunk that carries text held back as a possible repeat has Text the
// upstream did not send in it: its Raw must not be the upstream's bytes.
func TestAChunkCarryingHeldBackTextDropsItsRaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := plays("first", say(0, "The cat sat."), fail(0, errReset))
		cont := continues("cont", say(0, "The c"), say(0, "ow ran."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		_, err := Relay(t.Context(), limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The cat sat.The cow ran.", cl.text())
		for _, ch := range cl.chunks {
			if ch.Raw != nil {
				assert.Equal(t, "raw:"+ch.Text, string(ch.Raw)[:min(len(ch.Raw), 4+len(ch.Text))],
					"a chunk whose text the relay changed must not carry the upstream's bytes")
			}
		}
	})
}

// Nothing of a stream replaced before its first chunk reaches the caller,
// not even its role chunk when the next stream sends none.
func TestTheRoleChunkOfAReplacedStreamIsNeverSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		role := step{chunk: Chunk{Raw: []byte("raw:role of first")}}
		first := plays("first", role, fail(10*time.Millisecond, errReset))
		second := plays("second", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(t.Context(), limits, targets(first, second), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, []string{"second"}, res.Served)
		for _, ch := range cl.chunks {
			assert.NotEqual(t, "raw:role of first", string(ch.Raw), "first was replaced invisibly")
		}
		assert.Len(t, cl.chunks, 2, "second's text and finish")
	})
}

// A tool call anywhere in the answer so far forbids continuing it, even when
// text followed the call.
func TestAToolCallFollowedByTextIsNeverContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		call := step{chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}
		a := plays("a", say(0, "Checking."), call, say(0, " One moment."), fail(0, errReset))
		b := continues("b", say(0, " Done."), finish(0, "stop"), fail(0, io.EOF))
		_, err := Relay(t.Context(), limits, targets(a, b), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken)
		assert.Empty(t, b.opened(), "the answer holds a tool call: never continued as prose")
	})
}

// A usage-only chunk that comes before the first text (a running usage, as
// vLLM's continuous_usage_stats sends it) is counted, and never passed on.
func TestAUsageChunkBeforeTheFirstTextIsNotPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", usage(0, 5, 0), say(0, "Hi"), finish(0, "stop"), usage(0, 5, 1))
		cl := newCaller()
		res, err := Relay(t.Context(), limits, targets(a), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, Usage{5, 1}, res.Usage)
		for _, ch := range cl.chunks {
			assert.NotEqual(t, "raw:usage", string(ch.Raw), "an upstream's usage chunk reached the caller")
		}
		assert.Len(t, cl.chunks, 2, "the text and the finish, nothing else")
	})
}
