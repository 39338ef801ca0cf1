package streaming

// Tests for the bugs of two outsiders' eighth banks aimed at the tests'
// gaps (two rules at once; a learner's own design): each passes on the
// reference and fails with its bug.

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

// 01: Result.Text: 'the answer's text, as the caller read it'; Result.Served:
// 'the targets whose chunks reached the caller, in order'. A chunk that carries
// text, the finish and the usage at once reached the caller: its text and its
// target are in the Result — as a whole answer's only chunk, and as a
// continuation's only chunk.
func TestAChunkWithTextFinishAndUsageIsInTheResult(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		whole := step{chunk: Chunk{Text: "Hi", FinishReason: "stop", Usage: &Usage{PromptTokens: 3, CompletionTokens: 1}, Raw: []byte("raw:Hi")}}
		a := plays("a", whole)
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(a), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "Hi", cl.text())
		assert.Equal(t, Result{Text: "Hi", FinishReason: "stop", Usage: Usage{PromptTokens: 3, CompletionTokens: 1}, Served: []string{"a"}}, res)

		first := plays("first", say(0, "The sky is"), fail(0, errReset))
		last := step{chunk: Chunk{Text: " blue.", FinishReason: "stop", Usage: &Usage{PromptTokens: 12, CompletionTokens: 2}, Raw: []byte("raw: blue.")}}
		cont := continues("cont", last)
		cl = newCaller()
		res, err = Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, Result{Text: "The sky is blue.", FinishReason: "stop", Usage: Usage{PromptTokens: 12, CompletionTokens: 2}, Served: []string{"first", "cont"}}, res)
	})
}

// 02: Config.NoContinue: 'the request opted out of continuation; an answer that
// breaks after its first chunk ends with ErrBroken'; Relay: 'A chunk that says
// nothing yet ... does not count as the first to reach the caller: it is held
// back until one that does'. Opting out of continuation leaves the fallback
// window as it is: a role chunk, then a reset, is replaced invisibly.
func TestAnOptedOutRequestStillHoldsTheRoleChunkBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cfg := limits
		cfg.NoContinue = true
		role := step{chunk: Chunk{Raw: []byte("raw:role of first")}}
		first := plays("first", role, fail(10*time.Millisecond, errReset))
		second := plays("second", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, cfg, targets(first, second), cl.emit)
		require.NoError(t, err, "nothing that says anything had reached the caller: the fallback is invisible")
		assert.Equal(t, []string{"second"}, res.Served)
		assert.Equal(t, "ok", cl.text())
		for _, ch := range cl.chunks {
			assert.NotEqual(t, "raw:role of first", string(ch.Raw), "the replaced stream's role chunk reached the caller")
		}
	})
}

// 03: Config.Idle: 'bounds the gap between two chunks'; Relay: 'what follows it
// [the finish] is read only for the usage (with it, the relay is done)'. With
// Idle (2 s) longer than FirstToken (0.5 s), a usage that comes 1 s after the
// finish is within the idle limit: it is counted.
func TestTheUsageAfterTheFinishIsAwaitedForIdleWhenIdleIsTheLonger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cfg := Config{FirstToken: 500 * time.Millisecond, Idle: 2 * time.Second}
		up := plays("up", say(0, "Hi"), finish(0, "stop"), usage(time.Second, 3, 1)) // then silence
		start := time.Now()
		res, err := Relay(ctx, cfg, targets(up), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage, "the usage came 1 s after the finish: within Idle")
		assert.Equal(t, time.Second, time.Since(start), "done when the usage came")
	})
}

// 04: 'an end before any finish reason is ErrTruncated'; Config.NoContinue: 'an
// answer that breaks after its first chunk ends with ErrBroken'. An opted-out
// answer whose upstream closes the stream before any finish is cut, never whole.
func TestAnOptedOutAnswerThatEndsEarlyEndsAsBroken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cfg := limits
		cfg.NoContinue = true
		up := plays("up", say(0, "The sky"), fail(10*time.Millisecond, io.EOF))
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, cfg, targets(up, cont), cl.emit)
		require.ErrorIs(t, err, ErrBroken, "the caller's stream must end with an error, never a clean end")
		assert.ErrorIs(t, err, ErrTruncated)
		assert.Empty(t, res.FinishReason)
		assert.Empty(t, cont.opened(), "opted out: never continued")
		assert.Equal(t, "The sky", cl.text())
	})
}

