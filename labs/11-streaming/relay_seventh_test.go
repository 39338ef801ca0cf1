package streaming

// Tests for the bugs of two outsiders' seventh banks aimed at the tests'
// gaps: each passes on the reference and fails with its bug.

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

// rawAgreesWithText checks that no chunk carries upstream bytes that say other
// than its Text: the fakes' bytes for a text chunk begin "raw:" and the text.
func rawAgreesWithText(t *testing.T, chunks []Chunk) {
	t.Helper()
	for _, ch := range chunks {
		if ch.Raw != nil {
			assert.Equal(t, "raw:"+ch.Text, string(ch.Raw)[:min(len(ch.Raw), 4+len(ch.Text))],
				"a chunk whose text the relay changed must not carry the upstream's bytes")
		}
	}
}

// 01: Result.Served: 'the targets whose chunks reached the caller, in order'.
// Two targets may share a name (two keys or regions of one provider): each
// that served is listed.
func TestAContinuationOnATargetOfTheSameNameIsListedToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("gw", say(0, "The sky"), fail(0, errReset))
		cont := continues("gw", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, []string{"gw", "gw"}, res.Served, "two targets served, one after the other")
	})
}

// 02: Relay: 'a failure goes to the next target that CanContinue … — unless the
// answer so far holds anything but text'; Chunk.Other: 'it carries something
// besides text: tool calls'. Text a continuation held back as a possible repeat
// goes on with its tool call, and the call is still a call: never continued.
func TestHeldTextThatGoesOnWithAToolCallStillForbidsContinuing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The cat sat."), fail(0, errReset))
		call := step{chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}
		c1 := continues("c1", say(0, "The"), call, fail(0, errReset))
		c2 := continues("c2", say(0, " It purred."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		_, err := Relay(ctx, limits, targets(first, c1, c2), cl.emit)
		require.ErrorIs(t, err, ErrBroken, "the answer holds a tool call: it ends as broken")
		assert.Empty(t, c2.opened(), "a tool call is never continued as prose")
		assert.Equal(t, "The cat sat.The", cl.text())
		calls := 0
		for _, ch := range cl.chunks {
			if ch.Other {
				calls++
			}
		}
		assert.Equal(t, 1, calls, "the tool call reached the caller as a tool call")
	})
}

// 03: Relay 'returns what the caller received — when it returns an error too'.
// A caller who hung up on the finish chunk never received the finish.
func TestAFinishTheCallerRefusedIsNotInTheResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), finish(0, "stop"), usage(0, 3, 1), fail(0, io.EOF))
		cl := newCaller()
		cl.failAt = 2
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.ErrorIs(t, err, errGone)
		assert.Equal(t, "Hi", res.Text)
		assert.Empty(t, res.FinishReason, "the caller refused the finish chunk: it read no finish")
	})
}

// 04: Config.FirstToken: 'bounds the wait for a stream's first chunk, from Open';
// ErrFirstToken: 'no chunk within Config.FirstToken of opening a stream'. A
// continuation opened after a stall of 1 s still has its whole 2 s from its
// own Open: its first chunk 1.5 s after it is in time.
func TestAContinuationGetsItsWholeFirstTokenLimitAfterAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky")) // then stalls: ErrIdle at 1 s
		cont := continues("cont", say(1500*time.Millisecond, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		start := time.Now()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err, "cont's first chunk came 1.5 s after its Open: within the first-token limit")
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, []string{"first", "cont"}, res.Served)
		assert.Equal(t, 2500*time.Millisecond, time.Since(start), "1 s to the stall, 1.5 s to cont's first chunk")
	})
}

