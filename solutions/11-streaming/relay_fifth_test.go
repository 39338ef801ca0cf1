package streaming

// Tests for the bugs of an outsider's fifth bank aimed at the tests' gaps,
// and one the reference itself had: each passes on the reference and fails
// with its bug.

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

// 01: 'what follows it is read only for the usage' — a chunk after the finish
// that carries only a tool-call fragment (anything besides text) is dropped too.
func TestAToolCallChunkAfterTheFinishIsNotPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		late := step{chunk: Chunk{Other: true, Raw: []byte("raw:late tool_calls")}}
		up := plays("up", say(0, "Hi"), finish(0, "stop"), late, usage(0, 3, 1), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		assert.Len(t, cl.chunks, 2, "the text and the finish: nothing after the finish reaches the caller")
		for _, ch := range cl.chunks {
			assert.False(t, ch.Other, "a tool-call fragment after the finish reached the caller")
		}
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage)
	})
}

// 02: 'The first-token limit runs from Open to a stream's first chunk that says
// something (text, anything besides text, a finish reason …)' — a first chunk
// that is only a finish (a content filter) stops it; the usage that never
// comes is then awaited for Idle, and the finished answer is no break.
func TestAFinishOnlyFirstChunkStopsTheFirstTokenClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		filtered := plays("filtered", finish(10*time.Millisecond, "content_filter")) // then silence: no usage
		start := time.Now()
		res, err := Relay(ctx, limits, targets(filtered), newCaller().emit)
		require.NoError(t, err, "the answer finished: silence after the finish is not a break")
		assert.Equal(t, "content_filter", res.FinishReason)
		assert.Equal(t, 10*time.Millisecond+limits.Idle, time.Since(start), "the idle limit after the finish, not the first-token limit from Open")
	})
}

// 03: 'A repeat is dropped only once it has covered the whole prefill' — text a
// continuation held back as a possible repeat goes on as soon as a chunk shows
// it is not one: a tool-call chunk does, and the text is not lost when the
// stream then breaks (nor sent after the call).
func TestTextHeldAsARepeatGoesOnBeforeAToolCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The cat sat."), fail(0, errReset))
		call := step{chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}
		cont := continues("cont", say(0, "The"), call, fail(0, errReset))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.ErrorIs(t, err, ErrBroken, "a tool call is never continued")
		assert.Equal(t, "The cat sat.The", cl.text(), "cont's \"The\" was not a repeat: it reached the caller")
		assert.Equal(t, "The cat sat.The", res.Text)
		before := ""
		for _, ch := range cl.chunks {
			before += ch.Text
			if ch.Other {
				break
			}
		}
		assert.Equal(t, "The cat sat.The", before, "the text cont sent before its tool call goes before it")
	})
}

// 04: 'the idle limit between chunks after it' — after a continuation's first
// chunk, even one held back as a possible repeat, a stall is cut at Idle.
func TestAContinuationThatStallsMidRepeatIsCutAtTheIdleLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The cat sat."), fail(0, errReset))
		c1 := continues("c1", say(0, "The cat")) // then silence
		c2 := continues("c2", say(0, " It purred."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		start := time.Now()
		res, err := Relay(ctx, limits, targets(first, c1, c2), cl.emit)
		require.NoError(t, err, "c1 went idle and c2 continued")
		assert.Equal(t, limits.Idle, time.Since(start), "c1 was cut at the idle limit")
		assert.Equal(t, "The cat sat. It purred.", cl.text())
		assert.Equal(t, []string{"first", "c2"}, res.Served)
	})
}

// 06: 'the relay sets it [Raw] to nil on a chunk whose Text it changed' — a
// finish chunk whose text was all repeat goes on with its text cut and no Raw,
// or the caller's stream would write the repeat from the upstream's bytes.
func TestAFinishChunkWhoseTextWasAllRepeatDropsItsRaw(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky is"), fail(0, errReset))
		last := step{chunk: Chunk{Text: "The sky is", FinishReason: "length", Raw: []byte("raw:The sky is|length")}}
		cont := continues("cont", last, fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "length", res.FinishReason)
		require.Len(t, cl.chunks, 2, "first's text, then cont's finish")
		assert.Equal(t, "", cl.chunks[1].Text, "the repeat is cut")
		assert.Nil(t, cl.chunks[1].Raw, "its text was changed: the upstream's bytes, repeat and all, must not go on")
	})
}

// 07: 'a continuation that starts by repeating the prefill has the repeat
// dropped' — only at its start: text later in the continuation that happens
// to match the prefill is the answer's own.
func TestOnlyTheStartOfAContinuationIsCheckedForARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "Yes"), fail(0, errReset))
		cont := continues("cont", say(0, ".\n\n"), say(0, "Yes"), say(0, ", really."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "Yes.\n\nYes, really.", cl.text(), "the second \"Yes\" is the answer's, not a repeat")
		assert.Equal(t, "Yes.\n\nYes, really.", res.Text)
	})
}

// 09: 'a target that … ends early … is replaced by the next one, never opened
// again' — an upstream that closes the stream before its first chunk is not
// retried.
func TestAStreamThatEndsBeforeItsFirstChunkIsNotReopened(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		early := plays("early", fail(0, io.EOF))
		next := plays("next", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		res, err := Relay(ctx, limits, targets(early, next), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, []string{"next"}, res.Served)
		assert.Len(t, early.opened(), 1, "opened once, then replaced")
		assert.Equal(t, 1, early.closed())
	})
}

// 10: 'it is held back until one that does [say something], and goes with it'
// — a tool call or a finish says something too: the role chunk goes with it.
func TestTheRoleChunkGoesWithAFirstChunkThatIsNotText(t *testing.T) {
	for _, tc := range []struct {
		name string
		rest []step
	}{
		{"a tool call", []step{{chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}, finish(0, "tool_calls")}},
		{"a finish", []step{finish(0, "content_filter")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				role := step{chunk: Chunk{Raw: []byte("raw:role")}}
				up := plays("up", append(append([]step{role}, tc.rest...), usage(0, 3, 1), fail(0, io.EOF))...)
				cl := newCaller()
				_, err := Relay(ctx, limits, targets(up), cl.emit)
				require.NoError(t, err)
				require.NotEmpty(t, cl.chunks)
				assert.Equal(t, "raw:role", string(cl.chunks[0].Raw), "the held role chunk goes first, with the first chunk that says something")
			})
		})
	}
}

// 'the caller's context ending means the same: the relay stops at once and
// returns it' — by cancel or by deadline, whatever error the stream's read
// gives for it (a body read on a closed connection says only that).
func TestACallerWhoLeavesGetsItsReasonWhateverTheStreamSays(t *testing.T) {
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded} {
		t.Run(cause.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				if cause == context.Canceled {
					time.AfterFunc(100*time.Millisecond, cancel)
				}
				conn := Target{Name: "conn", Open: func(context.Context, string) (Stream, error) {
					return &connStream{chunks: []Chunk{{Text: "Hel"}}}, nil
				}}
				_, err := Relay(ctx, limits, []Target{conn}, newCaller().emit)
				assert.ErrorIs(t, err, cause, "the caller's reason, got %v", err)
				assert.False(t, errors.Is(err, ErrBroken), "a caller who left is no broken answer")
			})
		})
	}
}