// 05: Config.FirstToken: 'bounds the wait for a stream's first chunk, from
// Open'; ErrFirstToken: 'no chunk within Config.FirstToken of opening a
// stream'. A continuation is a stream like any other: with FirstToken 0.5 s and
// Idle 2 s, a silent one is cut at 0.5 s and the next continues.
func TestAContinuationIsHeldToFirstTokenWhenIdleIsLonger(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cfg := Config{FirstToken: 500 * time.Millisecond, Idle: 2 * time.Second}
		first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		silent := continues("silent")
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, cfg, targets(first, silent, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, []string{"first", "cont"}, res.Served)
		require.Len(t, cl.at, 3)
		assert.Equal(t, 510*time.Millisecond, cl.at[1], "the silent continuation was given its first-token limit, 0.5 s, and no more")

		_, err = Relay(ctx, cfg, targets(plays("first", say(0, "The sky"), fail(0, errReset)), continues("silent")), newCaller().emit)
		assert.ErrorIs(t, err, ErrBroken)
		assert.ErrorIs(t, err, ErrFirstToken)
	})
}

// 06: ErrIdle: 'no chunk within Config.Idle of the last one'; Relay: 'what
// follows it [the finish] is read only for the usage'. The idle limit bounds
// the upstream's silence, not the caller's: a caller that takes 1.5 s to accept
// the finish does not cost the usage that came 100 ms after it.
func TestASlowCallerOnTheFinishDoesNotLoseTheUsage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), finish(0, "stop"), usage(100*time.Millisecond, 3, 1), fail(0, io.EOF))
		slowOnTheFinish := func(c Chunk) error {
			if c.FinishReason != "" {
				time.Sleep(1500 * time.Millisecond) // the caller's write of the last chunk
			}
			return nil
		}
		res, err := Relay(ctx, limits, targets(up), slowOnTheFinish)
		require.NoError(t, err)
		assert.Equal(t, "stop", res.FinishReason)
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage, "the upstream sent its usage 100 ms after the finish")
	})
}

// 07: Result.Served: 'the targets whose chunks reached the caller, in order';
// 'An error from emit means the caller has gone'. A caller that hangs up on a
// continuation's first chunk never got a chunk of it: the continuation did not
// serve — nor did a first target whose first chunk was refused.
func TestATargetWhoseFirstChunkTheCallerRefusedDidNotServe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky"), fail(0, errReset))
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		cl.failAt = 2 // cont's first chunk
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.ErrorIs(t, err, errGone)
		assert.Equal(t, Result{Text: "The sky", Served: []string{"first"}}, res)

		up := plays("up", say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF))
		cl = newCaller()
		cl.failAt = 1
		res, err = Relay(ctx, limits, targets(up), cl.emit)
		require.ErrorIs(t, err, errGone)
		assert.Empty(t, res.Served, "the caller took nothing of up's")
	})
}

// 08: Relay: 'the caller's context ending means the same [the caller has
// gone]: the relay stops at once and returns it'. A caller who leaves while a
// broken answer's continuation opens, or before it says anything, gets its own
// reason, at once, and nobody else is asked.
func TestACallerWhoLeavesWhileAContinuationStartsGetsItsOwnReason(t *testing.T) {
	for _, cause := range []string{"cancel", "deadline"} {
		for _, when := range []string{"while it opens", "before its first chunk"} {
			t.Run(cause+" "+when, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
					defer cancel()
					if cause == "cancel" {
						time.AfterFunc(300*time.Millisecond, cancel)
					}
					first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
					next := continues("next", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
					tgts := targets(first, continues("hung"), next) // hung: silent
					if when == "while it opens" {
						tgts[1].Open = func(ctx context.Context, _ string) (Stream, error) { <-ctx.Done(); return nil, ctx.Err() }
					}
					start := time.Now()
					_, err := Relay(ctx, limits, tgts, newCaller().emit)
					want := map[string]error{"cancel": context.Canceled, "deadline": context.DeadlineExceeded}[cause]
					assert.ErrorIs(t, err, want, "the caller's own reason, got %v", err)
					assert.NotErrorIs(t, err, ErrFirstToken)
					assert.Empty(t, next.opened(), "nobody else is asked for a caller who left")
					assert.Equal(t, map[string]time.Duration{"cancel": 300 * time.Millisecond, "deadline": 500 * time.Millisecond}[cause], time.Since(start), "at once")
				})
			})
		}
	}
}

