package streaming

// Tests for the bugs of an outsider's ninth bank aimed at the tests' gaps
// (every ending crossed with every field of the Result), and for a hole its
// reader found (a target whose held role chunk reached the caller was not
// listed as serving): each passes on the reference and fails with its bug.

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

// 01: Result.Usage: 'the last usage each stream reported, summed over the
// streams'; README: 'Every stream the relay opened ran on an upstream that
// bills for it'. A stream the relay cut at a limit ran too: what it reported
// before the cut is in the sum — cut at the first-token limit and replaced,
// cut at the idle limit and broken, cut at the idle limit and continued.
func TestTheUsageOfAStreamCutByALimitIsCounted(t *testing.T) {
	running := func(text string, prompt, completion int) step {
		return step{chunk: Chunk{Text: text, Usage: &Usage{PromptTokens: prompt, CompletionTokens: completion}}}
	}
	t.Run("first-token limit", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			slow := plays("slow", usage(0, 5, 0)) // then silence: cut at 2 s
			next := plays("next", say(0, "Hi"), finish(0, "stop"), usage(0, 3, 1), fail(0, io.EOF))
			res, err := Relay(ctx, limits, targets(slow, next), newCaller().emit)
			require.NoError(t, err)
			assert.Equal(t, []string{"next"}, res.Served)
			assert.Equal(t, Usage{PromptTokens: 8, CompletionTokens: 1}, res.Usage, "slow's 5 prompt tokens and next's 3 + 1")
		})
	})
	t.Run("idle limit, broken", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			stalls := plays("stalls", running("The", 3, 1), running(" sky", 3, 2)) // then silence
			res, err := Relay(ctx, limits, targets(stalls), newCaller().emit)
			require.ErrorIs(t, err, ErrBroken)
			assert.ErrorIs(t, err, ErrIdle)
			assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 2}, res.Usage, "the last report before the stall")
		})
	})
	t.Run("idle limit, continued", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			stalls := plays("stalls", running("The sky", 3, 2)) // then silence
			cont := continues("cont", say(0, " is blue."), finish(0, "stop"), usage(0, 12, 3), fail(0, io.EOF))
			res, err := Relay(ctx, limits, targets(stalls, cont), newCaller().emit)
			require.NoError(t, err)
			assert.Equal(t, "The sky is blue.", res.Text)
			assert.Equal(t, Usage{PromptTokens: 15, CompletionTokens: 5}, res.Usage, "stalls' 3 + 2 and cont's 12 + 3")
		})
	})
}

// 02: Relay: 'A chunk that says nothing yet — no text, nothing else, no finish
// reason: the role — does not count as the first to reach the caller: it is
// held back until one that does, and goes with it'; '… the caller reads on as
// if nothing happened'. A continuation that sends its role chunk and then
// fails before saying anything is replaced, and nothing of it — its role
// chunk neither — reaches the caller.
func TestTheRoleChunkOfAReplacedContinuationIsNeverSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky"), fail(0, errReset))
		c1 := continues("c1", step{chunk: Chunk{Raw: []byte("raw:role of c1")}}, fail(10*time.Millisecond, errReset))
		c2 := continues("c2", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, c1, c2), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, []string{"first", "c2"}, res.Served)
		for _, ch := range cl.chunks {
			assert.NotEqual(t, "raw:role of c1", string(ch.Raw), "c1 said nothing and was replaced: its role chunk reached the caller")
		}
	})
}

// 03: Relay: 'The first-token limit runs from Open to a stream's first chunk
// that says something'; ErrFirstToken: 'no chunk within Config.FirstToken of
// opening a stream'. The first words came at 100 ms, behind a role chunk: a
// caller that takes 2.5 s to accept the role chunk is not an upstream slow
// to start.
func TestASlowCallerOnTheRoleChunkIsNotASlowFirstToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		role := step{after: 100 * time.Millisecond, chunk: Chunk{Raw: []byte("raw:role")}}
		up := plays("up", role, say(0, "The sky"), say(100*time.Millisecond, " is blue."), finish(100*time.Millisecond, "stop"), fail(0, io.EOF))
		n := 0
		slowOnTheRole := func(Chunk) error {
			n++
			if n == 1 {
				time.Sleep(2500 * time.Millisecond) // the caller's first write: headers, then the role
			}
			return nil
		}
		res, err := Relay(ctx, limits, targets(up), slowOnTheRole)
		require.NoError(t, err, "the upstream said its first words at 100 ms and never paused for more than 100 ms")
		assert.Equal(t, "The sky is blue.", res.Text)
		assert.Equal(t, "stop", res.FinishReason)
		assert.Equal(t, 4, n, "the role, two texts, the finish")
	})
}

