package guard

import (
	"testing"

	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allowed counts how many of n requests key's bucket lets through.
func allowed(t *testing.T, r *rig, tier, key string, n int) int {
	t.Helper()
	ctx := tenant.WithIdentity(t.Context(), tenant.Identity{Key: key, Tier: tier})
	got := 0
	for range n {
		d, err := r.g.Limiter().Allow(ctx, key)
		require.NoError(t, err)
		if d.Allowed {
			got++
		}
	}
	return got
}

func refund(t *testing.T, r *rig, tier, key string) error {
	t.Helper()
	ctx := tenant.WithIdentity(t.Context(), tenant.Identity{Key: key, Tier: tier})
	return r.g.Limiter().(tierLimiter).Refund(ctx, key)
}

func TestARefundGivesOneRateTokenBack(t *testing.T) {
	r := newRig(t, false) // Redis' clock stands still: no refill
	require.Equal(t, 1, allowed(t, r, "open", "k", 2), "burst 1: one request, then none")
	require.NoError(t, refund(t, r, "open", "k"))
	assert.Equal(t, 1, allowed(t, r, "open", "k", 2), "the token given back serves one request, and only one")
}

func TestRefundsNeverFillABucketBeyondItsBurst(t *testing.T) {
	r := newRig(t, false)
	require.Equal(t, 1, allowed(t, r, "open", "k", 1))
	require.NoError(t, refund(t, r, "open", "k"))
	require.NoError(t, refund(t, r, "open", "k"))
	assert.Equal(t, 1, allowed(t, r, "open", "k", 3), "two refunds into a bucket of 1")

	require.NoError(t, refund(t, r, "small", "full"), "a bucket never used is full")
	assert.Equal(t, 100, allowed(t, r, "small", "full", 101), "a refund into a full bucket adds nothing: burst 100")
}

func TestARefundTheClientResendsIsAppliedOnce(t *testing.T) {
	r := newRig(t, false)
	require.Equal(t, 1, allowed(t, r, "small", "k", 1))
	require.Equal(t, 99, allowed(t, r, "small", "k", 100), "the bucket of 100 is empty")
	bucket := r.g.limits["small"].Key("k")
	keys := []string{bucket, bucket + ":refund:one"}
	for range 2 { // the same call twice, as go-redis resends one whose reply it lost
		require.NoError(t, refundScript.Run(t.Context(), r.g.cfg.Redis, keys, 100).Err())
	}
	assert.Equal(t, 1, allowed(t, r, "small", "k", 2))
}

func TestATenantHasOneRateWhateverTheTierOfItsToken(t *testing.T) {
	r := newRig(t, false)
	require.Equal(t, 100, allowed(t, r, "small", "k", 100), "small: a burst of 100")
	assert.Zero(t, allowed(t, r, "open", "k", 1), "a token of another tier draws on the same, empty, bucket")
}

func TestARefundFailsWithoutATierOrARedis(t *testing.T) {
	r := newRig(t, false)
	assert.ErrorContains(t, r.g.Limiter().(tierLimiter).Refund(t.Context(), "k"), "no rate limit for tier")
	r.m.Close()
	assert.ErrorContains(t, refund(t, r, "open", "k"), "guard: refund a rate token")
}

var _ tenant.Refunder = tierLimiter{}