// closeFails is a stream whose Close reports an error, as closing a
// connection the upstream already reset may.
type closeFails struct{ Stream }

func (s closeFails) Close() error {
	_ = s.Stream.Close()
	return errors.New("close: connection reset by peer")
}

// 09: Relay: 'A chunk with a finish reason ends the answer: ... an end of any
// kind after it (EOF, silence, an error) is the answer finishing, not
// breaking'. A finished answer whose stream then fails to close is whole: no
// error, and nothing is continued or spliced onto it.
func TestAFinishedAnswerWhoseStreamFailsToCloseIsWhole(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", say(0, "Hi"), finish(0, "stop"), usage(0, 3, 1))
		tg := up.target()
		open := tg.Open
		tg.Open = func(ctx context.Context, p string) (Stream, error) {
			s, err := open(ctx, p)
			if err != nil {
				return nil, err
			}
			return closeFails{s}, nil
		}
		cont := continues("cont", say(0, " there"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, []Target{tg, cont.target()}, cl.emit)
		require.NoError(t, err, "the answer had finished")
		assert.Equal(t, "Hi", cl.text())
		assert.Equal(t, Result{Text: "Hi", FinishReason: "stop", Usage: Usage{PromptTokens: 3, CompletionTokens: 1}, Served: []string{"up"}}, res)
		assert.Empty(t, cont.opened(), "a finished answer is not continued")
		assert.Equal(t, 1, up.closed())
	})
}

// 10: Relay: 'a continuation that starts by repeating the prefill has the
// repeat dropped' — only at its start. A continuation that starts with a tool
// call has not started by repeating: text after the call is its own, and
// reaches the caller whole.
func TestTextAfterAContinuationsOpeningToolCallIsNotARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky is"), fail(0, errReset))
		call := step{chunk: Chunk{Other: true, Raw: []byte("raw:tool_calls")}}
		cont := continues("cont", call, say(0, "The sky is clear."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "The sky isThe sky is clear.", cl.text(), "the text after the tool call is not a repeat")
		assert.Equal(t, "The sky isThe sky is clear.", res.Text)
	})
}

// 02: ErrIdle: 'no chunk within Config.Idle of the last one'; the README: each
// limit 'is its own error, so dashboards can tell'. An upstream whose own
// timeout fails the read 10 ms after a chunk has not gone idle: the error says
// its failure, not the relay's idle limit.
func TestAnUpstreamsOwnTimeoutMidAnswerIsNotTheIdleLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		errTimeout := fmt.Errorf("read body: %w", context.DeadlineExceeded) // an HTTP client's, a proxy's
		up := plays("up", say(0, "The sky"), fail(10*time.Millisecond, errTimeout))
		start := time.Now()
		_, err := Relay(ctx, limits, targets(up), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken)
		assert.ErrorIs(t, err, errTimeout, "the error says why the answer broke")
		assert.NotErrorIs(t, err, ErrIdle, "a gap of 10 ms is within the idle limit of 1 s")
		assert.Equal(t, 10*time.Millisecond, time.Since(start))
	})
}

// 03: Relay: 'The first-token limit runs from Open to a stream's first chunk
// that says something ... A chunk that says nothing yet — no text, nothing
// else, no finish reason: the role — does not count'. A continuation's role
// chunk does not start its idle clock: its first words may come 1.5 s after
// Open, within FirstToken (2 s) though past Idle (1 s), and a continuation
// that sends only its role chunk is slow to start, not idle.
func TestAContinuationsRoleChunkDoesNotStopItsFirstTokenClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		cont := continues("cont", say(0, ""), say(1500*time.Millisecond, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err, "cont's first words came 1.5 s after its Open: within its first-token limit")
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, []string{"first", "cont"}, res.Served)

		first = plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		roleOnly := continues("cont", say(0, "")) // then silence
		start := time.Now()
		_, err = Relay(ctx, limits, targets(first, roleOnly), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken)
		assert.ErrorIs(t, err, ErrFirstToken, "cont never said anything: slow to start")
		assert.NotErrorIs(t, err, ErrIdle)
		assert.Equal(t, 10*time.Millisecond+limits.FirstToken, time.Since(start))
	})
}

