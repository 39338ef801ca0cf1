package streaming

// More edges from a second round of outsiders' bug banks (issue 34): the
// first-token clock against echoes and Open's context, what is closed and
// counted when, and what an answer that may not be continued says.

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

// An Open that hangs until the first-token limit ends its context is cut by
// that limit: the error says so, not the context.Canceled Open returned.
func TestAnOpenCutByTheFirstTokenLimitIsReportedAsTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hung := Target{Name: "hung", Open: func(ctx context.Context, _ string) (Stream, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a bound, so a relay that never cuts Open fails here rather than hangs
		defer cancel()
		_, err := Relay(ctx, limits, []Target{hung}, newCaller().emit)
		assert.ErrorIs(t, err, ErrFirstToken, "the first-token limit ran out while the stream opened")
		assert.NotErrorIs(t, err, context.Canceled, "not a caller who left")
	})
}

// A continuation that breaks while it may still be repeating its prefill
// leaves nothing behind: the next one's repeat is dropped like any other.
func TestAContinuationBrokenMidRepeatLeavesNothingForTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := plays("first", say(0, "The cat sat."), fail(0, errReset))
		c1 := continues("c1", say(0, "The cat"), fail(0, errReset))
		c2 := continues("c2", say(0, "The cat sat."), say(0, " It purred."), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(first, c1, c2), c.emit)
		require.NoError(t, err)
		assert.Equal(t, "The cat sat. It purred.", c.text())
		assert.Equal(t, []string{"first", "c2"}, res.Served)
	})
}

// A first chunk that carries only a finish reason (a content filter, an
// empty answer) is the answer ending, not a chunk that says nothing yet:
// the answer is that one, and no other upstream is asked.
func TestAnAnswerThatFinishesWithNoTextIsNotReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		filtered := plays("filtered", say(0, ""), finish(10*time.Millisecond, "content_filter"), usage(0, 7, 0), fail(0, io.EOF))
		other := plays("other", say(0, "Sure!"), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(filtered, other), c.emit)
		require.NoError(t, err)
		assert.Equal(t, "content_filter", res.FinishReason, "the finish reason ended the answer")
		assert.Equal(t, []string{"filtered"}, res.Served)
		assert.Empty(t, other.opened(), "a finished answer is not replaced by another")
		assert.Equal(t, "", c.text())
	})
}

// A continuation that repeats its prefill slowly sends chunks all along,
// each within Idle: the first-token limit stopped at its first chunk, though
// none of the repeat reaches the caller.
func TestAContinuationThatRepeatsSlowlyIsNotCutByTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := plays("first", say(0, "The sky is"), fail(0, errReset))
		cont := continues("cont", say(900*time.Millisecond, "The"), say(900*time.Millisecond, " sky"),
			say(900*time.Millisecond, " is"), say(900*time.Millisecond, " blue."), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(first, cont), c.emit)
		require.NoError(t, err, "cont sent a chunk every 0.9 s: neither silent to start nor idle")
		assert.Equal(t, "The sky is blue.", c.text())
		assert.Equal(t, []string{"first", "cont"}, res.Served)
	})
}

// Any positive limits are a config that works, whichever is longer: an
// upstream that starts fast and then thinks between chunks.
func TestAnIdleLimitLongerThanTheFirstTokenLimitIsAllowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{FirstToken: 500 * time.Millisecond, Idle: 2 * time.Second}
		up := plays("up", say(100*time.Millisecond, "a"), say(1500*time.Millisecond, "b"), finish(0, "stop"), fail(0, io.EOF))
		res, err := Relay(t.Context(), cfg, targets(up), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, "ab", res.Text)

		_, err = Relay(t.Context(), cfg, targets(plays("late", say(600*time.Millisecond, "a"))), newCaller().emit)
		assert.ErrorIs(t, err, ErrFirstToken, "the shorter first-token limit still holds")
	})
}

// connStream is a stream whose read, once its context ends, fails with the
// connection's own error, as a body read on a closed connection does.
type connStream struct{ chunks []Chunk }

func (s *connStream) Next(ctx context.Context) (Chunk, error) {
	if len(s.chunks) > 0 {
		c := s.chunks[0]
		s.chunks = s.chunks[1:]
		return c, nil
	}
	<-ctx.Done()
	return Chunk{}, errors.New("read tcp 10.0.0.1:443: use of closed network connection")
}
func (s *connStream) Close() error { return nil }

