package streaming

// Tests for bugs an outsider aimed, after reading the tests and the
// conformance vectors, at inputs neither produces: a usage report of zero
// tokens, an Open that times out on its own, a target with no name, a
// caller who leaves while a failed stream closes, limits under a
// millisecond, a fifth target, ten held chunks, a repeat in another case,
// a usage that comes late within the idle limit. Each passes on the
// reference and fails with the mutant named in its comment.

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

// 'Usage-only chunks are not passed to emit: Result.Usage has each
// stream's last report'; 'with it [the usage], the relay is done'. A report
// of zero tokens (a cached or empty prompt) is a report like any other.
func TestAZeroUsageReportIsAUsageReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("up", usage(0, 0, 0), say(0, "Hi"), finish(0, "stop"), usage(0, 0, 0)) // then silence
		cl := newCaller()
		start := time.Now()
		res, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, Usage{}, res.Usage)
		require.Len(t, cl.chunks, 2, "the text and the finish: a usage-only chunk is never passed on")
		for _, ch := range cl.chunks {
			assert.Nil(t, ch.Usage, "an upstream's usage reached the caller")
		}
		assert.Zero(t, time.Since(start), "finish and usage in: done at once, not after an idle wait")
	})
}

// 'Until a chunk has reached emit, a target that fails to open ... is
// replaced by the next one'; only emit's error or the caller's context
// ending means the caller has gone. An Open that fails with its own timeout
// (an HTTP client's dial or header timeout wraps context.DeadlineExceeded)
// while the caller is still there is a target that failed to open.
func TestAnOpenThatTimesOutOnItsOwnIsReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		errDial := fmt.Errorf("dial tcp 10.0.0.2:443: %w", context.DeadlineExceeded)
		down := &upstream{name: "down", openErr: errDial}
		next := plays("next", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(down, next), cl.emit)
		require.NoError(t, err, "the caller never left: the next target answers")
		assert.Equal(t, "ok", cl.text())
		assert.Equal(t, []string{"next"}, res.Served)
	})
}

// Result.Served: 'the targets whose chunks reached the caller, in
// order' — a target with an empty name served once and is listed once.
func TestAnUnnamedTargetIsListedOnceInServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		up := plays("", say(0, "Hi"), say(0, " there"), finish(0, "stop"), fail(0, io.EOF))
		res, err := Relay(ctx, limits, targets(up), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, []string{""}, res.Served, "one target served, once")
	})
}

// 'the caller's context ending means the same [the caller has gone]:
// the relay stops at once and returns it'; README: 'the next upstream is not
// tried for a caller who has gone'. A caller who leaves while a failed
// stream is being closed is gone when the relay would open the next.
func TestACallerWhoLeavesWhileAFailedStreamClosesIsNotPassedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		time.AfterFunc(50*time.Millisecond, cancel) // while first's Close runs (10 ms to 110 ms)
		first := plays("first", fail(10*time.Millisecond, errReset))
		tg := first.target()
		open := tg.Open
		tg.Open = func(ctx context.Context, p string) (Stream, error) {
			s, err := open(ctx, p)
			if err != nil {
				return nil, err
			}
			return slowClose{s}, nil
		}
		second := plays("second", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		_, err := Relay(ctx, limits, []Target{tg, second.target()}, cl.emit)
		require.ErrorIs(t, err, context.Canceled, "the caller's own reason")
		assert.Empty(t, second.opened(), "nobody else is asked for a caller who left")
		assert.Empty(t, cl.chunks)
	})
}

