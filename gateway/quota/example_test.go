package quota_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/production-go/gateway-lab/gateway/quota"
	"github.com/redis/go-redis/v9"
)

// A gateway request: take an in-flight slot, reserve the estimate, call the
// upstream, settle what it reports. The upstream here reports 180 tokens
// used out of an estimate of 1000.
func Example() {
	m, _ := miniredis.Run() // in production: the Redis every replica shares
	defer m.Close()
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)) // Redis' clock held still, for a stable output
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	tokens, _ := quota.NewTokens(rdb, quota.TokensConfig{Prefix: "gw"})
	leases, _ := quota.NewLeases(rdb, quota.LeasesConfig{Prefix: "gw", TTL: 5 * time.Minute})

	ctx := context.Background() // in a handler: r.Context()
	release, d, err := leases.Acquire(ctx, "acme", 4)
	if err != nil || !d.Allowed {
		fmt.Println("429: too many requests in flight")
		return
	}
	defer release(context.WithoutCancel(ctx))

	prompt, maxTokens := 200, 800
	r, d, err := tokens.Reserve(ctx, "acme", 10_000, prompt+maxTokens)
	switch {
	case err != nil:
		fmt.Println("error:", err) // 503 when Redis is down, 413 for ErrEstimateTooLarge
		return
	case !d.Allowed:
		fmt.Println("429, Retry-After:", d.RetryAfter)
		return
	}
	fmt.Println("reserved, remaining:", d.Remaining)

	used := 180 // from the upstream's usage block
	if err := r.Settle(context.WithoutCancel(ctx), used); err != nil {
		fmt.Println("settle:", err) // the reservation stays charged
	}
	_, d, _ = tokens.Reserve(ctx, "acme", 10_000, 0)
	fmt.Println("after settle, remaining:", d.Remaining)
	// Output:
	// reserved, remaining: 9000
	// after settle, remaining: 9820
}
