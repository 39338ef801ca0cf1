package admission

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"time"
)

// TokenBucket is an in-process Limiter with one bucket per key. Buckets are
// created full on first use and refilled lazily when asked: there is no
// timer and no goroutine, so an idle tenant costs one map entry.
//
// Buckets are never evicted; with an unbounded key space, put a bound in
// front of it (keys are tenant IDs from authenticated identities).
type TokenBucket struct {
	rate   float64 // tokens per second
	burst  float64
	seed   maphash.Seed
	shards [shardCount]shard
}

// shardCount spreads keys over several locks so that tenants on different
// cores do not queue behind one mutex. Every key lives in exactly one shard,
// so each bucket still has exactly one lock.
const shardCount = 32

type shard struct {
	mu      sync.Mutex
	buckets map[string]*bucket
	_       [40]byte // keep neighbouring shards' locks off one cache line
}

type bucket struct {
	tokens float64
	last   time.Time // when tokens was last brought up to date
}

// epsilon absorbs float rounding in the refill sum; it is far below the
// refill of one nanosecond at any sane rate, so it never admits early.
const epsilon = 1e-12

// NewTokenBucket returns a Limiter that refills each key at ratePerSecond
// tokens per second, holding at most burst.
func NewTokenBucket(ratePerSecond float64, burst int) (*TokenBucket, error) {
	if !(ratePerSecond > 0) || math.IsInf(ratePerSecond, 0) {
		return nil, fmt.Errorf("%w: rate %v per second must be a positive finite number", ErrInvalidConfig, ratePerSecond)
	}
	if burst < 1 {
		return nil, fmt.Errorf("%w: burst %d must be at least 1", ErrInvalidConfig, burst)
	}
	tb := &TokenBucket{rate: ratePerSecond, burst: float64(burst), seed: maphash.MakeSeed()}
	for i := range tb.shards {
		tb.shards[i].buckets = map[string]*bucket{}
	}
	return tb, nil
}

// Allow takes one token from key's bucket if there is one. It never blocks
// and never fails; ctx is accepted to satisfy Limiter.
func (tb *TokenBucket) Allow(_ context.Context, key string) (Decision, error) {
	sh := &tb.shards[maphash.String(tb.seed, key)%shardCount]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	// The clock is read under the lock: read outside it, a goroutine that
	// was descheduled between reading and locking would refill with a stale
	// time after a newer one already had.
	now := time.Now()
	b, ok := sh.buckets[key]
	if !ok {
		b = &bucket{tokens: tb.burst, last: now}
		sh.buckets[key] = b
	}
	if now.After(b.last) { // never let the refill time move backwards
		b.tokens = min(tb.burst, b.tokens+now.Sub(b.last).Seconds()*tb.rate)
		b.last = now
	}
	if b.tokens+epsilon >= 1 {
		b.tokens = max(0, b.tokens-1)
		return Decision{Allowed: true, Remaining: int(b.tokens + epsilon)}, nil
	}
	missing := (1 - b.tokens) / tb.rate // seconds until one whole token
	return Decision{RetryAfter: time.Duration(math.Ceil(missing * float64(time.Second)))}, nil
}
