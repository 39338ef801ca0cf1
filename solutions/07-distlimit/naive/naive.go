// Package naive is the rate limiter lab 07 warns about, kept as a teaching
// contrast: it reads the bucket, decides in Go, and writes the bucket back
// in separate commands. Each step is correct; together they are not atomic.
// Between one replica's read and its write, another replica can read the
// same tokens, and both spend them.
//
// Do not use it. The test beside it forces that interleaving and shows the
// over-admission.
package naive

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limiter is a read-compute-write token bucket in Redis.
type Limiter struct {
	rdb   redis.Cmdable
	rate  float64
	burst float64
	// BetweenReadAndWrite, if set, runs after the bucket is read and before
	// it is written: the window in which another replica can interleave.
	BetweenReadAndWrite func()
}

// New returns a naive limiter.
func New(rdb redis.Cmdable, rate float64, burst int) *Limiter {
	return &Limiter{rdb: rdb, rate: rate, burst: float64(burst)}
}

// Allow reads, decides and writes in three round trips.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	now, err := l.rdb.Time(ctx).Result()
	if err != nil {
		return false, fmt.Errorf("naive: time: %w", err)
	}
	state, err := l.rdb.HMGet(ctx, key, "tokens", "ts").Result()
	if err != nil {
		return false, fmt.Errorf("naive: read: %w", err)
	}
	tokens, last := l.burst, now.UnixMicro()
	if s, ok := state[0].(string); ok {
		tokens, _ = strconv.ParseFloat(s, 64)
	}
	if s, ok := state[1].(string); ok {
		last, _ = strconv.ParseInt(s, 10, 64)
	}
	if n := now.UnixMicro(); n > last {
		tokens = math.Min(l.burst, tokens+float64(n-last)*l.rate/1e6)
		last = n
	}
	allowed := tokens >= 1
	if allowed {
		tokens--
	}
	if l.BetweenReadAndWrite != nil {
		l.BetweenReadAndWrite()
	}
	if err := l.rdb.HSet(ctx, key, "tokens", tokens, "ts", last).Err(); err != nil {
		return false, fmt.Errorf("naive: write: %w", err)
	}
	l.rdb.PExpire(ctx, key, time.Hour)
	return allowed, nil
}
