package router

import "github.com/production-go/gateway-lab/gateway/internal/inflight"

// tenantCap caps each tenant's requests in flight at max (0: no cap, and
// no bookkeeping).
type tenantCap struct {
	max int
	n   inflight.Counter
}

func newTenantCap(max int) *tenantCap { return &tenantCap{max: max} }

// enter counts one more request for tenant, or reports false at the cap.
func (c *tenantCap) enter(tenant string) bool { return c.max == 0 || c.n.Enter(tenant, c.max) }

// leave undoes one enter.
func (c *tenantCap) leave(tenant string) {
	if c.max != 0 {
		c.n.Leave(tenant)
	}
}

// busy is how many tenants have a request in flight (0 without a cap).
func (c *tenantCap) busy() int { return c.n.Busy() }