// 05: Relay: 'a continuation that starts by repeating the prefill has the repeat
// dropped'. A repeat whose last piece comes on the chunk that starts a tool
// call is still a repeat: the call goes on, the repeat does not.
func TestARepeatThatEndsOnAToolCallChunkIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky is"), fail(0, errReset))
		last := step{chunk: Chunk{Text: " is", Other: true, Raw: []byte("raw: is|tool_calls")}}
		cont := continues("cont", say(0, "The sky"), last, finish(0, "tool_calls"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is", cl.text(), "the repeat never reaches the caller")
		assert.Equal(t, "The sky is", res.Text)
		assert.Equal(t, "tool_calls", res.FinishReason)
		calls := 0
		for _, ch := range cl.chunks {
			if ch.Other {
				calls++
			}
		}
		assert.Equal(t, 1, calls, "the tool call goes on")
		rawAgreesWithText(t, cl.chunks)
	})
}

// 06: ErrBroken: 'the failure of a stream that had already sent the caller part
// of its answer, when no upstream could continue it: the caller's stream must
// end with an error, and no [DONE]'. The continuations that could not take
// over never started, but the caller holds part of an answer all the same.
func TestAnAnswerWhoseLastContinuationNeverStartedEndsAsBroken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cont  *upstream
		cause error
	}{
		{"a silent continuation", continues("cont"), ErrFirstToken},
		{"a continuation that ends at once", continues("cont", fail(0, io.EOF)), ErrTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				first := plays("first", say(0, "The sky"), fail(0, errReset))
				cl := newCaller()
				res, err := Relay(ctx, limits, targets(first, tc.cont), cl.emit)
				require.ErrorIs(t, err, ErrBroken, "the caller holds \"The sky\": its stream must end with an error")
				assert.ErrorIs(t, err, tc.cause)
				assert.Equal(t, []string{"The sky"}, tc.cont.opened())
				assert.Equal(t, Result{Text: "The sky", Served: []string{"first"}}, res)
			})
		})
	}
}

// slowClose is a stream whose Close takes a while, as closing a connection
// to a stalled upstream may.
type slowClose struct{ Stream }

func (s slowClose) Close() error {
	time.Sleep(100 * time.Millisecond)
	return s.Stream.Close()
}

// 07: Relay: 'a target that … ends early … After it, a failure goes to the next
// target that CanContinue, with the text so far as its prefill'. An upstream
// that closes its stream before the finish has broken the answer, and it is
// continued like any other break.
func TestAnAnswerThatEndsEarlyAfterItsFirstChunkIsContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, io.EOF))
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err, "an early end is a break, and cont can continue it")
		assert.Equal(t, []string{"The sky"}, cont.opened())
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, []string{"first", "cont"}, res.Served)
	})
}

// 08: Relay: 'a continuation that starts by repeating the prefill has the repeat
// dropped' — the whole repeat and nothing more, whatever letters the prefill has.
func TestARepeatOfANonASCIIPrefillIsDroppedExactly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in one chunk", []step{say(0, "Crème brûlée.")}},
		{"across chunks", []step{say(0, "Crè"), say(0, "me brûlée.")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				first := plays("first", say(0, "Crème"), fail(0, errReset))
				cont := continues("cont", append(tc.steps, finish(0, "stop"), fail(0, io.EOF))...)
				cl := newCaller()
				res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
				require.NoError(t, err)
				assert.Equal(t, "Crème brûlée.", cl.text())
				assert.Equal(t, "Crème brûlée.", res.Text)
			})
		})
	}
}

// 09: a chunk that says nothing is one with 'no text, nothing else, no finish
// reason'; Result.Text: 'the answer's text, as the caller read it'. A chunk of
// blanks (a paragraph break, a space) is text, and reaches the caller.
func TestABlankChunkInMidAnswerIsPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hello."), say(0, "\n\n"), say(0, "Bye"), say(0, " "), say(0, "now."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "Hello.\n\nBye now.", cl.text())
		assert.Equal(t, "Hello.\n\nBye now.", res.Text)
	})
}

