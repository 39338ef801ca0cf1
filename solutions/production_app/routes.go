package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/httpapi"
)

// routesFile is the -routes file's shape:
//
//	{"routes": [{"model": "chat", "targets": [{"provider": "alpha", "model": "alpha-large"},
//	                                           {"provider": "beta",  "model": "beta-small"}]}]}
type routesFile struct {
	Routes []struct {
		Model   string `json:"model"`
		Targets []struct {
			Provider string `json:"provider"`
			Model    string `json:"model"`
		} `json:"targets"`
	} `json:"routes"`
}

// loadRoutes reads the -routes file (if any) and the -route flags, and
// checks them against the providers.
func loadRoutes(file string, flags []string, providers []string) ([]httpapi.Route, error) {
	var routes []httpapi.Route
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("-routes: %w", err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		var f routesFile
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("-routes %s: %w", file, err)
		}
		for _, r := range f.Routes {
			route := httpapi.Route{Name: r.Model}
			for _, t := range r.Targets {
				route.Targets = append(route.Targets, gateway.Target{Provider: t.Provider, Model: t.Model})
			}
			routes = append(routes, route)
		}
	}
	for _, spec := range flags {
		name, list, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("-route %q: want name=provider[:model],provider[:model]", spec)
		}
		route := httpapi.Route{Name: name}
		for _, t := range strings.Split(list, ",") {
			p, m, _ := strings.Cut(strings.TrimSpace(t), ":")
			route.Targets = append(route.Targets, gateway.Target{Provider: p, Model: m})
		}
		routes = append(routes, route)
	}
	seen := map[string]bool{}
	for _, r := range routes {
		switch {
		case r.Name == "" || r.Name == httpapi.AutoModel || slices.Contains(providers, r.Name):
			return nil, fmt.Errorf("route %q: a route needs a name that is not %q and not a provider's name", r.Name, httpapi.AutoModel)
		case seen[r.Name]:
			return nil, fmt.Errorf("route %q is defined twice", r.Name)
		case len(r.Targets) == 0:
			return nil, fmt.Errorf("route %q has no targets", r.Name)
		}
		seen[r.Name] = true
		for _, t := range r.Targets {
			if !slices.Contains(providers, t.Provider) {
				return nil, fmt.Errorf("route %q: unknown provider %q (have %s)", r.Name, t.Provider, strings.Join(providers, ", "))
			}
		}
	}
	return routes, nil
}
