package streaming

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

func TestRelaysAnAnswerChunkByChunkAsItComes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := plays("alpha", say(100*time.Millisecond, "The sky"), say(300*time.Millisecond, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(up), c.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", c.text())
		assert.Equal(t, []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}, c.at,
			"each chunk goes on the moment it arrives, not when the answer is whole")
		assert.Equal(t, []byte("raw:The sky"), c.chunks[0].Raw, "as the upstream sent it")
		assert.Equal(t, Result{Text: "The sky is blue.", FinishReason: "stop", Served: []string{"alpha"}}, res)
		assert.Equal(t, 1, up.closed(), "the stream is closed")
	})
}

func TestNoTargetsOrNoLimitsIsAnError(t *testing.T) {
	_, err := Relay(t.Context(), limits, nil, newCaller().emit)
	assert.ErrorIs(t, err, ErrNoTargets)
	up := plays("up", say(0, "hi"), finish(0, "stop"), fail(0, io.EOF))
	for _, cfg := range []Config{{Idle: time.Second}, {FirstToken: time.Second}, {FirstToken: -1, Idle: time.Second}} {
		_, err := Relay(t.Context(), cfg, targets(up), newCaller().emit)
		assert.ErrorIs(t, err, ErrInvalidConfig, "%+v", cfg)
	}
	assert.Empty(t, up.opened(), "nothing is asked of an upstream under a config that cannot work")
}

func TestASilentUpstreamIsReplacedAfterTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		silent := plays("silent")
		alpha := plays("alpha", say(10*time.Millisecond, "hi"), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(silent, alpha), c.emit)
		require.NoError(t, err)
		assert.Equal(t, "hi", c.text(), "nothing had reached the caller: the fallback is invisible")
		assert.Equal(t, 2*time.Second+10*time.Millisecond, c.at[0], "the silent one was given exactly its first-token limit")
		assert.Equal(t, []string{"alpha"}, res.Served)
		assert.Equal(t, 1, silent.closed(), "and it was closed")
	})
}

func TestTheFirstTokenLimitRunsFromOpeningTheStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slowOpen := Target{Name: "queued", Open: func(ctx context.Context, _ string) (Stream, error) {
			<-ctx.Done() // the upstream's queue, or its response headers, never come
			return nil, ctx.Err()
		}}
		alpha := plays("alpha", say(0, "hi"), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		_, err := Relay(t.Context(), limits, []Target{slowOpen, alpha.target()}, c.emit)
		require.NoError(t, err)
		assert.Equal(t, 2*time.Second, c.at[0], "the wait to open counts against the first-token limit")

		opensLate := plays("late", say(1500*time.Millisecond, "hi"))
		lateTarget := opensLate.target()
		open := lateTarget.Open
		lateTarget.Open = func(ctx context.Context, p string) (Stream, error) {
			time.Sleep(time.Second)
			return open(ctx, p)
		}
		_, err = Relay(t.Context(), limits, []Target{lateTarget}, newCaller().emit)
		assert.ErrorIs(t, err, ErrFirstToken, "1 s to open and 1.5 s to the first chunk is 2.5 s: past the limit of 2 s")
	})
}

func TestFirstTokenAndIdleAreTheirOwnErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, err := Relay(t.Context(), limits, targets(plays("silent")), newCaller().emit)
		assert.ErrorIs(t, err, ErrFirstToken)
		assert.NotErrorIs(t, err, ErrIdle)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "the limit ran out, not the caller's deadline")

		_, err = Relay(t.Context(), limits, targets(plays("stalls", say(0, "Hel"))), newCaller().emit)
		assert.ErrorIs(t, err, ErrIdle)
		assert.NotErrorIs(t, err, ErrFirstToken)
	})
}