// 04: Relay: 'A chunk that says nothing yet … is held back until one that does,
// and goes with it'. A first chunk that carries the finish and the usage
// together (a filtered or one-chunk answer) says something: the held role
// chunk goes first, with it.
func TestTheRoleChunkGoesWithAFirstChunkThatCarriesTheFinishAndTheUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		last Chunk
	}{
		{"a finish with no text", Chunk{FinishReason: "content_filter", Usage: &Usage{PromptTokens: 7}, Raw: []byte("raw:filtered")}},
		{"text, finish and usage", Chunk{Text: "Hi", FinishReason: "stop", Usage: &Usage{PromptTokens: 3, CompletionTokens: 1}, Raw: []byte("raw:Hi")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				up := plays("up", step{chunk: Chunk{Raw: []byte("raw:role")}}, step{chunk: tc.last})
				cl := newCaller()
				res, err := Relay(ctx, limits, targets(up), cl.emit)
				require.NoError(t, err)
				require.Len(t, cl.chunks, 2, "the role chunk, then the last chunk")
				assert.Equal(t, "raw:role", string(cl.chunks[0].Raw), "the held role chunk goes first")
				assert.Equal(t, tc.last.FinishReason, res.FinishReason)
				assert.Equal(t, *tc.last.Usage, res.Usage)
			})
		})
	}
}

// 05: HINTS (the loop over targets): 'When the targets run out, wrap the last
// failure in ErrBroken if anything was sent …; if nothing was, return the last
// failure as it is'; Relay: 'With no such target the error wraps ErrBroken and
// the failure'. A target that cannot open says why, and the error carries it:
// alone, and as a continuation that could not open.
func TestATargetThatCannotOpenSaysWhyInTheError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		errRefused := errors.New("dial tcp 10.0.0.2:443: connection refused")
		down := &upstream{name: "down", openErr: errRefused}
		_, err := Relay(ctx, limits, targets(down), newCaller().emit)
		require.Error(t, err)
		assert.ErrorIs(t, err, errRefused, "its own failure, as it is: got %v", err)
		assert.NotErrorIs(t, err, ErrBroken, "nothing had reached the caller")

		first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		contDown := &upstream{name: "cont", canContinue: true, openErr: errRefused}
		_, err = Relay(ctx, limits, targets(first, contDown), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken)
		assert.ErrorIs(t, err, errRefused, "the failure ErrBroken wraps: got %v", err)
	})
}

// 06: ErrIdle: 'no chunk within Config.Idle of the last one'; Config.Idle:
// 'bounds the gap between two chunks'. A chunk that says nothing (a
// keep-alive, a running usage) is the last chunk: the gap after it is bounded
// too — mid-answer it breaks the answer at Idle, after the finish it ends the
// wait for the usage at Idle. Nothing waits for the caller's deadline.
func TestTheGapAfterAChunkThatSaysNothingIsHeldToIdle(t *testing.T) {
	for _, tc := range []struct {
		name     string
		steps    []step
		finished bool
	}{
		{"an empty chunk mid-answer", []step{say(0, "The sky"), say(300*time.Millisecond, "")}, false},
		{"a running usage mid-answer", []step{say(0, "The sky"), usage(300*time.Millisecond, 3, 2)}, false},
		{"an empty chunk after the finish", []step{say(0, "Hi"), finish(0, "stop"), say(300*time.Millisecond, "")}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				up := plays("up", tc.steps...) // then silence
				start := time.Now()
				res, err := Relay(ctx, limits, targets(up), newCaller().emit)
				if tc.finished {
					require.NoError(t, err, "the answer had finished")
					assert.Equal(t, "stop", res.FinishReason)
				} else {
					require.ErrorIs(t, err, ErrBroken)
					assert.ErrorIs(t, err, ErrIdle)
					assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline never came into it")
				}
				assert.Equal(t, 300*time.Millisecond+limits.Idle, time.Since(start), "Idle after the last chunk")
			})
		})
	}
}

// 07: ErrIdle: 'no chunk within Config.Idle of the last one'; Relay: 'a limit
// that runs out is reported as ErrFirstToken or ErrIdle'. A stream that hands
// out its next chunk 1.5 s after the last, having ignored its context, went
// idle at 1 s: the late chunk is not passed on, and the answer is broken.
func TestAChunkThatComesAfterTheIdleLimitIsNotPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		// deaf: each chunk 1.5 s after the last — the first within FirstToken (2 s), the next past Idle (1 s)
		up := deaf("up", 1500*time.Millisecond, Chunk{Text: "The sky"}, Chunk{Text: " is blue.", FinishReason: "stop"})
		cl := newCaller()
		res, err := Relay(ctx, limits, []Target{up}, cl.emit)
		require.ErrorIs(t, err, ErrBroken, "the gap of 1.5 s was past the idle limit")
		assert.ErrorIs(t, err, ErrIdle)
		assert.Equal(t, "The sky", cl.text(), "the chunk that came after the limit never reached the caller")
		assert.Equal(t, Result{Text: "The sky", Served: []string{"up"}}, res)
	})
}