// 10: Chunk.Raw: 'the relay sets it to nil on a chunk whose Text it changed'.
// Text held back as a possible repeat may go on with a chunk that had no text of
// its own (a finish, a tool call): that chunk's bytes do not say that text.
func TestHeldTextPassedOnWithAChunkOfNoTextDropsItsRaw(t *testing.T) {
	for _, tc := range []struct {
		name string
		rest []step
	}{
		{"a finish", []step{finish(0, "stop")}},
		{"a tool call", []step{{chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}, finish(0, "tool_calls")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				first := plays("first", say(0, "The cat sat."), fail(0, errReset))
				cont := continues("cont", append([]step{say(0, "The")}, append(tc.rest, fail(0, io.EOF))...)...)
				cl := newCaller()
				_, err := Relay(ctx, limits, targets(first, cont), cl.emit)
				require.NoError(t, err)
				assert.Equal(t, "The cat sat.The", cl.text(), "\"The\" was not a repeat: it goes on")
				rawAgreesWithText(t, cl.chunks)
			})
		})
	}
}

// 01: ErrIdle: 'no chunk within Config.Idle of the last one'; Relay: 'what
// follows it [the finish] is read only for the usage (with it, the relay is
// done)'. After the finish, every chunk — an empty keep-alive, text that is
// dropped — is a chunk: the usage may come 1.8 s after the finish when no gap
// reaches the idle limit.
func TestTheUsageAfterTheFinishIsAwaitedForIdleSinceTheLastChunk(t *testing.T) {
	for _, tc := range []struct {
		name string
		mid  step
	}{
		{"empty keep-alives", say(600*time.Millisecond, "")},
		{"text that is dropped", say(600*time.Millisecond, " and more")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				up := plays("up", say(0, "Hi"), finish(0, "stop"), tc.mid, tc.mid, usage(600*time.Millisecond, 3, 1)) // then silence
				cl := newCaller()
				start := time.Now()
				res, err := Relay(ctx, limits, targets(up), cl.emit)
				require.NoError(t, err)
				assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage, "no gap after the finish reached the idle limit: the usage is counted")
				assert.Equal(t, 1800*time.Millisecond, time.Since(start), "done when the usage came")
				assert.Equal(t, "Hi", cl.text())
			})
		})
	}
}

// 02: ErrFirstToken: 'no chunk within Config.FirstToken of opening a
// stream'; Relay: 'a limit that runs out is reported as ErrFirstToken or
// ErrIdle'. A continuation that never says anything is slow to start — its
// own stream's first-token limit ran out — not an idle stream.
func TestASilentContinuationIsReportedAsASlowFirstToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		cont := continues("cont") // silent
		start := time.Now()
		_, err := Relay(ctx, limits, targets(first, cont), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken, "no upstream continued the answer")
		assert.ErrorIs(t, err, ErrFirstToken, "cont never sent its first chunk")
		assert.NotErrorIs(t, err, ErrIdle, "cont never sent a chunk to be idle after")
		assert.Equal(t, 10*time.Millisecond+limits.FirstToken, time.Since(start))
	})
}

// 04: ErrIdle: 'no chunk within Config.Idle of the last one'; Config.Idle:
// 'bounds the gap between two chunks'. A running-usage chunk mid-answer is a
// chunk: no gap here is longer than 0.6 s.
func TestAUsageChunkMidAnswerReArmsTheIdleClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "The sky"), usage(600*time.Millisecond, 3, 2), say(600*time.Millisecond, " is blue."),
			finish(0, "stop"), usage(0, 3, 4), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err, "no gap between two chunks reached the idle limit")
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 4}, res.Usage)
	})
}

// 05: Relay: 'the caller's context ending means the same [the caller has
// gone]: the relay stops at once and returns it' — the caller's own
// context.Canceled or DeadlineExceeded, even when its context ended with a
// cause of its own and the stream's read says only that the connection closed.
func TestACallerWhoseContextEndsWithACauseGetsItsContextsError(t *testing.T) {
	errClientGone := errors.New("the client closed the connection")
	for _, want := range []error{context.Canceled, context.DeadlineExceeded} {
		t.Run(want.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeoutCause(t.Context(), 300*time.Millisecond, errClientGone)
				defer cancel()
				if want == context.Canceled {
					var cancelCause context.CancelCauseFunc
					ctx, cancelCause = context.WithCancelCause(ctx)
					defer cancelCause(nil)
					time.AfterFunc(100*time.Millisecond, func() { cancelCause(errClientGone) })
				}
				conn := Target{Name: "conn", Open: func(context.Context, string) (Stream, error) {
					return &connStream{chunks: []Chunk{{Text: "Hel"}}}, nil
				}}
				next := continues("next", say(0, "lo."), finish(0, "stop"), fail(0, io.EOF))
				_, err := Relay(ctx, limits, []Target{conn, next.target()}, newCaller().emit)
				assert.ErrorIs(t, err, want, "the caller's context's own error, got %v", err)
				assert.NotErrorIs(t, err, ErrBroken, "a caller who left is no broken answer")
				assert.Empty(t, next.opened(), "nobody else is asked for a caller who left")
			})
		})
	}
}