func TestTheFirstTokenLimitIsNotTheIdleLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// A first chunk after 1.5 s is within the first-token limit of 2 s
		// though past the idle limit of 1 s; a gap of 0.9 s between the
		// next ones is within the idle limit however long the answer runs.
		steps := []step{say(1500*time.Millisecond, "a")}
		for range 20 {
			steps = append(steps, say(900*time.Millisecond, "b"))
		}
		steps = append(steps, finish(900*time.Millisecond, "stop"), fail(0, io.EOF))
		c := newCaller()
		_, err := Relay(t.Context(), limits, targets(plays("slow", steps...)), c.emit)
		require.NoError(t, err)
		assert.Len(t, c.chunks, 22)

		_, err = Relay(t.Context(), limits, targets(plays("late", say(2100*time.Millisecond, "a"))), newCaller().emit)
		assert.ErrorIs(t, err, ErrFirstToken, "2.1 s is past the first-token limit")
		_, err = Relay(t.Context(), limits, targets(plays("gap", say(0, "a"), say(1100*time.Millisecond, "b"))), newCaller().emit)
		assert.ErrorIs(t, err, ErrIdle, "a gap of 1.1 s is past the idle limit")
	})
}

func TestEveryFailureBeforeTheFirstChunkFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first *upstream
		cause error
	}{
		{"it cannot open", &upstream{name: "first", openErr: errors.New("connection refused")}, nil},
		{"it fails", plays("first", fail(10*time.Millisecond, errors.New("503"))), nil},
		{"a malformed chunk", plays("first", fail(10*time.Millisecond, ErrMalformed)), ErrMalformed},
		{"it ends before finishing", plays("first", fail(10*time.Millisecond, io.EOF)), ErrTruncated},
		{"a role chunk, then silence", plays("first", say(10*time.Millisecond, "")), ErrFirstToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				second := plays("second", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
				c := newCaller()
				res, err := Relay(t.Context(), limits, targets(tc.first, second), c.emit)
				require.NoError(t, err)
				assert.Equal(t, "ok", c.text())
				assert.Equal(t, []string{"second"}, res.Served)

				_, err = Relay(t.Context(), limits, targets(tc.first), newCaller().emit)
				require.Error(t, err, "alone, its failure is the answer")
				assert.NotErrorIs(t, err, ErrBroken, "nothing had reached the caller: not a broken answer")
				if tc.cause != nil {
					assert.ErrorIs(t, err, tc.cause)
				}
			})
		})
	}
}

func TestAChunkThatSaysNothingYetWaitsForOneThatDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The role chunk an upstream sends at once says nothing of the
		// answer: held back, it keeps the fallback invisible a while longer.
		first := plays("first", say(0, ""), fail(10*time.Millisecond, errors.New("reset")))
		second := plays("second", say(0, ""), say(300*time.Millisecond, "ok"), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(first, second), c.emit)
		require.NoError(t, err, "nothing had reached the caller when first broke")
		assert.Equal(t, []string{"second"}, res.Served)
		require.Len(t, c.chunks, 3, "second's role chunk, its text, its finish: nothing of first's")
		assert.Equal(t, "raw:", string(c.chunks[0].Raw), "the role chunk goes first")
		assert.Equal(t, []time.Duration{310 * time.Millisecond, 310 * time.Millisecond, 310 * time.Millisecond}, c.at,
			"sent with the first chunk that says something")
	})
}

func TestAnAnswerBrokenAfterItsFirstChunkIsNeverSplicedOntoAnother(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		cause error
	}{
		{"a reset", []step{say(0, "The sky"), fail(10*time.Millisecond, errors.New("connection reset"))}, nil},
		{"a stall", []step{say(0, "The sky")}, ErrIdle},
		{"a malformed chunk", []step{say(0, "The sky"), fail(10*time.Millisecond, ErrMalformed)}, ErrMalformed},
		{"an end before finishing", []step{say(0, "The sky"), fail(10*time.Millisecond, io.EOF)}, ErrTruncated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				first := plays("first", tc.steps...)
				second := plays("second", say(0, "A different answer."), finish(0, "stop"), fail(0, io.EOF))
				c := newCaller()
				res, err := Relay(t.Context(), limits, targets(first, second), c.emit)
				require.ErrorIs(t, err, ErrBroken, "the caller must end its stream with an error, never a clean end")
				if tc.cause != nil {
					assert.ErrorIs(t, err, tc.cause, "and the error says why")
				}
				assert.Equal(t, "The sky", c.text(), "the caller has what it had, and nothing of another answer")
				assert.Empty(t, second.opened(), "a target that cannot continue is never asked")
				assert.Equal(t, Result{Text: "The sky", Served: []string{"first"}}, res)
			})
		})
	}
}