// 04: Relay: 'An error from emit means the caller has gone ...: the relay
// stops at once and returns it' — whichever chunk it refused, the one that
// carries text a continuation held back as a possible repeat included.
func TestACallerWhoRefusesTextAContinuationHeldBackGetsItsError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "The cat sat."), fail(0, errReset))
		c1 := continues("c1", say(0, "The"), say(0, " dog ran."), finish(0, "stop"), fail(0, io.EOF))
		c2 := continues("c2", say(0, " It purred."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		cl.failAt = 2 // the first chunk of c1 to reach the caller
		_, err := Relay(ctx, limits, targets(first, c1, c2), cl.emit)
		require.ErrorIs(t, err, errGone, "the caller's own error comes back")
		assert.NotErrorIs(t, err, ErrBroken, "nothing broke: the caller left")
		assert.Empty(t, c2.opened(), "nothing more is asked of any upstream")
		assert.Len(t, cl.chunks, 2, "nothing more is sent to a caller who left")
	})
}

// 05: Config.FirstToken: 'bounds the wait for a stream's first chunk, from
// Open' — a continuation's too: one whose Open hangs is cut at the limit and
// the next continues; alone, the answer ends as broken by the limit.
func TestAContinuationWhoseOpenHangsIsCutAtTheFirstTokenLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a bound, so a relay that never cuts Open fails here rather than hangs
		defer cancel()
		hung := Target{Name: "hung", CanContinue: true, Open: func(ctx context.Context, _ string) (Stream, error) {
			<-ctx.Done() // its queue, or its response headers, never come
			return nil, ctx.Err()
		}}
		first := plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		cont := continues("cont", say(0, " is blue."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		start := time.Now()
		res, err := Relay(ctx, limits, []Target{first.target(), hung, cont.target()}, cl.emit)
		require.NoError(t, err)
		assert.Equal(t, 10*time.Millisecond+limits.FirstToken, time.Since(start), "hung was given its first-token limit from Open, no more")
		assert.Equal(t, "The sky is blue.", cl.text())
		assert.Equal(t, []string{"first", "cont"}, res.Served)

		first = plays("first", say(0, "The sky"), fail(10*time.Millisecond, errReset))
		_, err = Relay(ctx, limits, []Target{first.target(), hung}, newCaller().emit)
		require.ErrorIs(t, err, ErrBroken)
		assert.ErrorIs(t, err, ErrFirstToken, "hung never opened within the limit")
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller never left")
	})
}

// 07: Relay: 'a continuation that starts by repeating the prefill has the
// repeat dropped' — the one repeat at its start: after a chunk that repeats
// the prefill exactly, its own words are passed on even when they begin like
// the prefill.
func TestAContinuationsOwnWordsAfterAnExactRepeatAreKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "Ha"), fail(0, errReset))
		cont := continues("cont", say(0, "Ha"), say(0, "Ha"), say(0, "Ha!"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "HaHaHa!", cl.text(), "cont wrote \"HaHaHa!\": its first \"Ha\" repeats the prefill, the rest is its own")
		assert.Equal(t, "HaHaHa!", res.Text)
	})
}

// 08: Relay: 'a failure goes to the next target that CanContinue ... — unless
// the answer so far holds anything but text'; Chunk.Other: 'it carries
// something besides text: tool calls'. A tool-call chunk that also carries a
// running usage (vLLM's continuous_usage_stats) is still a tool call: passed
// on as one, and never continued as prose.
func TestAToolCallOnAChunkThatCarriesAUsageIsNeverContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		text := step{chunk: Chunk{Text: "Checking.", Usage: &Usage{PromptTokens: 3, CompletionTokens: 1}, Raw: []byte("raw:Checking.")}}
		call := step{chunk: Chunk{Other: true, Usage: &Usage{PromptTokens: 3, CompletionTokens: 2}, Raw: []byte("raw:tool_calls")}}
		a := plays("a", text, call, fail(10*time.Millisecond, errReset))
		cont := continues("cont", say(0, " Done."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(a, cont), cl.emit)
		require.ErrorIs(t, err, ErrBroken, "the answer holds a tool call: it ends as broken")
		assert.ErrorIs(t, err, errReset)
		assert.Empty(t, cont.opened(), "a tool call is never continued as prose")
		require.Len(t, cl.chunks, 2)
		assert.True(t, cl.chunks[1].Other, "the tool call reached the caller as a tool call")
		assert.Nil(t, cl.chunks[1].Usage)
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 2}, res.Usage)
	})
}

// cancelSaysStream is a stream whose read, once its context ends for any
// reason, fails with context.Canceled — as a transport that cancels its
// request when the context ends reports it.
type cancelSaysStream struct{ chunks []Chunk }