// 08: Relay: 'a target that … errs … is replaced by the next one … After it, a
// failure goes to the next target that CanContinue'; 'An error from emit means
// the caller has gone, and the caller's context ending means the same' — only
// those. An upstream whose own failure wraps context.Canceled (a proxy that
// cancelled the upstream request) while the caller's context is live has
// failed: it is replaced, or continued, like any other failure.
func TestAnUpstreamsOwnCancellationIsNotTheCallerLeaving(t *testing.T) {
	errUpstreamCanceled := fmt.Errorf("upstream: request canceled by proxy: %w", context.Canceled)
	t.Run("before the first chunk", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			first := plays("first", fail(10*time.Millisecond, errUpstreamCanceled))
			second := plays("second", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
			cl := newCaller()
			res, err := Relay(ctx, limits, targets(first, second), cl.emit)
			require.NoError(t, err, "the caller never left: the next upstream answers")
			assert.Equal(t, "ok", cl.text())
			assert.Equal(t, []string{"second"}, res.Served)
		})
	})
	t.Run("after the first chunk", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, errUpstreamCanceled))
			cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
			cl := newCaller()
			res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
			require.NoError(t, err, "the caller never left: the answer is continued")
			assert.Equal(t, "The sky is blue.", cl.text())
			assert.Equal(t, []string{"first", "cont"}, res.Served)
		})
	})
}

// 09: Relay 'returns what the caller received — when it returns an error too';
// Result.FinishReason: 'why it ended'. A caller who leaves (by cancel or by
// deadline) while the usage is awaited had received the whole answer, finish
// reason and all: the Result says so beside the caller's error.
func TestACallerWhoLeavesAfterTheFinishStillGetsTheFinishInTheResult(t *testing.T) {
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded} {
		t.Run(cause.Error(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
				defer cancel()
				if cause == context.Canceled {
					time.AfterFunc(200*time.Millisecond, cancel)
				}
				up := plays("up", say(0, "Hi"), finish(0, "stop")) // then silence: the usage never comes
				cl := newCaller()
				res, err := Relay(ctx, limits, targets(up), cl.emit)
				require.ErrorIs(t, err, cause)
				require.Len(t, cl.chunks, 2, "the caller took the text and the finish")
				assert.Equal(t, Result{Text: "Hi", FinishReason: "stop", Served: []string{"up"}}, res)
			})
		})
	}
}

// 10: README: 'The cause is what keeps the three endings apart:
// context.Cause(ctx) says ErrFirstToken or ErrIdle when a limit fired, and the
// caller's own context.Canceled or DeadlineExceeded when the caller left —
// which must never be mistaken for a silent upstream'. An error for a limit
// is the limit's, and never reads as the caller's leaving.
func TestALimitsErrorNeverReadsAsTheCallerLeaving(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := Relay(ctx, limits, targets(plays("silent")), newCaller().emit)
		require.ErrorIs(t, err, ErrFirstToken)
		assert.NotErrorIs(t, err, context.Canceled, "slow to start, not a caller who cancelled: %v", err)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "slow to start, not a caller whose deadline passed: %v", err)

		_, err = Relay(ctx, limits, targets(plays("stalls", say(0, "Hel"))), newCaller().emit)
		require.ErrorIs(t, err, ErrIdle)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "stalled, not a caller whose deadline passed: %v", err)
		assert.NotErrorIs(t, err, context.Canceled, "stalled, not a caller who cancelled: %v", err)
	})
}

// Finding B (the contract's wording against the reference's reading; low
// impact). Result.Served: 'the targets whose chunks reached the caller, in
// order'. A held role chunk that emit accepted reached the caller; when the
// caller then refuses the first words, the reference lists no target,
// although the caller holds a chunk of up's (its id and model in Raw).
func TestATargetWhoseRoleChunkReachedTheCallerIsListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", step{chunk: Chunk{Raw: []byte("raw:role")}}, say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		cl.failAt = 2 // the role chunk is taken, the first words refused
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.ErrorIs(t, err, errGone)
		assert.Equal(t, "raw:role", string(cl.chunks[0].Raw))
		assert.Equal(t, []string{"up"}, res.Served, "a chunk of up's reached the caller")
	})
}