func TestABrokenAnswerContinuesOnATargetThatCan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := plays("first", say(0, "The sky"), say(100*time.Millisecond, " is"), fail(10*time.Millisecond, errors.New("reset")))
		plain := plays("plain", say(0, "Another answer."), finish(0, "stop"), fail(0, io.EOF))
		cont := continues("cont", say(50*time.Millisecond, " blue."), finish(0, "stop"), usage(0, 12, 3), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(first, plain, cont), c.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", c.text(), "one answer, as if nothing had happened")
		assert.Equal(t, []string{"The sky is"}, cont.opened(), "the continuation was given the answer so far as its prefill")
		assert.Empty(t, plain.opened(), "a target that cannot continue is skipped")
		assert.Equal(t, []string{"first", "cont"}, res.Served)
		assert.Equal(t, "stop", res.FinishReason)
		assert.Equal(t, 1, first.closed())
		assert.Equal(t, 1, cont.closed())
	})
}

func TestAContinuationThatRepeatsThePrefillHasTheRepeatDropped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in one chunk", []step{say(0, "The sky is blue.")}},
		{"across chunks", []step{say(0, "The"), say(0, " sky"), say(0, " is blue.")}},
		{"after a role chunk", []step{say(0, ""), say(0, "The sky is"), say(0, " blue.")}},
		{"not repeated at all", []step{say(0, " blue.")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				first := plays("first", say(0, "The sky is"), fail(0, errors.New("reset")))
				cont := continues("cont", append(tc.steps, finish(0, "stop"), fail(0, io.EOF))...)
				c := newCaller()
				res, err := Relay(t.Context(), limits, targets(first, cont), c.emit)
				require.NoError(t, err)
				assert.Equal(t, "The sky is blue.", c.text())
				assert.Equal(t, "The sky is blue.", res.Text)
				for _, ch := range c.chunks {
					if ch.Raw != nil {
						assert.Equal(t, "raw:"+ch.Text, string(ch.Raw)[:min(len(ch.Raw), 4+len(ch.Text))], "a chunk whose text was cut must not carry the upstream's uncut bytes")
					}
				}
			})
		})
	}
}

func TestAContinuationThatOnlyStartsLikeThePrefillLosesNoText(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		want  string
	}{
		{"a first word the prefill also starts with", []step{say(0, "The"), say(0, " dog"), say(0, " ran.")}, "The cat sat.The dog ran."},
		{"a longer start, then another way", []step{say(0, "The c"), say(0, "ow ran.")}, "The cat sat.The cow ran."},
		{"a start of the prefill, then the end", []step{say(0, "The")}, "The cat sat.The"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				first := plays("first", say(0, "The cat sat."), fail(0, errors.New("reset")))
				cont := continues("cont", append(tc.steps, finish(0, "stop"), fail(0, io.EOF))...)
				c := newCaller()
				res, err := Relay(t.Context(), limits, targets(first, cont), c.emit)
				require.NoError(t, err)
				assert.Equal(t, tc.want, c.text(), "what was held back as a possible repeat is passed on once it is not one")
				assert.Equal(t, tc.want, res.Text)
			})
		})
	}
}

func TestAnAnswerWithToolCallsIsNeverContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		call := step{chunk: Chunk{Other: true, Raw: []byte(`raw:tool_calls`)}}
		first := plays("first", say(0, "Let me check."), call, fail(10*time.Millisecond, errors.New("reset")))
		cont := continues("cont", say(0, " done."), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		_, err := Relay(t.Context(), limits, targets(first, cont), c.emit)
		assert.ErrorIs(t, err, ErrBroken, "a prefill is text: the tool call would be lost, and the answer would read as prose")
		assert.Empty(t, cont.opened())
		require.Len(t, c.chunks, 2)
		assert.True(t, c.chunks[1].Other, "the tool call itself was passed on")
	})
}

