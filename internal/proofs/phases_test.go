package proofs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/linear"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
)

// clients is how many goroutines call at once: the 16, over a
// few keys, so that every key sees calls overlap.
const clients = 16

// phase is a stretch of a run: how long it lasts and what is done to
// Redis at its start.
type phase struct {
	name string
	d    time.Duration
	do   func(t *testing.T, srv *redistest.Server, rec *linear.Recorder, keys []string)
}

// quiet, stall and restart are the three phases every check runs.
func quiet(d time.Duration) phase { return phase{name: "quiet", d: d} }

// stall pauses Redis for about a second: calls made meanwhile give up
// (their outcome unknown) and run when Redis wakes, after their callers
// have left.
func stall(d time.Duration) phase {
	return phase{name: "stall", d: d, do: func(t *testing.T, srv *redistest.Server, _ *linear.Recorder, _ []string) {
		srv.Stall(900 * time.Millisecond)
	}}
}

// restart kills Redis and starts it again with nothing: the model is told
// every key was forgotten at some instant between the kill and the start.
func restart(d time.Duration) phase {
	return phase{name: "restart", d: d, do: func(t *testing.T, srv *redistest.Server, rec *linear.Recorder, keys []string) {
		start := time.Now()
		srv.Stop()
		srv.Start()
		rec.Span(clients, keys, linear.Restart{}, start, time.Now())
	}}
}

// drive runs call from clients goroutines, each picking a key at random
// and pausing up to 4 ms between calls (a paced load, so that a history
// stays small enough to decide), through each phase in turn. At the end of
// each phase the fault it made is over — a stalled Redis has run what it
// was sent, a restarted one has lost it — and the recorder is told so
// (Recorder.Settle). It returns when the last phase is over and every call
// has returned.
func drive(t *testing.T, srv *redistest.Server, rec *linear.Recorder, keys []string, phases []phase,
	call func(ctx context.Context, client int, key string)) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
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
		if p.do != nil {
			p.do(t, srv, rec, keys)
		}
		t.Logf("phase %s: %s", p.name, p.d)
		time.Sleep(p.d) // the phase's length: the load runs meanwhile
		rec.Settle()
	}
	cancel()
	wg.Wait()
}

func keysOf(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%stenant-%d", prefix, i)
	}
	return keys
}

// outcome says what an error leaves known of a call: a connection that
// was never made ran nothing (linear.NotRun); any other error — a timeout,
// a connection lost mid-call — may have run it.
func outcome(err error) any {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return linear.NotRun
	}
	return nil
}
