package gateway

import "sync"

// tenantCap counts each tenant's requests in flight and refuses one over
// the cap. A tenant with nothing in flight holds no entry, so the map is
// as small as the number of tenants busy right now.
type tenantCap struct {
	max int // 0: no cap, and no bookkeeping
	mu  sync.Mutex
	n   map[string]int
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