func TestALimitIsReportedWhateverErrorTheStreamGivesForIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		target := func(chunks ...Chunk) Target {
			return Target{Name: "conn", Open: func(context.Context, string) (Stream, error) { return &connStream{chunks: chunks}, nil }}
		}
		_, err := Relay(t.Context(), limits, []Target{target()}, newCaller().emit)
		assert.ErrorIs(t, err, ErrFirstToken, "silent from the start")
		_, err = Relay(t.Context(), limits, []Target{target(Chunk{Text: "Hel"})}, newCaller().emit)
		assert.ErrorIs(t, err, ErrIdle, "silent after a chunk")
	})
}

// An answer that may not be continued — opted out, or holding a tool call —
// still says why it broke.
func TestAnAnswerThatMayNotBeContinuedSaysWhyItBroke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := limits
		cfg.NoContinue = true
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		_, err := Relay(t.Context(), cfg, targets(plays("stalls", say(0, "The sky")), cont), newCaller().emit)
		assert.ErrorIs(t, err, ErrBroken)
		assert.ErrorIs(t, err, ErrIdle, "opted out: the error still says the upstream went idle")

		call := step{chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}
		a := plays("a", say(0, "Checking."), call, fail(0, errReset))
		_, err = Relay(t.Context(), limits, targets(a, cont), newCaller().emit)
		assert.ErrorIs(t, err, ErrBroken)
		assert.True(t, errors.Is(err, errReset), "a tool call: the error still carries the reset, got %v", err)
	})
}

// boundStream ends when the context Open was given ends, as an HTTP
// response body does when its request's context is cancelled.
type boundStream struct {
	Stream
	open context.Context
}

func (b *boundStream) Next(ctx context.Context) (Chunk, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(b.open, cancel)
	defer stop()
	c, err := b.Stream.Next(ctx)
	if b.open.Err() != nil {
		return Chunk{}, b.open.Err()
	}
	return c, err
}

// The first-token limit ends at the first chunk, for the stream Open made
// too: a healthy answer longer than FirstToken is not cut.
func TestAStreamBoundToItsOpenContextOutlivesTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		steps := []step{say(0, "a")}
		for range 4 {
			steps = append(steps, say(900*time.Millisecond, "b"))
		}
		up := plays("up", append(steps, finish(0, "stop"), fail(0, io.EOF))...)
		tg := up.target()
		open := tg.Open
		tg.Open = func(ctx context.Context, p string) (Stream, error) {
			s, err := open(ctx, p)
			if err != nil {
				return nil, err
			}
			return &boundStream{Stream: s, open: ctx}, nil
		}
		res, err := Relay(t.Context(), limits, []Target{tg}, newCaller().emit)
		require.NoError(t, err, "3.6 s of chunks 0.9 s apart: within both limits")
		assert.Equal(t, "abbbb", res.Text)
	})
}

// A stream that was replaced is closed when its attempt ends — before the
// next one opens — not left generating (and billing) until Relay returns.
func TestAReplacedStreamIsClosedBeforeTheNextOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		silent := plays("silent")
		next := plays("next", say(0, "hi"), finish(0, "stop"), fail(0, io.EOF))
		tg := next.target()
		open := tg.Open
		closedAtOpen := -1
		tg.Open = func(ctx context.Context, p string) (Stream, error) {
			closedAtOpen = silent.closed()
			return open(ctx, p)
		}
		_, err := Relay(t.Context(), limits, []Target{silent.target(), tg}, newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, 1, closedAtOpen, "the silent stream was closed before the next was opened")
	})
}

// After the finish, the usage that never comes is waited for the idle
// limit — the gap between two chunks — and no longer.
func TestTheUsageIsAwaitedForTheIdleLimitOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := plays("up", say(0, "hi"), finish(0, "stop")) // then silence: no usage
		start := time.Now()
		res, err := Relay(t.Context(), limits, targets(up), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, "stop", res.FinishReason)
		assert.Equal(t, limits.Idle, time.Since(start), "an idle limit after the finish, not the first-token limit")
	})
}

// A stream the caller left ran on an upstream that bills for it: the usage
// it reported is in the result the gateway bills from.
func TestTheUsageOfAStreamTheCallerLeftIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		running := func(text string, prompt, completion int) step {
			return step{chunk: Chunk{Text: text, Usage: &Usage{PromptTokens: prompt, CompletionTokens: completion}}}
		}
		up := plays("up", running("The", 3, 1), running(" sky", 3, 2), running(" is", 3, 3))
		c := newCaller()
		c.failAt = 2
		res, err := Relay(t.Context(), limits, targets(up), c.emit)
		assert.ErrorIs(t, err, errGone)
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 2}, res.Usage, "the last report before the caller left")
	})
}