// ErrInvalidConfig: 'a limit that is not positive'. Limits under a
// millisecond are positive: the config works, and the limits hold.
func TestASubMillisecondLimitIsAValidLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cfg := Config{FirstToken: 500 * time.Microsecond, Idle: 500 * time.Microsecond}
		up := plays("up", say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF))
		res, err := Relay(ctx, cfg, targets(up), newCaller().emit)
		require.NoError(t, err, "positive limits are a config that works")
		assert.Equal(t, "Hi", res.Text)

		start := time.Now()
		_, err = Relay(ctx, cfg, targets(plays("stalls", say(0, "Hel"))), newCaller().emit)
		require.ErrorIs(t, err, ErrBroken)
		assert.ErrorIs(t, err, ErrIdle)
		assert.Equal(t, cfg.Idle, time.Since(start))
	})
}

// 'Until a chunk has reached emit, a target that fails ... is replaced
// by the next one' — whatever the number of targets.
func TestAFifthTargetIsAskedToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var us []*upstream
		for _, n := range []string{"a", "b", "c", "d"} {
			us = append(us, plays(n, fail(0, errReset)))
		}
		e := plays("e", say(0, "ok"), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(append(us, e)...), cl.emit)
		require.NoError(t, err, "the fifth target answered")
		assert.Equal(t, "ok", cl.text())
		assert.Equal(t, []string{"e"}, res.Served)
	})
}

// 'A chunk that says nothing yet ... is held back, with any others like
// it, until one that does, and they go with it, in order' — all of them.
func TestEveryHeldChunkGoesWithTheFirstThatSaysSomething(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		var steps []step
		for i := range 10 {
			steps = append(steps, step{after: 10 * time.Millisecond, chunk: Chunk{Raw: fmt.Appendf(nil, "raw:empty %d", i)}})
		}
		up := plays("up", append(steps, say(0, "Hi"), finish(0, "stop"), fail(0, io.EOF))...)
		cl := newCaller()
		_, err := Relay(ctx, limits, targets(up), cl.emit)
		require.NoError(t, err)
		require.Len(t, cl.chunks, 12, "ten chunks that said nothing, the text, the finish")
		for i := range 10 {
			assert.Equal(t, fmt.Sprintf("raw:empty %d", i), string(cl.chunks[i].Raw))
		}
		assert.Equal(t, "Hi", cl.chunks[10].Text)
	})
}

// 'a continuation that starts by repeating the prefill has the repeat
// dropped'; dropEcho: what is held is 'all of it a start of the prefill',
// and a repeat is dropped 'only once it has covered the whole prefill'. Text
// that is not the prefill byte for byte is the continuation's own: here the
// model wrote "I.E." after an answer that so far read "i.e." — nothing of it
// is a repeat, and nothing of it may be lost.
func TestTextThatDiffersFromThePrefillInCaseIsNotARepeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		first := plays("first", say(0, "i.e."), fail(0, errReset))
		cont := continues("cont", say(0, "I.E."), say(0, " in short."), finish(0, "stop"), fail(0, io.EOF))
		cl := newCaller()
		res, err := Relay(ctx, limits, targets(first, cont), cl.emit)
		require.NoError(t, err)
		assert.Equal(t, "i.e.I.E. in short.", cl.text(), "every byte cont wrote reaches the caller")
		assert.Equal(t, "i.e.I.E. in short.", res.Text)
	})
}

// ErrIdle: 'no chunk within Config.Idle of the last one'; Relay: 'what
// follows it [the finish] is read only for the usage (with it, the relay is
// done)'. With an idle limit of 10 s, a usage that comes 5 s after the
// finish is within it: it is counted.
func TestTheUsageIsAwaitedForTheWholeIdleLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cfg := Config{FirstToken: 10 * time.Second, Idle: 10 * time.Second}
		up := plays("up", say(0, "Hi"), finish(0, "stop"), usage(5*time.Second, 3, 1)) // then silence
		start := time.Now()
		res, err := Relay(ctx, cfg, targets(up), newCaller().emit)
		require.NoError(t, err)
		assert.Equal(t, Usage{PromptTokens: 3, CompletionTokens: 1}, res.Usage, "the usage came 5 s after the finish: within Idle")
		assert.Equal(t, 5*time.Second, time.Since(start), "done when the usage came")
	})
}

var _ = errors.New
