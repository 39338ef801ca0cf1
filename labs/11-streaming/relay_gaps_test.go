package streaming

// Tests for ten bugs aimed at what the suite left open (an outsider's fourth bank).
// Each passes on the reference and fails with its bug.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 01: a chunk that carries only a tool call says something: the first-token
// limit stops there and gaps are held to Idle, not to FirstToken from Open.
func TestAToolCallChunkStopsTheFirstTokenClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		call := func(after time.Duration) step {
			return step{after: after, chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}
		}
		up := plays("up", call(100*time.Millisecond), call(900*time.Millisecond), call(900*time.Millisecond),
			call(900*time.Millisecond), finish(0, "tool_calls"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err, "a tool call streamed every 0.9 s for 2.8 s: neither slow to start nor idle")
		assert.Equal(t, "tool_calls", res.FinishReason)
		assert.Len(t, cl.chunks, 5)
	})
}

// 02: after the finish, a chunk is read for its usage even when it says
// something else too (a server that repeats the finish reason on its usage
// chunk); with the finish and the usage in, the relay is done at once.
func TestTheUsageOnAChunkAfterTheFinishIsCountedWhateverElseItCarries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		for _, last := range []Chunk{
			{FinishReason: "stop", Usage: &Usage{PromptTokens: 3, CompletionTokens: 1}},
			{Text: " extra", Usage: &Usage{PromptTokens: 3, CompletionTokens: 1}},
		} {
			up := plays("up", say(0, "Hi"), finish(0, "stop"), step{chunk: last}) // then silence
			cl := newCaller()
			start := time.Now()
			res, err := Relay(ctx, limits, targets(up), cl.emit)
			require.NoError(t, err)
			assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage, "%+v: the usage after the finish is counted", last)
			assert.Zero(t, time.Since(start), "%+v: finish and usage in: done at once", last)
			assert.Equal(t, "Hi", cl.text())
		}
	})
}

// 03: a chunk with the finish and the usage but no text is the answer
// finishing, not a usage-only chunk.
func TestAFinishWithUsageAndNoTextFinishesTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), step{chunk: Chunk{FinishReason: "stop", Usage: &Usage{PromptTokens: 3, CompletionTokens: 1}, Raw: []byte("raw:finish+usage")}}, fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err, "the answer finished: not a truncation")
		assert.Equal(t, "stop", res.FinishReason)
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage)
		require.Len(t, cl.chunks, 2, "the text, then the finish")
		assert.Equal(t, "stop", cl.chunks[1].FinishReason)
		assert.Nil(t, cl.chunks[1].Usage)
	})
}

// 04: every stream opened is closed before Relay returns, on the path where
// the caller's context ends too.
func TestAStreamIsClosedWhenTheCallerLeaves(t *testing.T) {
	for _, cause := range []string{"cancel", "deadline"} {
		t.Run(cause, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
				defer cancel()
				if cause == "cancel" {
					time.AfterFunc(300*time.Millisecond, cancel)
				}
				up := plays("up", say(0, "Hel")) // then silence
				_, err := Relay(ctx, limits, targets(up), newCaller().emit)
				require.Error(t, err)
				assert.Equal(t, 1, up.closed(), "the stream is closed however its attempt ended")
			})
		})
	}
}

// 05: a stream is closed once, on the path where the finish carries the usage too.
func TestAStreamWhoseFinishCarriesTheUsageIsClosedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), step{chunk: Chunk{Text: "!", FinishReason: "stop", Usage: &Usage{PromptTokens: 3, CompletionTokens: 2}}})
		_, err := Relay(ctx, limits, targets(up), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, 1, up.closed(), "closed once")
	})
}

// 06: the caller's deadline running out while the usage is awaited is the
// caller leaving: its own error, at once — like a cancel.
func TestACallerWhoseDeadlinePassesWhileTheUsageIsAwaitedGetsItsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		up := plays("up", say(0, "Hi"), finish(0, "stop")) // then silence: no usage
		start := time.Now()
		_, err := Relay(ctx, limits, targets(up), newCaller().emit)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's own reason")
		assert.Equal(t, 300*time.Millisecond, time.Since(start))
	})
}

// 07: an upstream's own error that wraps context.DeadlineExceeded (an HTTP
// client's timeout) while the caller's context is live is the upstream
// failing, not the caller leaving: before the first chunk it falls back.
func TestAnUpstreamsOwnTimeoutBeforeTheFirstChunkFallsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", fail(10*time.Millisecond, fmt.Errorf("Post upstream: %w", context.DeadlineExceeded)))
		second := plays("second", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, second), cl.emit)
		require.NoError(t, err, "the caller never left: the next upstream answers")
		assert.Equal(t, []string{"second"}, res.Served)
		assert.Equal(t, "ok", cl.text())
	})
}

// 08: the prefill is the text the caller has, exactly: trailing whitespace too.
func TestAContinuationIsGivenTheTextSoFarExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky "), fail(0, errReset))
		cont := continues("cont", say(0, "The sky is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, []string{"The sky "}, cont.opened(), "the prefill is all the caller has")
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, "The sky is blue.", res.Text)
	})
}

// 09: a caller whose context ends still gets the Result: what it received
// and what the streams reported using, to bill from.
func TestACallerWhoCancelsStillGetsWhatItReceivedAndTheUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		time.AfterFunc(300*time.Millisecond, cancel)
		running := func(after time.Duration, text string, prompt, completion int) step {
			return step{after: after, chunk: Chunk{Text: text, Usage: &Usage{PromptTokens: prompt, CompletionTokens: completion}}}
		}
		up := plays("up", running(0, "The", 3, 1), running(100*time.Millisecond, " sky", 3, 2)) // then silence
		res, err := Relay(ctx, limits, targets(up), newCaller().emit)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, Result{Text: "The sky", Usage: Usage{PromptTokens: 3, CompletionTokens: 2}, Served: []string{"up"}}, res)
	})
}

// 10: a target that fails to open is replaced by the next one, not asked again.
func TestATargetThatCannotOpenIsReplacedNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		down := &upstream{name: "down", openErr: errors.New("connection refused")}
		next := plays("next", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		res, err := Relay(ctx, limits, targets(down, next), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, []string{"next"}, res.Served)
		assert.Len(t, down.opened(), 1, "one Open, then the next target")
	})
}