func TestARequestCanOptOutOfContinuation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := plays("first", say(0, "The sky"), fail(0, errors.New("reset")))
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cfg := limits
		cfg.NoContinue = true
		_, err := Relay(t.Context(), cfg, targets(first, cont), newCaller().emit)
		assert.ErrorIs(t, err, ErrBroken)
		assert.Empty(t, cont.opened())

		second := continues("second", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		_, err = Relay(t.Context(), cfg, targets(plays("silent"), second), newCaller().emit)
		assert.NoError(t, err, "opting out of continuation is not opting out of falling back before the first chunk")
	})
}

func TestAContinuationThatFailsBeforeItsFirstChunkIsReplacedToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := plays("first", say(0, "The sky"), fail(0, errors.New("reset")))
		silent := continues("silent")
		down := &upstream{name: "down", canContinue: true, openErr: errors.New("refused")}
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		start := time.Now()
		res, err := Relay(t.Context(), limits, targets(first, silent, down, cont), c.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", c.text())
		assert.Equal(t, 2*time.Second, time.Since(start), "a continuation is held to the first-token limit too")
		assert.Equal(t, []string{"The sky"}, down.opened())
		assert.Equal(t, []string{"first", "cont"}, res.Served, "only targets whose chunks reached the caller")
	})
}

func TestAContinuationThatBreaksIsContinuedInTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		first := plays("first", say(0, "The"), fail(0, errors.New("reset")))
		second := continues("second", say(0, " sky"), fail(0, errors.New("reset")))
		third := continues("third", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(first, second, third), c.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", c.text())
		assert.Equal(t, []string{"The sky"}, third.opened(), "the prefill is everything the caller has")
		assert.Equal(t, []string{"first", "second", "third"}, res.Served)

		fourth := plays("first", say(0, "The"), fail(0, errors.New("reset")))
		last := continues("last", say(0, " sky"), fail(0, errors.New("reset again")))
		_, err = Relay(t.Context(), limits, targets(fourth, last), newCaller().emit)
		assert.ErrorIs(t, err, ErrBroken, "the last continuation broke and none is left")
	})
}

func TestAFinishedAnswerNeedsNoDone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
		usage Usage
	}{
		{"finish and usage, then silence", []step{say(0, "hi"), finish(0, "stop"), usage(0, 5, 1)}, Usage{5, 1}},
		{"finish, then silence", []step{say(0, "hi"), finish(0, "stop")}, Usage{}},
		{"finish, then the connection closes", []step{say(0, "hi"), finish(0, "stop"), fail(0, io.EOF)}, Usage{}},
		{"finish, then a reset", []step{say(0, "hi"), finish(0, "stop"), fail(0, errors.New("reset"))}, Usage{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				res, err := Relay(t.Context(), limits, targets(plays("up", tc.steps...)), newCaller().emit)
				require.NoError(t, err, "the answer had finished: what came after is no break")
				assert.Equal(t, "hi", res.Text)
				assert.Equal(t, tc.usage, res.Usage)
				if tc.usage != (Usage{}) {
					assert.Zero(t, time.Since(start), "finish and usage both in: done at once, not after an idle wait for [DONE]")
				}
			})
		})
	}
}

func TestUsageIsSummedAndNeverPassedOnAsAChunk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// OpenAI's format: a stream's usage comes in its last chunk, so the
		// cut one reports none (lab 12's Charge bills it); the continuation
		// reports its own, after its finish.
		first := plays("first", say(0, "The sky"), fail(0, errors.New("reset")))
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), usage(0, 14, 3), fail(0, io.EOF))
		c := newCaller()
		res, err := Relay(t.Context(), limits, targets(first, cont), c.emit)
		require.NoError(t, err)
		assert.Equal(t, Usage{PromptTokens: 14, CompletionTokens: 3}, res.Usage, "what the streams reported: the continuation's")
		for _, ch := range c.chunks {
			assert.Nil(t, ch.Usage, "usage reaches the caller once, from Result, not per stream")
		}
	})
}

