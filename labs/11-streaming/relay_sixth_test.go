package streaming

// Tests for the bugs of an outsider's sixth bank aimed at the tests' gaps:
// each passes on the reference and fails with its bug.

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// 01: Relay 'returns what the caller received — when it returns an error
// too'; Result.Usage: 'the last usage each stream reported, summed over the
// streams'. Streams that all failed before the first chunk still ran on
// upstreams that bill: their reports are in the Result that comes with the
// error.
func TestAnAnswerThatNeverStartedStillReportsWhatItsStreamsUsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		a := plays("a", usage(0, 5, 0), fail(0, errReset))
		b := plays("b", usage(0, 7, 0), fail(10*time.Millisecond, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(a, b), cl.emit)
		require.ErrorIs(t, err, ErrTruncated, "b, the last, ended before it finished")
		assert.NotErrorIs(t, err, ErrBroken, "nothing reached the caller")
		assert.Empty(t, cl.chunks)
		assert.Equal(t, Usage{PromptTokens: 12, CompletionTokens: 0}, res.Usage, "a's 5 and b's 7 prompt tokens were billed")
		assert.Empty(t, res.Served)
		assert.Empty(t, res.Text)
	})
}

// 02: Relay: 'A chunk with a finish reason ends the answer'; the contract: 'an
// end before any finish reason is ErrTruncated'. A usage-only chunk in the
// middle of an answer (vLLM's running usage) is not its end: the relay reads
// on, and a stream that stops after it has broken.
func TestARunningUsageChunkInMidAnswerIsNotTheEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "The sky"), usage(0, 3, 2), say(0, " is blue."), finish(0, "stop"), usage(0, 3, 4), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", cl.text(), "the answer goes on after the running usage")
		assert.Equal(t, "stop", res.FinishReason)
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 4}, res.Usage, "the stream's last report")

		cut := plays("cut", say(0, "The sky"), usage(0, 3, 2), fail(0, io.EOF))
		res, err = Relay(ctx, limits, targets(cut), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken, "no finish reason came: a truncated answer, never a whole one")
		assert.ErrorIs(t, err, ErrTruncated)
		assert.Empty(t, res.FinishReason)
	})
}

// 03: Relay: 'The first-token limit runs from Open to a stream's first chunk
// that says something'; ErrFirstToken: 'no chunk within Config.FirstToken of
// opening a stream'. The first chunk came at 100 ms: a caller that takes
// 2.5 s to accept it is not an upstream slow to start.
func TestASlowCallerOnTheFirstChunkIsNotASlowFirstToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(100*time.Millisecond, "The"), say(100*time.Millisecond, " sky"), finish(100*time.Millisecond, "stop"), fail(0, io.EOF))
		n := 0
		slowOnce := func(Chunk) error {
			n++
			if n == 1 {
				time.Sleep(2500 * time.Millisecond) // the caller's write of the first chunk
			}
			return nil
		}
		res, err := Relay(ctx, limits, targets(up), slowOnce)
		require.NoError(t, err, "the upstream sent its first chunk at 100 ms and never paused for more than 100 ms")
		assert.Equal(t, "The sky", res.Text)
		assert.Equal(t, 3, n)
	})
}

// 04: Relay: 'Until a chunk has reached emit, a target that fails … is
// replaced by the next one … After it, a failure goes to the next target that
// CanContinue … — unless the answer so far holds anything but text'. A
// first chunk that is only a tool call has reached the caller: the window is
// shut, and the answer is neither replaced nor continued.
func TestAToolCallAloneClosesTheFallbackWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		call := step{chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}
		first := plays("first", call, fail(10*time.Millisecond, errReset))
		second := plays("second", say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF))
		cont := continues("cont", say(0, " there"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, second, cont), cl.emit)
		require.ErrorIs(t, err, ErrBroken, "the caller holds a tool call: its stream must end with an error")
		assert.ErrorIs(t, err, errReset)
		assert.Empty(t, second.opened(), "no other answer spliced after the tool call")
		assert.Empty(t, cont.opened(), "a tool call is never continued")
		require.Len(t, cl.chunks, 1)
		assert.True(t, cl.chunks[0].Other)
		assert.Equal(t, []string{"first"}, res.Served)
	})
}

