package main

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/gateway/guard"
)

// The soak (make scenario NAME=soak [DURATION=10m]): three secure_app
// replicas sharing one Redis behind a round-robin balancer that follows
// /readyz, in front of two simulated upstreams, under an open-loop load of
// three tenants for DURATION, through a fixed schedule of faults. It
// fails if any request is lost, if the surviving replicas' goroutines or
// heap do not come back, if Redis' keys keep growing after the load, or if
// the tokens secure_app counted drift from what the upstreams reported.

// soakPlan is the fault schedule, in seconds on the soak's clock (0: the
// load starts). Every fault scales with the duration but the stall.
type soakPlan struct {
	dur     time.Duration
	slow    band    // alpha's brown-out: some of its calls take longer
	outage  band    // alpha answers 503; beta carries
	stall   float64 // Redis SIGSTOPped for soakStall
	restart float64 // Redis killed, and started again on its port soakRedisDown later, empty
	term    float64 // replica r1 SIGTERMed with streams in flight; started again once it exits
	burst   band    // soakBurstTenant sends soakBurstRate more a second
	phases  []band  // the report's rows: each fault and its recovery
	settle  time.Duration
}

// soakStall is how long Redis is stopped, and soakRedisDown how long it is
// gone when it restarts, whatever the duration.
const (
	soakStall     = 2 * time.Second
	soakRedisDown = time.Second
)

// planSoak lays the schedule over d.
func planSoak(d time.Duration) soakPlan {
	s := d.Seconds()
	at := func(share float64) float64 { return math.Round(share * s) }
	return soakPlan{dur: d,
		slow:    band{From: at(.10), To: at(.25), Label: "alpha brown-out"},
		outage:  band{From: at(.30), To: at(.42), Label: "alpha down"},
		stall:   at(.52),
		restart: at(.62),
		term:    at(.72),
		burst:   band{From: at(.87), To: at(.95), Label: "burst"},
		phases: []band{{From: 0, To: at(.10), Label: "steady"}, {From: at(.10), To: at(.30), Label: "brown-out"},
			{From: at(.30), To: at(.50), Label: "outage"}, {From: at(.50), To: at(.60), Label: "redis-stall"},
			{From: at(.60), To: at(.70), Label: "redis-restart"}, {From: at(.70), To: at(.85), Label: "replica-restart"},
			{From: at(.85), To: s, Label: "burst"}},
		// At least a call read on after its caller left may live
		// (secure_app bills it; guard.DefaultReadOnTime), with its lease
		// kept alive: goroutines counted before that are not leaks.
		settle: min(max(d/20, guard.DefaultReadOnTime+5*time.Second), time.Minute),
	}
}

// phaseOf is the index of the phase a request sent at t belongs to; one
// sent at the very end counts in the last.
func (p soakPlan) phaseOf(t float64) int {
	for i, ph := range p.phases {
		if t < ph.To {
			return i
		}
	}
	return len(p.phases) - 1
}

// soakDuration reads DURATION: 10m by default, at least 1m so every fault
// fits, at most 2h.
func soakDuration(v string) (time.Duration, error) {
	if v == "" {
		return 10 * time.Minute, nil
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return 0, fmt.Errorf("DURATION=%q: %w", v, err)
	case d < time.Minute || d > 2*time.Hour:
		return 0, fmt.Errorf("DURATION=%s: want 1m to 2h (every fault needs room)", d)
	}
	return d, nil
}

// upstream specs: alpha with the brown-out and outage windows of the plan
// (none for the warm-up), beta plain.
func (p soakPlan) alphaSpec(seed uint64, faults bool) string {
	s := "name=alpha,model=alpha-1,latency=60ms,jitter=20ms,chunk-delay=15ms,seed=" + strconv.FormatUint(seed, 10)
	if faults {
		s += fmt.Sprintf(",slow=%gs-%gs:600ms@0.3,outage=%gs-%gs", p.slow.From, p.slow.To, p.outage.From, p.outage.To)
	}
	return s
}

func betaSpec(seed uint64) string {
	return "name=beta,model=beta-1,latency=90ms,jitter=20ms,chunk-delay=15ms,seed=" + strconv.FormatUint(seed+1, 10)
}

func soak(ctx context.Context, r *report) error {
	d, err := soakDuration(os.Getenv("DURATION"))
	if err != nil {
		return err
	}
	plan := planSoak(d)
	rig, err := newSoakRig(ctx, r, plan)
	if err != nil {
		return err
	}
	defer rig.stop()
	run, err := rig.run(ctx)
	if err != nil {
		return err
	}
	sum := summariseSoak(plan, run)
	sum.Seed, sum.Duration = r.seed, d.String()
	if err := writeSoak(r, plan, run, sum); err != nil {
		return err
	}
	if len(sum.Failures) == 0 {
		return nil
	}
	if err := r.write(); err != nil { // main writes the report only after a success
		return err
	}
	return fmt.Errorf("soak FAILED: %s (report: %s)", strings.Join(sum.Failures, "; "), filepath.Join(r.dir, "README.md"))
}

// soakRig is everything the soak runs, and what stops it.
type soakRig struct {
	r        *report
	plan     soakPlan
	bin      string
	env      []string
	args     []string
	tmp      string
	redis    *soakRedis
	alpha    *soakUpstream
	beta     *soakUpstream
	bal      *balancer
	front    *httptest.Server
	keys     keySampler
	tenants  []soakTenant
	mu       sync.Mutex
	replicas []*soakReplica
	sctx     context.Context    // the replicas', the samplers' and the balancer's checks
	cancel   context.CancelFunc // ends sctx
	wg       sync.WaitGroup
}

