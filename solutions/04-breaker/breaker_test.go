package breaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every timing test runs in a synctest bubble: time.Sleep moves a fake clock,
// so "exactly RecoveryTimeout later" is exact. A breaker that starts a timer
// goroutine leaves it asleep when the bubble ends, which fails the test.

var errUpstream = errors.New("upstream 503")

func newBreaker(t *testing.T, cfg Config) *Breaker {
	t.Helper()
	b, err := New(cfg)
	require.NoError(t, err)
	require.NotNil(t, b, "New returned nil")
	return b
}

// allow asks for one call and fails the test if it is refused.
func allow(t *testing.T, b *Breaker, why string) func(error) {
	t.Helper()
	done, err := b.Allow()
	require.NoError(t, err, why)
	require.NotNil(t, done, "Allow admitted the call but returned a nil done")
	return done
}

func refused(t *testing.T, b *Breaker, why string) {
	t.Helper()
	done, err := b.Allow()
	require.ErrorIs(t, err, ErrOpen, why)
	require.Nil(t, done, "a refused call gets no done func")
}

// fail reports n failed calls.
func fail(t *testing.T, b *Breaker, n int) {
	t.Helper()
	for i := range n {
		allow(t, b, fmt.Sprintf("call %d of %d should be admitted while closed", i+1, n))(errUpstream)
	}
}

func TestStartsClosedAndAdmits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 3, RecoveryTimeout: time.Second})
		assert.Equal(t, Closed, b.State())
		allow(t, b, "a new breaker is closed")(nil)
		assert.Equal(t, Closed, b.State())
	})
}

func TestConsecutiveFailuresOpenIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 3, RecoveryTimeout: time.Minute})
		fail(t, b, 2)
		assert.Equal(t, Closed, b.State(), "2 failures with threshold 3: still closed")
		fail(t, b, 1)
		assert.Equal(t, Open, b.State(), "the 3rd consecutive failure opens it")
		refused(t, b, "an open breaker fails fast with ErrOpen")
	})
}

func TestSuccessResetsTheFailureCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 3, RecoveryTimeout: time.Minute})
		fail(t, b, 2)
		allow(t, b, "still closed")(nil)
		fail(t, b, 2)
		assert.Equal(t, Closed, b.State(), "failures must be consecutive: a success in between resets the count")
		fail(t, b, 1)
		assert.Equal(t, Open, b.State())
	})
}

func TestOpenReadsHalfOpenAfterRecoveryTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: 10 * time.Second})
		fail(t, b, 1)
		time.Sleep(10*time.Second - time.Nanosecond)
		assert.Equal(t, Open, b.State(), "one nanosecond before RecoveryTimeout it is still open")
		refused(t, b, "still open")
		time.Sleep(time.Nanosecond)
		assert.Equal(t, HalfOpen, b.State(), "once RecoveryTimeout has passed (>=), the state reads half-open without anyone calling Allow")
	})
}

func TestHalfOpenLetsExactlyOneProbeThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: time.Second})
		fail(t, b, 1)
		time.Sleep(time.Second)

		var admitted, rejected atomic.Int32
		var probe func(error)
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				done, err := b.Allow()
				switch {
				case err == nil && done != nil:
					admitted.Add(1)
					mu.Lock()
					probe = done
					mu.Unlock()
				case errors.Is(err, ErrOpen):
					rejected.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(1), admitted.Load(), "half-open admits exactly one probe; the rest would be a thundering herd on a dependency that may still be down")
		assert.Equal(t, int32(99), rejected.Load())
		if probe != nil {
			probe(nil)
		}
	})
}

func TestProbeSuccessClosesAndResets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 2, RecoveryTimeout: time.Second})
		fail(t, b, 2)
		time.Sleep(time.Second)
		allow(t, b, "the probe")(nil)
		assert.Equal(t, Closed, b.State(), "a successful probe closes the breaker")
		fail(t, b, 1)
		assert.Equal(t, Closed, b.State(), "closing starts the failure count from zero")
		allow(t, b, "closed again: calls flow")(nil)
	})
}

func TestProbeFailureReopensWithAFreshWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: 10 * time.Second, ProbeTimeout: time.Minute})
		fail(t, b, 1)
		time.Sleep(10 * time.Second)
		probe := allow(t, b, "the probe")
		time.Sleep(3 * time.Second) // the probe takes 3 s to fail
		probe(errUpstream)
		assert.Equal(t, Open, b.State(), "a failed probe re-opens the breaker")
		refused(t, b, "re-opened")
		time.Sleep(10*time.Second - time.Nanosecond)
		assert.Equal(t, Open, b.State(), "the new window runs a full RecoveryTimeout from the probe's failure, not from the first opening")
		time.Sleep(time.Nanosecond)
		assert.Equal(t, HalfOpen, b.State())
	})
}

func TestCancellationIsNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 2, RecoveryTimeout: time.Minute})
		for range 5 {
			allow(t, b, "closed")(fmt.Errorf("client went away: %w", context.Canceled))
		}
		assert.Equal(t, Closed, b.State(), "callers who cancelled say nothing about the dependency's health")
		allow(t, b, "closed")(context.DeadlineExceeded)
		allow(t, b, "closed")(context.DeadlineExceeded)
		assert.Equal(t, Open, b.State(), "timeouts are the dependency's failures and do count")
	})
}

func TestIsFailureDecidesWhatCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errBadRequest := errors.New("400 bad request")
		b := newBreaker(t, Config{FailureThreshold: 2, RecoveryTimeout: time.Minute,
			IsFailure: func(err error) bool { return err != nil && !errors.Is(err, errBadRequest) }})
		for range 5 {
			allow(t, b, "closed")(errBadRequest)
		}
		assert.Equal(t, Closed, b.State(), "a caller's bad request is not the dependency failing")
		fail(t, b, 2)
		assert.Equal(t, Open, b.State())
	})
}

func TestStaleDoneFromAnOlderGenerationIsIgnored(t *testing.T) {
	t.Run("a call admitted before the breaker opened", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: time.Second})
			slow := allow(t, b, "closed") // a slow call, still running
			fail(t, b, 1)                 // another call fails: open
			time.Sleep(time.Second)
			allow(t, b, "the probe")(nil) // the probe succeeds: closed again
			require.Equal(t, Closed, b.State())
			slow(errUpstream) // the slow call finally fails
			assert.Equal(t, Closed, b.State(), "a result from before the breaker opened belongs to an older generation and must not re-open it")
		})
	})
	t.Run("a probe that was given up", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: 10 * time.Second, ProbeTimeout: 2 * time.Second})
			fail(t, b, 1)
			time.Sleep(10 * time.Second)
			lost := allow(t, b, "probe 1")
			time.Sleep(2 * time.Second)
			second := allow(t, b, "probe 1 is given up after ProbeTimeout; this caller is the new probe")
			second(errUpstream)
			require.Equal(t, Open, b.State(), "probe 2 failed: open")
			lost(nil) // probe 1 finally reports success, far too late
			assert.Equal(t, Open, b.State(), "a stale probe's success must not close a breaker its successor re-opened")
			refused(t, b, "still open")
		})
	})
}

func TestLostProbeIsGivenUpAfterProbeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: 10 * time.Second, ProbeTimeout: 5 * time.Second})
		fail(t, b, 1)
		time.Sleep(10 * time.Second)
		_ = allow(t, b, "the probe, which will never report back")
		time.Sleep(5*time.Second - time.Nanosecond)
		refused(t, b, "while the probe may still report, nobody else gets through")
		time.Sleep(time.Nanosecond)
		probe := allow(t, b, "a probe silent for ProbeTimeout is given up, so the breaker cannot stay half-open forever")
		probe(nil)
		assert.Equal(t, Closed, b.State())
	})
}

func TestProbeTimeoutDefaultsToRecoveryTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: 4 * time.Second})
		fail(t, b, 1)
		time.Sleep(4 * time.Second)
		_ = allow(t, b, "the probe, lost")
		time.Sleep(4*time.Second - time.Nanosecond)
		refused(t, b, "ProbeTimeout 0 means RecoveryTimeout: not yet")
		time.Sleep(time.Nanosecond)
		allow(t, b, "now the lost probe is given up")(nil)
	})
}

func TestCancelledProbeFreesTheProbeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: time.Second, ProbeTimeout: time.Hour})
		fail(t, b, 1)
		time.Sleep(time.Second)
		allow(t, b, "probe 1")(context.Canceled)
		assert.Equal(t, HalfOpen, b.State(), "a probe whose caller left proves nothing: neither closed nor re-opened")
		allow(t, b, "the next caller may probe at once instead of waiting an hour for the probe timeout")(nil)
		assert.Equal(t, Closed, b.State())
	})
}

func TestStateChangeCallbackSeesEveryTransition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		b := newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: time.Second, OnStateChange: func(from, to State) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, from.String()+"→"+to.String())
		}})
		fail(t, b, 1)
		time.Sleep(time.Second)
		allow(t, b, "probe")(errUpstream)
		time.Sleep(time.Second)
		allow(t, b, "probe")(nil)
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []string{
			"closed→open", "open→half-open", "half-open→open", "open→half-open", "half-open→closed",
		}, got)
	})
}

// This test runs in real time on purpose: a deadlock on a sync.Mutex is not
// "durably blocked" for synctest, so fake time would never advance to end it.
func TestStateChangeCallbackMayCallTheBreaker(t *testing.T) {
	var b *Breaker
	seen := make(chan State, 4)
	b = newBreaker(t, Config{FailureThreshold: 1, RecoveryTimeout: time.Hour, OnStateChange: func(_, to State) {
		seen <- b.State() // a callback that reads the breaker, as a metrics hook does
		_, _ = b.Allow()
	}})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		if done, err := b.Allow(); err == nil && done != nil {
			done(errUpstream)
		}
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second): // a watchdog for a hang, not a timing assertion
		t.Fatal("done() never returned: OnStateChange was called with the breaker's lock held, and calling the breaker from it deadlocked")
	}
	select {
	case s := <-seen:
		assert.Equal(t, Open, s)
	default:
		t.Fatal("OnStateChange was not called for closed→open")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"no threshold", Config{FailureThreshold: 0, RecoveryTimeout: time.Second}},
		{"no recovery timeout", Config{FailureThreshold: 1}},
		{"negative recovery timeout", Config{FailureThreshold: 1, RecoveryTimeout: -time.Second}},
		{"negative probe timeout", Config{FailureThreshold: 1, RecoveryTimeout: time.Second, ProbeTimeout: -time.Second}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, err := New(c.cfg)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Nil(t, b)
		})
	}
}

func TestStateString(t *testing.T) {
	assert.Equal(t, "closed", Closed.String())
	assert.Equal(t, "open", Open.String())
	assert.Equal(t, "half-open", HalfOpen.String())
}