func TestACallerWhoLeavesStopsTheRelayAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := plays("up", say(0, "a"), say(0, "b"), say(0, "c"), finish(0, "stop"), fail(0, io.EOF))
		cont := continues("cont", say(0, "x"), finish(0, "stop"), fail(0, io.EOF))
		c := newCaller()
		c.failAt = 2
		_, err := Relay(t.Context(), limits, targets(up, cont), c.emit)
		assert.ErrorIs(t, err, errGone, "the caller's own error comes back")
		assert.NotErrorIs(t, err, ErrBroken, "nothing broke: the caller left")
		assert.Len(t, c.chunks, 2, "nothing more is sent to a caller who left")
		assert.Empty(t, cont.opened(), "and nothing more is asked of any upstream")
		assert.Equal(t, 1, up.closed())
	})
}

func TestTheCallersContextEndsTheRelayWhateverItWaitsFor(t *testing.T) {
	for _, cause := range []string{"cancel", "deadline"} {
		for _, when := range []string{"before the first chunk", "between chunks", "while opening"} {
			t.Run(cause+" "+when, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
					defer cancel()
					if cause == "cancel" {
						time.AfterFunc(300*time.Millisecond, cancel)
					}
					up := plays("up") // silent
					if when == "between chunks" {
						up = plays("up", say(0, "a"))
					}
					tgts := targets(up, continues("next", say(0, "x"), finish(0, "stop"), fail(0, io.EOF)))
					if when == "while opening" {
						tgts[0].Open = func(ctx context.Context, _ string) (Stream, error) { <-ctx.Done(); return nil, ctx.Err() }
					}
					start := time.Now()
					_, err := Relay(ctx, limits, tgts, newCaller().emit)
					want := map[string]error{"cancel": context.Canceled, "deadline": context.DeadlineExceeded}[cause]
					assert.ErrorIs(t, err, want, "the caller's own reason, not a limit's")
					assert.NotErrorIs(t, err, ErrFirstToken)
					assert.NotErrorIs(t, err, ErrIdle)
					assert.Equal(t, map[string]time.Duration{"cancel": 300 * time.Millisecond, "deadline": 500 * time.Millisecond}[cause], time.Since(start), "at once")
				})
			})
		}
	}
}

func TestEveryStreamOpenedIsClosedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", fail(0, errors.New("503")))
		b := plays("b")
		c := plays("c", say(0, "The"), fail(0, errors.New("reset")))
		d := continues("d", say(0, " end."), finish(0, "stop"), fail(0, io.EOF))
		_, err := Relay(t.Context(), limits, targets(a, b, c, d), newCaller().emit)
		require.NoError(t, err)
		for _, u := range []*upstream{a, b, c, d} {
			assert.Equal(t, 1, u.closed(), "%s", u.name)
		}
	})
}

func ExampleRelay() {
	up := plays("up", say(0, "Hello"), say(0, ", world."), finish(0, "stop"), fail(0, io.EOF))
	res, err := Relay(context.Background(), limits, targets(up), func(c Chunk) error {
		fmt.Printf("chunk %q, finish %q\n", c.Text, c.FinishReason)
		return nil
	})
	fmt.Println(res.Text, res.FinishReason, res.Served, err)
	// Output:
	// chunk "Hello", finish ""
	// chunk ", world.", finish ""
	// chunk "", finish "stop"
	// Hello, world. stop [up] <nil>
}

var errReset = errors.New("connection reset")

// Each continuation starts from all the caller has, and may repeat all of
// it: the second one's repeat is dropped like the first's.
func TestASecondContinuationHasItsRepeatDroppedToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", say(0, "Hel"), fail(0, errReset))
		b := continues("b", say(0, "Hello"), fail(0, errReset))
		c := continues("c", say(0, "Hello"), say(0, " world"), finish(0, "stop"))
		cl := newCaller()
		_, err := Relay(t.Context(), limits, targets(a, b, c), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "Hello world", cl.text(), "b repeated \"Hel\", c repeated \"Hello\": each repeat dropped")
	})
}