// A chunk with a finish reason ends the answer: what follows it is read
// only for the usage — text, or a second finish, after it never reaches
// the caller.
func TestWhatFollowsTheFinishIsReadOnlyForTheUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := plays("up", say(0, "Hi"), finish(0, "stop"), say(0, " and more"), finish(0, "length"), usage(0, 3, 1))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(up), c.emit)
		require.NoError(t, err)
		assert.Equal(t, "Hi", c.text(), "nothing after the finish reaches the caller")
		assert.Equal(t, "Hi", res.Text)
		assert.Equal(t, "stop", res.FinishReason, "the answer ended with the first finish")
		assert.Len(t, c.chunks, 2, "text, finish")
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage, "the usage after it is still read")
	})
}

// Chunks that say nothing do not stop the first-token limit: an upstream
// that sends only empty chunks, each within the idle limit, is cut at the
// first-token limit and replaced, not let hold the caller.
func TestChunksThatSayNothingDoNotStopTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var steps []step
		for range 20 {
			steps = append(steps, say(900*time.Millisecond, ""))
		}
		stalling := plays("stalling", append(steps, say(0, "late"), finish(0, "stop"), fail(0, io.EOF))...)
		backup := plays("backup", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(stalling, backup), c.emit)
		require.NoError(t, err)
		require.NotEmpty(t, c.at)
		assert.Equal(t, limits.FirstToken, c.at[0], "cut at the first-token limit, then the backup answers at once")
		assert.Equal(t, []string{"backup"}, res.Served)
		assert.Equal(t, "ok", c.text())
	})
}

// ErrIdle: 'no chunk within Config.Idle of the last one' — an empty chunk
// is a chunk: no gap here is longer than 0.6 s.
func TestAnEmptyChunkAfterTheFirstReArmsTheIdleClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "The sky"), say(600*time.Millisecond, ""), say(600*time.Millisecond, ""),
			say(600*time.Millisecond, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		res, err := Relay(ctx, limits, targets(up), newCaller().emit)
		require.NoError(t, err, "no gap between two chunks reached the idle limit")
		assert.Equal(t, "The sky is blue.", res.Text)
	})
}

// ErrInvalidConfig: 'a limit that is not positive' — a negative Idle too.
func TestANegativeIdleLimitIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hel")) // then stalls
		_, err := Relay(ctx, Config{FirstToken: time.Second, Idle: -time.Second}, targets(up), newCaller().emit)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.Empty(t, up.opened(), "refused before anything is opened")
	})
}

// Raw is cleared only on a chunk whose Text the relay changed: a
// continuation's chunk passed on as it came keeps the upstream's bytes
// (its id and model).
func TestAContinuationChunkPassedOnUnchangedKeepsItsRaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky is"), fail(0, errReset))
		cont := continues("cont", say(0, " blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		_, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		require.Len(t, cl.chunks, 3)
		assert.Equal(t, " blue.", cl.chunks[1].Text)
		assert.Equal(t, "raw: blue.", string(cl.chunks[1].Raw), "its text was not changed: the upstream's bytes go on")
	})
}

// A usage-only chunk says nothing of the answer: the first text may come
// up to FirstToken (2 s) after Open, even past Idle (1 s) after the usage.
func TestAUsageChunkDoesNotStopTheFirstTokenClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", usage(0, 5, 0), say(1500*time.Millisecond, "Hi"), finish(0, "stop"), usage(0, 5, 1), fail(0, io.EOF))
		res, err := Relay(ctx, limits, targets(up), newCaller().emit)
		require.NoError(t, err, "the first text came 1.5 s after Open: within the first-token limit")
		assert.Equal(t, "Hi", res.Text)
	})
}

// A continuation that reported a running usage on a chunk of its repeat,
// then broke, was billed: its report is in the sum.
func TestTheUsageOfAContinuationBrokenMidRepeatIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The cat sat."), fail(0, errReset))
		c1 := continues("c1", step{chunk: Chunk{Text: "The cat", Usage: &Usage{PromptTokens: 20, CompletionTokens: 2}}}, fail(0, errReset))
		c2 := continues("c2", say(0, " It purred."), finish(0, "stop"), usage(0, 22, 3), fail(0, io.EOF))
		res, err := Relay(ctx, limits, targets(first, c1, c2), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, "The cat sat. It purred.", res.Text)
		assert.Equal(t, Usage{PromptTokens: 42, CompletionTokens: 5}, res.Usage, "c1's 20+2 and c2's 22+3")
	})
}
