package linear

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// Phase is a stretch of a run: its name, how long it lasts, and the fault
// (if any) Start makes at its beginning — a Redis stalled, restarted.
type Phase struct {
	Name   string
	Length time.Duration
	Start  func()
}

// Drive runs call from clients goroutines, each picking one of keys at
// random and pausing up to 4 ms between calls (a paced load, so that a
// history stays small enough to decide), through each phase in turn. At
// the end of each phase its fault is over — a stalled Redis has run what
// it was sent, a restarted one has lost it — and rec is told so
// (Recorder.Settle). Drive returns when the last phase is over and every
// call has returned. The load stops early when tb's context ends.
func Drive(tb testing.TB, rec *Recorder, keys []string, clients int, phases []Phase, call func(ctx context.Context, client int, key string)) {
	tb.Helper()
	ctx, cancel := context.WithCancel(tb.Context())
	defer cancel()
	var wg sync.WaitGroup
	for c := range clients {
		rng := rand.New(rand.NewPCG(uint64(c), 7))
		wg.Go(func() {
			for ctx.Err() == nil {
				call(ctx, c, keys[rng.IntN(len(keys))])
				time.Sleep(time.Duration(rng.IntN(4000)) * time.Microsecond) // pacing the load, not waiting for an outcome
			}
		})
	}
	for _, p := range phases {
		if p.Start != nil {
			p.Start()
		}
		tb.Logf("linear: phase %s, %s", p.Name, p.Length)
		select {
		case <-time.After(p.Length): // the phase's length: the load runs meanwhile
		case <-ctx.Done():
		}
		rec.Settle()
	}
	cancel()
	wg.Wait()
}

// Outcome says what an error leaves known of a call: a connection that
// was never made ran nothing (NotRun); any other error — a timeout, a
// connection lost mid-call — may have run it (nil: unknown).
func Outcome(err error) any {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return NotRun
	}
	return nil
}

// Work pauses a client for up to max, at random: a request's own work
// between two of its calls (a slot held while an answer is generated).
func Work(max time.Duration) {
	time.Sleep(time.Duration(rand.Int64N(int64(max)))) // the client's work, not waiting for an outcome
}