// 05: Relay: 'a target that fails to open … is replaced by the next one,
// never opened again. After it, a failure goes to the next target that
// CanContinue'. A continuing target replaced before the first chunk is not
// asked again once the answer breaks, and the target that broke is not asked
// to continue its own answer.
func TestATargetAlreadyTriedIsNotAskedToContinue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		down := &upstream{name: "down", canContinue: true, openErr: errors.New("connection refused")}
		first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(down, first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, []string{""}, down.opened(), "down was replaced before the first chunk: never opened again")
		assert.Equal(t, []string{"The sky"}, cont.opened())
		assert.Equal(t, []string{"first", "cont"}, res.Served)

		self := continues("self", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		_, err = Relay(ctx, limits, targets(self), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken, "no next target can continue")
		assert.Equal(t, []string{""}, self.opened(), "the target that broke is not the next one")
	})
}

// 06: Result.Usage: 'the last usage each stream reported, summed over the
// streams'. A stream that reports nothing adds nothing: another stream's
// report is not its own.
func TestAStreamThatReportsNoUsageAddsNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		a := plays("a", usage(0, 5, 0), fail(0, errReset))
		b := plays("b", say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF)) // no usage
		res, err := Relay(ctx, limits, targets(a, b), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, "Hi", res.Text)
		assert.Equal(t, Usage{PromptTokens: 5, CompletionTokens: 0}, res.Usage, "a's report, once; b reported none")
	})
}

// 07: Result.Text: 'the answer's text, as the caller read it'; 'An error from
// emit means the caller has gone'. The chunk whose emit failed never reached
// the caller: its text is not in the Result.
func TestTheTextOfAChunkTheCallerRefusedIsNotInTheResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "The"), say(0, " sky"), say(0, " is"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		cl.failAt = 2
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.ErrorIs(t, err, errGone)
		assert.Equal(t, "The", res.Text, "the caller hung up on \" sky\": it read \"The\"")
		assert.Equal(t, []string{"up"}, res.Served)
	})
}

// 08: ErrNoTargets: 'Relay was given no upstream to ask'; Relay: 'no targets,
// is refused before anything is opened' — an empty list as much as a nil one.
func TestAnEmptyTargetListIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cl := newCaller()
		res, err := Relay(ctx, limits, []Target{}, cl.emit)
		assert.ErrorIs(t, err, ErrNoTargets)
		assert.Empty(t, cl.chunks)
		assert.Equal(t, Result{}, res)
	})
}

// 09: Chunk.Raw: 'the relay sets it to nil on a chunk whose Text it changed'
// — on that chunk only; README: the caller tells who wrote the rest of the
// answer 'only from the chunks, whose model (and id) name the upstream that
// wrote each, as sent'. After a repeat was cut, the continuation's own chunks
// go on with their bytes.
func TestAContinuationsChunksAfterItsRepeatKeepTheirRaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky is"), fail(0, errReset))
		cont := continues("cont", say(0, "The sky is"), say(0, " blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		_, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", cl.text())
		require.Len(t, cl.chunks, 3, "first's text, cont's own text, cont's finish")
		assert.Equal(t, "raw: blue.", string(cl.chunks[1].Raw), "its text was not changed: the upstream's bytes go on")
		assert.Equal(t, "raw:finish", string(cl.chunks[2].Raw))
	})
}

// 10: Relay: 'Every stream opened is closed before Relay returns'; Stream.Close:
// 'The relay closes every stream it opens, once.' An Open that comes back
// with a stream after the first-token limit ran out still opened one.
func TestAStreamThatOpensAfterTheFirstTokenLimitIsStillClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		late := plays("late") // silent once open
		tg := late.target()
		open := tg.Open
		tg.Open = func(ctx context.Context, p string) (Stream, error) {
			time.Sleep(2500 * time.Millisecond) // a connection that ignores its context
			return open(ctx, p)
		}
		next := plays("next", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, []Target{tg, next.target()}, cl.emit)
		require.NoError(t, err)
		assert.Equal(t, []string{"next"}, res.Served)
		assert.Equal(t, "ok", cl.text())
		assert.Equal(t, []string{""}, late.opened())
		assert.Equal(t, 1, late.closed(), "the stream Open returned late is closed too")
	})
}

// 'An error from emit means the caller has gone ... the relay stops at once
// and returns it': the error is emit's, readable as it is — no reason of a
// context that has not ended is made up around it.
func TestACallerWhoHasGoneGetsEmitsErrorAsItIs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), say(0, " there"), finish(0, "stop"))
		cl := newCaller()
		cl.failAt = 1
		_, err := Relay(ctx, limits, targets(up), cl.emit)
		require.ErrorIs(t, err, errGone)
		assert.NotErrorIs(t, err, context.Canceled, "the caller's context has not ended")
		assert.NotContains(t, err.Error(), "%!", "a well-formed message")
		assert.Contains(t, err.Error(), errGone.Error())
	})
}