// newSoakRig starts Redis, the upstreams, three replicas and the balancer.
func newSoakRig(ctx context.Context, r *report, plan soakPlan) (rig *soakRig, err error) {
	rig = &soakRig{r: r, plan: plan, env: []string{"JWT_SECRET=" + jwtSecret}, bal: &balancer{}}
	defer func() {
		if err != nil {
			rig.stop()
			rig = nil
		}
	}()
	if rig.bin, err = binaries(ctx, r); err != nil {
		return rig, err
	}
	rig.bin = filepath.Join(rig.bin, "secure_app")
	if rig.tmp, err = os.MkdirTemp("", "soak"); err != nil {
		return rig, err
	}
	if err := rig.startBackends(ctx); err != nil {
		return rig, err
	}
	if err := rig.mintTokens(ctx); err != nil {
		return rig, err
	}
	rig.sctx, rig.cancel = context.WithCancel(ctx)
	for _, name := range []string{"r1", "r2", "r3"} {
		if _, err := rig.startReplica(name); err != nil {
			return rig, err
		}
	}
	rig.wg.Go(func() { rig.bal.check(rig.sctx) })
	rig.wg.Go(func() { rig.keys.run(rig.sctx, rig.redis.addr) })
	rig.front = httptest.NewServer(rig.bal)
	return rig, poll(ctx, 5*time.Second, 100*time.Millisecond, nil, func() bool { return rig.bal.readyCount() == 3 })
}

// startBackends starts Redis and the two upstreams, and settles the
// replicas' flags.
func (rig *soakRig) startBackends(ctx context.Context) error {
	rs, err := startRedis(ctx, "")
	if err != nil {
		return err
	}
	rig.redis = &soakRedis{rs: rs, addr: rs.addr}
	if rig.alpha, err = startUpstream("alpha", rig.plan.alphaSpec(rig.r.seed, false)); err != nil {
		return err
	}
	if rig.beta, err = startUpstream("beta", betaSpec(rig.r.seed)); err != nil {
		return err
	}
	tiers := filepath.Join(rig.tmp, "tiers.yaml")
	if err := os.WriteFile(tiers, []byte(soakTiers), 0o644); err != nil {
		return err
	}
	rig.args = []string{"-redis-url", rs.url(), "-tiers", tiers, "-seed", strconv.FormatUint(rig.r.seed, 10),
		"-upstream", "name=alpha,url=" + rig.alpha.url + ",model=alpha-1,local=true",
		"-upstream", "name=beta,url=" + rig.beta.url + ",model=beta-1,local=true"}
	return nil
}

func (rig *soakRig) mintTokens(ctx context.Context) error {
	tiers := filepath.Join(rig.tmp, "tiers.yaml")
	rig.tenants = soakTenants()
	for i, t := range rig.tenants {
		token, err := mintToken(ctx, rig.bin, t.name, t.tier, tiers)
		if err != nil {
			return fmt.Errorf("minting a token for %s: %w", t.name, err)
		}
		rig.tenants[i].token = token
	}
	return nil
}

// startReplica starts a secure_app, puts it behind the balancer (which
// routes to it once its /readyz says so) and scrapes it until it exits.
func (rig *soakRig) startReplica(name string) (*soakReplica, error) {
	p, err := startProcess(rig.sctx, rig.bin, rig.env, rig.args...)
	if err != nil {
		return nil, fmt.Errorf("replica %s: %w", name, err)
	}
	rp := &soakReplica{name: name, p: p}
	rig.mu.Lock()
	rig.replicas = append(rig.replicas, rp)
	rig.mu.Unlock()
	if err := rig.bal.add(p.url, p.adminURL+"/readyz"); err != nil {
		return nil, err
	}
	if err := countStreams(rig.bal, p.url, &rp.streams); err != nil {
		return nil, err
	}
	rig.wg.Go(func() { rp.watch(rig.sctx) })
	rig.r.progress("replica %s is up at %s (admin %s)", name, p.url, p.adminURL)
	return rp, nil
}

// stop ends everything the rig started, in any state (also after Ctrl-C).
func (rig *soakRig) stop() {
	if rig.front != nil {
		rig.front.Close()
	}
	if rig.cancel != nil {
		rig.cancel()
	}
	rig.mu.Lock()
	for _, rp := range rig.replicas {
		rp.p.kill()
	}
	rig.mu.Unlock()
	rig.wg.Wait()
	for _, u := range []*soakUpstream{rig.alpha, rig.beta} {
		if u != nil {
			u.close()
		}
	}
	if rig.redis != nil {
		rig.redis.stop()
	}
	if rig.tmp != "" {
		_ = os.RemoveAll(rig.tmp)
	}
}

// live is the replicas that have not exited.
func (rig *soakRig) live() []*soakReplica {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	var out []*soakReplica
	for _, rp := range rig.replicas {
		select {
		case <-rp.p.done:
		default:
			out = append(out, rp)
		}
	}
	return out
}

// levels is every live replica's idle goroutines and heap.
func (rig *soakRig) levels(ctx context.Context) (map[string]replicaSample, error) {
	if err := closeIdle(ctx); err != nil {
		return nil, err
	}
	_, p, err := net.SplitHostPort(rig.redis.addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, err
	}
	out := map[string]replicaSample{}
	for _, rp := range rig.live() {
		s, err := idleLevel(ctx, rp, port)
		if err != nil {
			return nil, err
		}
		out[rp.name] = s
	}
	return out, nil
}
