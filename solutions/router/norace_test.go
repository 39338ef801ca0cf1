//go:build !race

package router_test

// manyTenants is how many distinct tenants TestManyTenantsLeaveNoStateBehind sends.
const manyTenants = 100_000
