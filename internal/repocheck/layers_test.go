package repocheck

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The house's floors, bottom to top (docs/architecture.md draws them). A
// package imports only packages on its own floor or below — non-test
// imports: a test may reach up for what it drives. The labs know nothing of
// the product; nothing imports lab 08's capstone (the router is that
// composition grown up); the apps import the product, never the reverse.
var floors = []struct {
	name     string
	packages []string // module-relative; "solutions/NN-*" is every lab
}{
	{"the labs' references", []string{"solutions/NN-*"}},
	{"leaves: wire format, identity, tier policy, egress, the Redis pipeline", []string{
		"gateway/chatapi", "gateway/identity", "gateway/policy", "gateway/egress", "gateway/redispipe", "gateway/redisconn",
		"gateway/internal/inflight", "gateway/providers/spec",
	}},
	{"the contracts: a provider's (llm), a tenant's (tenant)", []string{"gateway/llm", "gateway/tenant"}},
	{"the domain: the request path, providers, quotas", []string{
		"gateway/router", "gateway/quota",
		"gateway/providers/sim", "gateway/providers/simhttp", "gateway/providers/openaicompat",
		"gateway/providers/hedged", "gateway/providers/limited",
	}},
	{"the tenant gate", []string{"gateway/guard"}},
	{"telemetry", []string{"gateway/telemetry"}},
	{"HTTP", []string{"gateway/httpapi"}},
	{"the assembly", []string{"gateway/service"}},
	{"the apps", []string{"solutions/production_app", "solutions/secure_app"}},
}

// knownInversions are imports that break the floors today and are to be
// removed. The test fails when one is gone, so the list only shrinks.
var knownInversions = []string{}

func floorOf(pkg string) int {
	for i, f := range floors {
		for _, p := range f.packages {
			if p == "solutions/NN-*" {
				rest, ok := strings.CutPrefix(pkg, "solutions/")
				if ok && len(rest) > 3 && rest[0] >= '0' && rest[0] <= '9' && rest[2] == '-' {
					return i
				}
				continue
			}
			if pkg == p {
				return i
			}
		}
	}
	return -1
}

// TestImportsRunDownTheFloors holds every package of solutions/ and
// gateway/ to the floors above, and names any package the floors forgot.
func TestImportsRunDownTheFloors(t *testing.T) {
	const mod = "github.com/production-go/gateway-lab/"
	cmd := exec.CommandContext(t.Context(), "go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./solutions/...", "./gateway/...")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	var found []string
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		if strings.HasSuffix(pkg, "/naive") {
			continue // a lab's naive reference, its tests' foil
		}
		from := floorOf(pkg)
		if !assert.GreaterOrEqual(t, from, 0, "%s is on no floor: add it to layers_test.go's floors and to docs/architecture.md", pkg) {
			continue
		}
		for _, imp := range fields[1:] {
			dep, ok := strings.CutPrefix(imp, mod)
			if !ok || strings.HasPrefix(dep, "internal/") {
				continue // the standard library, other modules, the repository's test helpers
			}
			edge := pkg + " -> " + dep
			assert.NotEqual(t, "solutions/08-gateway", dep, "%s: nothing imports lab 08's capstone", edge)
			to := floorOf(dep)
			if to <= from {
				continue
			}
			if slices.Contains(knownInversions, edge) {
				found = append(found, edge)
				continue
			}
			t.Errorf("%s: %s (%s) imports upward, into %s", edge, pkg, floors[from].name, floors[to].name)
		}
	}
	for _, k := range knownInversions {
		assert.Contains(t, found, k, "a known inversion is gone: take it off knownInversions")
	}
}