// A chunk may carry the usage together with text and the finish: only the
// usage is kept back.
func TestAChunkWithUsageKeepsItsTextAndFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", step{chunk: Chunk{Text: "Hi", FinishReason: "stop", Usage: &Usage{3, 1}}})
		cl := newCaller()
		res, err := Relay(t.Context(), limits, targets(a), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "Hi", cl.text())
		assert.Equal(t, "stop", res.FinishReason, "the answer finished with that chunk")
		assert.Equal(t, Usage{3, 1}, res.Usage)
		for _, ch := range cl.chunks {
			assert.Nil(t, ch.Usage, "the usage reaches the caller once, from Result, not on the chunk")
		}
	})
}

// A stream replaced before its first chunk ran on an upstream that bills
// for it: a usage it reported (a running usage, as vLLM's
// continuous_usage_stats sends on every chunk) is in the sum.
func TestUsageOfAStreamReplacedBeforeItsFirstChunkIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", usage(0, 5, 0), fail(0, errReset))
		b := plays("b", say(0, "Hi"), finish(0, "stop"), usage(0, 3, 1))
		res, err := Relay(t.Context(), limits, targets(a, b), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, Usage{8, 1}, res.Usage, "a's 5 prompt tokens and b's 3 + 1")
	})
}

// A chunk that carries a tool call is more than text even when it carries
// text too: the answer is never continued as prose.
func TestAToolCallChunkWithTextIsNeverContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := plays("a", step{chunk: Chunk{Text: "Checking.", Other: true}}, fail(0, errReset))
		b := continues("b", say(0, " Sure!"), finish(0, "stop"))
		_, err := Relay(t.Context(), limits, targets(a, b), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken)
		assert.Empty(t, b.opened(), "b is never asked to continue a tool call")
	})
}

// A caller who leaves while a stream is still opening is gone: the next
// target is not opened for nobody.
func TestACallerWhoLeavesWhileAStreamOpensIsNotPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		hung := Target{Name: "a", Open: func(ctx context.Context, _ string) (Stream, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}}
		b := plays("b", say(0, "Hi"), finish(0, "stop"))
		_, err := Relay(ctx, limits, []Target{hung, b.target()}, newCaller().emit)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Empty(t, b.opened(), "b is not opened after the caller's deadline")
	})
}

// Some servers (vLLM with continuous_usage_stats) report a running usage on
// every chunk: each report is the stream's whole use so far, so the last is
// what the stream used — and what the streams used adds up across streams.
func TestARunningUsageIsTheStreamsLastReportNotTheirSum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		running := func(text string, prompt, completion int) step {
			return step{chunk: Chunk{Text: text, Usage: &Usage{PromptTokens: prompt, CompletionTokens: completion}}}
		}
		a := plays("a", running("The", 3, 1), running(" sky", 3, 2), fail(0, errReset))
		cont := continues("cont", running(" is", 10, 1), running(" blue.", 10, 2), finish(0, "stop"), usage(0, 10, 2))
		res, err := Relay(t.Context(), limits, targets(a, cont), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", res.Text)
		assert.Equal(t, Usage{PromptTokens: 13, CompletionTokens: 4}, res.Usage,
			"each stream's last report (3+2 and 10+2), summed over the two streams: not every running report added up")
	})
}

// A chunk that carries the finish and the usage together (a server that
// sends the usage on its last choice chunk) leaves nothing to read.
func TestAFinishThatCarriesTheUsageEndsTheRelayAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		a := plays("a", say(0, "Hi"), step{chunk: Chunk{Text: "!", FinishReason: "stop", Usage: &Usage{PromptTokens: 3, CompletionTokens: 2}}})
		res, err := Relay(t.Context(), limits, targets(a), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 2}, res.Usage)
		assert.Zero(t, time.Since(start), "the finish and the usage are in: done at once, not after an idle wait for more")
	})
}
