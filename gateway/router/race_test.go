//go:build race

package router_test

// manyTenants is smaller under the race detector, which makes each request
// several times slower; 10,000 still dwarfs what the sweep leaves.
const manyTenants = 10_000
