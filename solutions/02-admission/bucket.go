package admission

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// TokenBucket is an in-process Limiter with one bucket per key. Buckets are
// created full on first use and refilled lazily when asked: there is no
// timer and no goroutine.
//
// A bucket that has refilled to burst is indistinguishable from a new one,
// so TokenBucket forgets it. Allow sweeps at most once per refill time (the
// time an empty bucket takes to fill, burst/rate) and deletes every bucket
// that is full at that instant. State is bounded by the tenants active
// within about two refill times, not by every tenant ever seen, and the
// sweep's cost is spread over the Allows of a refill time.
type TokenBucket struct {
	rate   float64 // tokens per second
	burst  float64
	refill time.Duration // burst/rate, rounded up: an empty bucket is full after this long
	seed   maphash.Seed
	shards [shardCount]shard

	// The sweep clock: nanoseconds since epoch, on the monotonic clock, so
	// a wall clock stepped back cannot make a sweep due early or never.
	epoch     time.Time
	nextSweep atomic.Int64
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
	tb := &TokenBucket{
		rate:   ratePerSecond,
		burst:  float64(burst),
		refill: ceilDuration(float64(burst) / ratePerSecond),
		seed:   maphash.MakeSeed(),
		epoch:  time.Now(),
	}
	tb.nextSweep.Store(int64(tb.refill))
	for i := range tb.shards {
		tb.shards[i].buckets = map[string]*bucket{}
	}
	return tb, nil
}

// Allow takes one token from key's bucket if there is one. It never blocks
// and never fails; ctx is accepted to satisfy Limiter.
func (tb *TokenBucket) Allow(_ context.Context, key string) (Decision, error) {
	d, now := tb.take(key)
	tb.sweepIfDue(now)
	return d, nil
}

// take is Allow for one key: refill, then take a token or say when one is back.
func (tb *TokenBucket) take(key string) (Decision, time.Time) {
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
		return Decision{Allowed: true, Remaining: int(b.tokens + epsilon)}, now
	}
	return Decision{RetryAfter: ceilDuration((1 - b.tokens) / tb.rate)}, now // until one whole token
}

// sweepIfDue forgets every bucket that is full at now, if a refill time has
// passed since the last sweep. Of the Allows that find a sweep due, one wins
// the compare-and-swap and sweeps; the others carry on.
func (tb *TokenBucket) sweepIfDue(now time.Time) {
	at := int64(now.Sub(tb.epoch))
	due := tb.nextSweep.Load()
	if at < due || !tb.nextSweep.CompareAndSwap(due, satAdd(at, int64(tb.refill))) {
		return
	}
	for i := range tb.shards {
		sh := &tb.shards[i]
		sh.mu.Lock()
		// Copy the survivors into a new map rather than deleting from the
		// old one: a Go map never gives back the space a burst of keys made
		// it grow to, so deleting alone would keep the memory forever.
		kept := make(map[string]*bucket)
		for key, b := range sh.buckets {
			if !tb.fullAt(b, now) {
				kept[key] = b
			}
		}
		sh.buckets = kept
		sh.mu.Unlock()
	}
}

// fullAt reports whether b holds burst tokens at now. The time to fill is
// rounded up, as RetryAfter is, so a bucket is never taken for full early.
func (tb *TokenBucket) fullAt(b *bucket, now time.Time) bool {
	if b.tokens >= tb.burst {
		return true
	}
	return !now.Before(b.last.Add(ceilDuration((tb.burst - b.tokens) / tb.rate)))
}

// Len is the number of keys holding state now: buckets not yet forgotten.
// With Allows running concurrently it is a snapshot, shard by shard.
func (tb *TokenBucket) Len() int {
	n := 0
	for i := range tb.shards {
		sh := &tb.shards[i]
		sh.mu.Lock()
		n += len(sh.buckets)
		sh.mu.Unlock()
	}
	return n
}

// ceilDuration converts seconds to a Duration, rounding up to the next
// nanosecond and saturating instead of overflowing (a tiny rate makes a
// refill time of centuries).
func ceilDuration(seconds float64) time.Duration {
	ns := math.Ceil(seconds * float64(time.Second))
	if ns >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// satAdd is a + b for b ≥ 0, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
