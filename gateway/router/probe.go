package router

import (
	"context"
	"errors"
	"time"

	"github.com/production-go/gateway-lab/gateway/llm"
	breaker "github.com/production-go/gateway-lab/solutions/04-breaker"
	bridge "github.com/production-go/gateway-lab/solutions/06-bridge"
)

// A breaker that opens waits out RecoveryTimeout before it lets one
// request through as a probe. That is too slow for an outage that ends
// sooner — with one request a second, a provider back after 15 s may not
// see traffic again for the whole recovery timeout — and the probe is a
// user's request, spent on a target that is probably still down.
//
// So while a target's breaker is open, the router probes its upstream in
// the background (llm.Prober: openaicompat asks the model for one token by default),
// first after Config.ProbeInterval and then at doubling intervals up to
// Config.ProbeMaxInterval. The first probe that succeeds closes the
// breaker — a fresh one replaces it — and traffic returns at once. A
// provider that cannot be probed keeps the breaker's own half-open probe.

// probe starts the background probe of t, unless one runs already, probes
// are off, t's provider cannot be probed, or the router is closing.
func (r *Router) probe(t Target) {
	if r.cfg.Health.ProbeInterval <= 0 {
		return
	}
	p := r.byName[t.Provider]
	if _, ok := p.(llm.Prober); !ok {
		return
	}
	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	if r.probeStop == nil || r.probing[t] {
		return // closing, or already probing
	}
	r.probing[t] = true
	r.probes.Add(1)
	go func() {
		defer r.probes.Done()
		r.probeUntilUp(t, p)
		r.probeMu.Lock()
		delete(r.probing, t)
		r.probeMu.Unlock()
		// A breaker that opened again while this probe was still on the
		// books found it running and started none: start one now.
		r.mu.RLock()
		b := r.health[t]
		r.mu.RUnlock()
		if b.State() == breaker.Open {
			r.probe(t)
		}
	}()
}

// probeUntilUp probes t until a probe succeeds, its breaker closes (a
// request's own probe got through), its provider says it cannot be
// probed, or the router closes.
func (r *Router) probeUntilUp(t Target, p llm.Provider) {
	wait := r.cfg.Health.ProbeInterval
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-r.probeCtx.Done():
			return
		case <-timer.C:
		}
		r.mu.RLock()
		b := r.health[t]
		r.mu.RUnlock()
		if b.State() == breaker.Closed {
			return
		}
		err := r.probeOnce(t, p)
		if errors.Is(err, llm.ErrNoProbe) || r.probeCtx.Err() != nil {
			return
		}
		r.obs.Probed(t, err)
		if err == nil {
			r.recovered(t, b)
			return
		}
		wait = min(2*wait, r.cfg.Health.ProbeMaxInterval)
		timer.Reset(wait)
	}
}

// recovered replaces t's breaker, old, with a closed one — unless a
// request's probe already replaced or closed it.
func (r *Router) recovered(t Target, old *health) {
	from := old.State()
	if from == breaker.Closed {
		return
	}
	b, err := r.newBreaker(t)
	if err != nil {
		return // cannot happen: the config made every breaker so far
	}
	r.mu.Lock()
	if r.health[t] != old {
		r.mu.Unlock()
		return
	}
	r.health[t] = b
	r.streaks[t].reset()
	r.mu.Unlock()
	r.obs.BreakerChanged(t, from, breaker.Closed)
}

// stopProbes ends every background probe and waits for them.
func (r *Router) stopProbes() {
	r.probeMu.Lock()
	stop := r.probeStop
	r.probeStop = nil
	r.probeMu.Unlock()
	if stop != nil {
		stop()
	}
	r.probes.Wait()
}

// probeOnce runs one probe of t within Retry.AttemptTimeout. A provider
// that does not honour its context is probed through the bridge, as its
// requests are: the probe's wait ends at the timeout or at Close, and the
// call it left behind is the bridge's to wait for (MaxProviderCalls).
func (r *Router) probeOnce(t Target, p llm.Provider) error {
	ctx, cancel := context.WithTimeout(r.probeCtx, r.cfg.Retry.AttemptTimeout)
	defer cancel()
	if llm.HonoursContext(p) {
		return llm.Probe(ctx, p, t.Model)
	}
	_, err := bridge.Call(ctx, r.calls, func(context.Context) (struct{}, error) {
		return struct{}{}, llm.Probe(ctx, p, t.Model)
	})
	return err
}