func (s *cancelSaysStream) Next(ctx context.Context) (Chunk, error) {
	if len(s.chunks) > 0 {
		c := s.chunks[0]
		s.chunks = s.chunks[1:]
		return c, nil
	}
	<-ctx.Done()
	return Chunk{}, fmt.Errorf("read body: %w", context.Canceled)
}
func (s *cancelSaysStream) Close() error { return nil }

// 09: README: 'context.Cause(ctx) says ... the caller's own context.Canceled
// or DeadlineExceeded when the caller left'; Relay: 'the caller's context
// ending means the same: the relay stops at once and returns it'. A caller
// whose deadline passed gets DeadlineExceeded, whatever context error the
// stream's read gives.
func TestACallerWhoseDeadlinePassedGetsItWhenTheStreamSaysCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		up := Target{Name: "up", Open: func(context.Context, string) (Stream, error) {
			return &cancelSaysStream{chunks: []Chunk{{Text: "Hel"}}}, nil
		}}
		next := continues("next", say(0, "lo."), finish(0, "stop"), fail(0, io.EOF))
		start := time.Now()
		_, err := Relay(ctx, limits, []Target{up, next.target()}, newCaller().emit)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline passed, got %v", err)
		assert.NotErrorIs(t, err, ErrBroken, "a caller who left is no broken answer")
		assert.Empty(t, next.opened())
		assert.Equal(t, 300*time.Millisecond, time.Since(start))
	})
}

// closeFails is a stream whose Close reports an error, as closing a
// connection the upstream already reset may.

// deafStream hands out its chunks, each after wait, without ever looking at
// its context — as a stream that reads from a buffer it already holds does.
type deafStream struct {
	wait   time.Duration
	chunks []Chunk
}

func (s *deafStream) Next(context.Context) (Chunk, error) {
	time.Sleep(s.wait)
	if len(s.chunks) == 0 {
		return Chunk{}, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	return c, nil
}

func (s *deafStream) Close() error { return nil }

func deaf(name string, wait time.Duration, chunks ...Chunk) Target {
	return Target{Name: name, Open: func(context.Context, string) (Stream, error) {
		return &deafStream{wait: wait, chunks: chunks}, nil
	}}
}

// 'the caller's context ending means the same: the relay stops at once and
// returns it' — even when the stream still has chunks to hand out and never
// looks at its context.
func TestACallerWhoLeavesGetsNothingMoreFromAStreamThatIgnoresItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		up := deaf("up", 0, Chunk{Text: "Hi"}, Chunk{Text: " there"}, Chunk{Text: "!", FinishReason: "stop"})
		var got []Chunk
		res, err := Relay(ctx, limits, []Target{up}, func(c Chunk) error {
			got = append(got, c)
			cancel() // the caller leaves on its first chunk
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		assert.Len(t, got, 1, "nothing after the caller left")
		assert.Equal(t, "Hi", res.Text)
		assert.Empty(t, res.FinishReason)
	})
}

// 'The first-token limit runs from Open to a stream's first chunk': a chunk
// that comes after it ran out, from a stream that ignored its context, is
// not passed on — the stream was replaced at the limit.
func TestAChunkThatComesAfterTheFirstTokenLimitIsNotPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		late := deaf("late", limits.FirstToken+time.Second, Chunk{Text: "late", FinishReason: "stop"})
		next := plays("next", say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, []Target{late, next.target()}, cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "Hi", cl.text(), "the late stream's chunk never reached the caller")
		assert.Equal(t, []string{"next"}, res.Served)
	})
}

// 'A chunk that says nothing yet ... is held back, with any others like it,
// until one that does, and they go with it, in order': a role chunk and an
// empty one after it both reach the caller, before the first text.
func TestEveryChunkThatSaysNothingYetGoesWithTheFirstThatDoes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		role := step{chunk: Chunk{Raw: []byte("raw:role")}}
		empty := step{chunk: Chunk{Raw: []byte("raw:empty")}}
		up := plays("up", role, empty, say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		_, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		require.Len(t, cl.chunks, 4)
		assert.Equal(t, "raw:role", string(cl.chunks[0].Raw), "the role first: nothing of it is lost")
		assert.Equal(t, "raw:empty", string(cl.chunks[1].Raw))
		assert.Equal(t, "Hi", cl.chunks[2].Text)
	})
}
