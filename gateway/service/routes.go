package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/router"
)

// routesFile is the -routes file's shape:
//
//	{"routes": [{"model": "chat",
//	             "targets": [{"provider": "alpha", "model": "alpha-large"},
//	                         {"provider": "beta",  "model": "beta-small", "continue": true}],
//	             "fallback_on": ["context_length_exceeded"]}]}
//
// "continue": true declares that the target's upstream continues an
// assistant prefill (the answer so far, sent as the last message) instead
// of starting over, so that a stream another target broke after its first
// byte may be finished there (see router.Stream). Declare it only for an
// upstream that does: one that does not would repeat or garble the
// answer. How the prefill is sent is the upstream's prefill= setting.
//
// "retry_same": true tries a target that failed with a 5xx or a dropped
// connection once more before the next; "wait_retry_after": "2s" waits
// out a Retry-After of up to that long, once, on the same target, instead
// of moving on (see router.Route).
//
// fallback_on lists the upstream error codes (or HTTP statuses, as strings)
// after which the next target is tried although the error is the request's
// own; left out, it is DefaultFallbackOn for a route with two or more
// targets; [] turns it off.
type routesFile struct {
	Routes []struct {
		Model   string `json:"model"`
		Targets []struct {
			Provider string `json:"provider"`
			Model    string `json:"model"`
			Continue bool   `json:"continue"`
		} `json:"targets"`
		FallbackOn     []string `json:"fallback_on"`
		RetrySame      bool     `json:"retry_same"`
		WaitRetryAfter string   `json:"wait_retry_after"`
	} `json:"routes"`
}

// DefaultFallbackOn is what a route with a fallback falls back on besides
// failures: a prompt too long for one model may fit the next.
var DefaultFallbackOn = []string{"context_length_exceeded"}

// LoadRoutes reads the -routes file (if any) and the -route flags. The
// router checks them against the providers when it is built.
func LoadRoutes(file string, flags []string) ([]router.Route, error) {
	routes, err := readRoutesFile(file)
	if err != nil {
		return nil, err
	}
	for _, spec := range flags {
		name, list, ok := strings.Cut(spec, "=")
		if !ok {
			return nil, fmt.Errorf("-route %q: want name=provider[:model],provider[:model]", spec)
		}
		route := router.Route{Name: name}
		for _, t := range strings.Split(list, ",") {
			p, m, _ := strings.Cut(strings.TrimSpace(t), ":")
			route.Targets = append(route.Targets, router.Target{Provider: p, Model: m})
		}
		routes = append(routes, route)
	}
	for i := range routes {
		if routes[i].FallbackOn == nil && len(routes[i].Targets) > 1 {
			routes[i].FallbackOn = DefaultFallbackOn
		}
	}
	return routes, nil
}

func readRoutesFile(file string) ([]router.Route, error) {
	if file == "" {
		return nil, nil
	}
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
	var routes []router.Route
	for _, r := range f.Routes {
		route := router.Route{Name: r.Model, FallbackOn: r.FallbackOn, RetrySame: r.RetrySame}
		if r.WaitRetryAfter != "" {
			if route.WaitRetryAfter, err = time.ParseDuration(r.WaitRetryAfter); err != nil {
				return nil, fmt.Errorf("-routes %s: route %q: wait_retry_after: %w", file, r.Model, err)
			}
		}
		for _, t := range r.Targets {
			target := router.Target{Provider: t.Provider, Model: t.Model}
			route.Targets = append(route.Targets, target)
			if t.Continue {
				route.Continue = append(route.Continue, target)
			}
		}
		routes = append(routes, route)
	}
	return routes, nil
}
