package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// soakRun is what one run of the soak measured.
type soakRun struct {
	start    time.Time // the soak clock's zero: the load's start
	stopped  float64   // seconds: the load's last answer came back
	end      float64   // seconds: the levels after were read
	samples  []soakSample
	before   map[string]replicaSample // idle levels after the warm-up, by replica
	after    map[string]replicaSample // idle levels after the settle
	replicas []*soakReplica           // every replica that ran, the replaced one and its replacement too
	keys     []timed                  // Redis DBSIZE every second

	// The upstreams' own count during the soak (the warm-up's taken out).
	reported, answers, probes int64
	answersBy                 map[string]int64

	mu     sync.Mutex
	events []soakEvent // the faults as they happened
}

// soakEvent is a fault's step, when it happened.
type soakEvent struct {
	at   float64
	what string
}

func (run *soakRun) event(format string, a ...any) {
	run.mu.Lock()
	defer run.mu.Unlock()
	run.events = append(run.events, soakEvent{time.Since(run.start).Seconds(), fmt.Sprintf(format, a...)})
}

// upstreamCount is what the upstreams have counted so far.
type upstreamCount struct{ tokens, answers, probes, alpha, beta int64 }

func (rig *soakRig) upstreamCount() upstreamCount {
	return upstreamCount{tokens: rig.alpha.tokens.Load() + rig.beta.tokens.Load(), answers: rig.alpha.answers.Load() + rig.beta.answers.Load(),
		probes: rig.alpha.probes.Load() + rig.beta.probes.Load(), alpha: rig.alpha.answers.Load(), beta: rig.beta.answers.Load()}
}

// run warms the replicas up, reads their levels, runs the load through
// the faults, lets them settle and reads their levels again.
func (rig *soakRig) run(ctx context.Context) (*soakRun, error) {
	rig.r.progress("warm-up: 10 s of the steady load")
	rig.load(ctx, time.Now(), 10*time.Second, false)
	before, err := rig.levels(ctx)
	if err != nil {
		return nil, err
	}
	base := rig.upstreamCount()
	run := &soakRun{start: time.Now(), before: before}
	if err := rig.alpha.reset(rig.plan.alphaSpec(rig.r.seed, true)); err != nil { // its windows start now
		return nil, err
	}
	if err := rig.beta.reset(betaSpec(rig.r.seed)); err != nil {
		return nil, err
	}
	rig.r.progress("the load: %s; faults at the planned times (see the report)", rig.plan.dur)
	faults := make(chan error, 1)
	go func() { faults <- rig.faults(ctx, run) }()
	run.samples = rig.load(ctx, run.start, rig.plan.dur, true)
	run.stopped = time.Since(run.start).Seconds()
	if err := errors.Join(<-faults, ctx.Err()); err != nil {
		return nil, err
	}
	rig.r.progress("the load stopped at %.0f s; settling for %s", run.stopped, rig.plan.settle)
	if err := at(ctx, time.Now(), rig.plan.settle); err != nil {
		return nil, err
	}
	if run.after, err = rig.levels(ctx); err != nil {
		return nil, err
	}
	run.end = time.Since(run.start).Seconds()
	now := rig.upstreamCount()
	run.reported, run.answers, run.probes = now.tokens-base.tokens, now.answers-base.answers, now.probes-base.probes
	run.answersBy = map[string]int64{"alpha": now.alpha - base.alpha, "beta": now.beta - base.beta}
	run.keys = rig.keys.samples()
	rig.mu.Lock()
	run.replicas = slices.Clone(rig.replicas)
	rig.mu.Unlock()
	return run, nil
}

// load runs every tenant's steady load for dur from start, and the burst
// if burst is set; it returns every outcome, in the order sent.
func (rig *soakRig) load(ctx context.Context, start time.Time, dur time.Duration, burst bool) []soakSample {
	var (
		mu  sync.Mutex
		out []soakSample
		wg  sync.WaitGroup
	)
	attack := func(from, d time.Duration, t soakTenant, rate int) {
		wg.Go(func() {
			s := soakAttack(ctx, start, from, d, t.name, rate, soakTargets(rig.front.URL, t.token))
			mu.Lock()
			out = append(out, s...)
			mu.Unlock()
		})
	}
	for _, t := range rig.tenants {
		attack(0, dur, t, t.rate)
		if burst && t.name == soakBurstTenant {
			b := rig.plan.burst
			attack(seconds(b.From), seconds(b.To-b.From), t, soakBurstRate)
		}
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b soakSample) int { return cmpFloat(a.at, b.at) })
	return out
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// faults runs the schedule's process faults: the Redis stall, the Redis
// restart, the replica's SIGTERM. The brown-out and the outage are the
// upstream's windows; the burst is the load's.
func (rig *soakRig) faults(ctx context.Context, run *soakRun) error {
	steps := []struct {
		at float64
		do func() error
	}{
		{rig.plan.stall, func() error {
			run.event("Redis stopped (SIGSTOP)")
			err := rig.redis.stall(ctx, soakStall)
			run.event("Redis continued (SIGCONT)")
			return err
		}},
		{rig.plan.restart, func() error {
			run.event("Redis killed")
			err := rig.redis.restart(ctx, soakRedisDown)
			run.event("Redis started again on its port, empty")
			return err
		}},
		{rig.plan.term, func() error { return rig.replace(ctx, run) }},
	}
	for _, s := range steps {
		if err := at(ctx, run.start, seconds(s.at)); err != nil {
			return err
		}
		if err := s.do(); err != nil {
			return err
		}
	}
	return nil
}

// replace SIGTERMs replica r1 once a stream is in flight through it,
// waits for its drain to end and starts r1′ in its place.
func (rig *soakRig) replace(ctx context.Context, run *soakRun) error {
	old := rig.replicas[0]
	inFlight := func() bool { return old.streams.Load() > 0 }
	if err := poll(ctx, 5*time.Second, 2*time.Millisecond, old.p.done, inFlight); err != nil {
		return fmt.Errorf("waiting for a stream through %s to SIGTERM it mid-stream: %w", old.name, err)
	}
	old.fast.Store(true) // its last scrape is its final count
	n := old.streams.Load()
	old.p.terminate()
	run.event("%s SIGTERMed with %d stream(s) in flight through it", old.name, n)
	select {
	case <-old.p.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(40 * time.Second):
		return fmt.Errorf("%s did not exit within 40 s of its SIGTERM", old.name)
	}
	run.event("%s exited (status %d)", old.name, old.p.cmd.ProcessState.ExitCode())
	if _, err := rig.startReplica(old.name + "′"); err != nil {
		return err
	}
	run.event("%s′ started and ready; the balancer routes to it from its next check", old.name)
	return nil
}
