package router

import "sync"

// tenantCap counts each tenant's requests in flight and refuses one over
// the cap. A tenant with nothing in flight holds no entry, so the map is
// as small as the number of tenants busy right now.
type tenantCap struct {
	max  int // 0: no cap, and no bookkeeping
	mu   sync.Mutex
	n    map[string]int
	peak int // the most entries n has held since it was last made
}

func newTenantCap(max int) *tenantCap { return &tenantCap{max: max, n: map[string]int{}} }

// enter counts one more request for tenant, or reports false at the cap.
func (c *tenantCap) enter(tenant string) bool {
	if c.max == 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[tenant] >= c.max {
		return false
	}
	c.n[tenant]++
	c.peak = max(c.peak, len(c.n))
	return true
}

// leave undoes one enter.
func (c *tenantCap) leave(tenant string) {
	if c.max == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[tenant] <= 1 {
		delete(c.n, tenant)
		if len(c.n) == 0 && c.peak > 64 {
			// A Go map keeps the space its peak needed; start afresh so a
			// burst of distinct tenants does not hold memory for ever.
			c.n, c.peak = map[string]int{}, 0
		}
		return
	}
	c.n[tenant]--
}

// busy is how many tenants have a request in flight (0 without a cap).
func (c *tenantCap) busy() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}