// 07: Relay: 'Every stream opened is closed before Relay returns' — however
// its attempt ended, a stall included, and however long its Close takes.
func TestEveryStreamIsClosedBeforeRelayReturnsHoweverItEnded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"a stall mid-answer", []step{say(0, "The sky")}},
		{"a reset mid-answer", []step{say(0, "The sky"), fail(10*time.Millisecond, errReset)}},
		{"silence from the start", nil},
		{"a whole answer", []step{say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				up := plays("up", tc.steps...)
				tg := up.target()
				open := tg.Open
				tg.Open = func(ctx context.Context, p string) (Stream, error) {
					s, err := open(ctx, p)
					if err != nil {
						return nil, err
					}
					return slowClose{s}, nil
				}
				_, _ = Relay(ctx, limits, []Target{tg}, newCaller().emit)
				assert.Equal(t, 1, up.closed(), "closed before Relay returned")
				time.Sleep(time.Second) // a Close left running in the background ends here, and the bubble with it
			})
		})
	}
}

// 08: Relay: 'an end of any kind after it [the finish] (EOF, silence, an
// error) is the answer finishing, not breaking' — a malformed chunk after
// the finish too.
func TestAMalformedChunkAfterTheFinishIsTheAnswerFinishing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), finish(0, "stop"), fail(0, ErrMalformed))
		cont := continues("cont", say(0, " there"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up, cont), cl.emit)
		require.NoError(t, err, "the answer had finished: a bad chunk after it is no break")
		assert.Equal(t, "stop", res.FinishReason)
		assert.Equal(t, "Hi", cl.text())
		assert.Empty(t, cont.opened(), "a finished answer is not continued")
	})
}

// 09: Chunk.Raw: 'the event as the upstream sent it, for a caller's stream to
// pass on as it came; the relay sets it to nil on a chunk whose Text it
// changed' — only then: a chunk that carried a running usage beside its text
// keeps its bytes (its id and model), the usage taken from its fields.
func TestAChunkThatCarriedAUsageKeepsItsRaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		running := step{chunk: Chunk{Text: "Hi", Usage: &Usage{PromptTokens: 3, CompletionTokens: 1}, Raw: []byte("raw:Hi+usage")}}
		up := plays("up", running, finish(0, "stop"), usage(0, 3, 1), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		require.Len(t, cl.chunks, 2)
		assert.Nil(t, cl.chunks[0].Usage)
		assert.Equal(t, "Hi", cl.chunks[0].Text)
		assert.Equal(t, "raw:Hi+usage", string(cl.chunks[0].Raw), "its text was not changed: the upstream's bytes go on")
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage)
	})
}

// 10: Relay: 'An error from emit means the caller has gone ...: the relay
// stops at once and returns it' — on the finish chunk as on any other.
func TestACallerWhoRefusesTheFinishGetsItsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), finish(0, "stop"), usage(500*time.Millisecond, 3, 1), fail(0, io.EOF))
		cl := newCaller()
		cl.failAt = 2 // the finish
		start := time.Now()
		_, err := Relay(ctx, limits, targets(up), cl.emit)
		require.ErrorIs(t, err, errGone, "the caller's own error comes back")
		assert.Zero(t, time.Since(start), "at once: no wait for the usage of a caller who left")
		assert.Len(t, cl.chunks, 2)
	})
}
