// Package naive is the token quota lab 12 warns about, kept as a teaching
// contrast: it reads the tenant's balance, decides in Go, and writes the
// new balance back — three commands, each correct, together not atomic.
// Between one replica's read and its write another replica reads the same
// balance, and both spend it: a quota of 100 tokens admits two requests of
// 60. It has no reservations either, so a settle cannot tell a retry from
// a second call.
//
// Do not use it. The real-Redis test beside it forces that interleaving
// and shows the overshoot.
package naive

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Quota is a get-then-set token balance per tenant, with no refill (the
// refill is not what it gets wrong).
type Quota struct {
	rdb       redis.Cmdable
	perMinute int
	// BetweenReadAndWrite, if set, runs after the balance is read and
	// before it is written: the window in which another replica can
	// interleave.
	BetweenReadAndWrite func()
}

// New returns a naive quota of perMinute tokens.
func New(rdb redis.Cmdable, perMinute int) *Quota { return &Quota{rdb: rdb, perMinute: perMinute} }

// Reserve takes estimate from key's balance if it holds that many.
func (q *Quota) Reserve(ctx context.Context, key string, estimate int) (bool, error) {
	balance, err := q.rdb.Get(ctx, key).Int()
	switch {
	case errors.Is(err, redis.Nil):
		balance = q.perMinute // a new tenant starts full
	case err != nil:
		return false, fmt.Errorf("naive: get: %w", err)
	}
	if q.BetweenReadAndWrite != nil {
		q.BetweenReadAndWrite()
	}
	if balance < estimate {
		return false, nil
	}
	if err := q.rdb.Set(ctx, key, balance-estimate, 0).Err(); err != nil {
		return false, fmt.Errorf("naive: set: %w", err)
	}
	return true, nil
}

// Balance is key's balance now.
func (q *Quota) Balance(ctx context.Context, key string) (int, error) {
	balance, err := q.rdb.Get(ctx, key).Int()
	if errors.Is(err, redis.Nil) {
		return q.perMinute, nil
	}
	return balance, err
}
