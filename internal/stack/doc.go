// Package stack holds the tests of the full stack (docker-compose.yml,
// Dockerfile, stack/): they need no Docker engine. Behind the build tag
// "stack" (make test-stack; make ci runs it):
//
//   - the compose file loads and validates with the Compose reference
//     loader (compose-spec/compose-go), and every port, scrape target,
//     health check, environment variable and mounted file agrees with the
//     services' real flags and with stack/'s configs;
//   - every query of the Grafana dashboard names a metric the running
//     services export;
//   - with Debian's prometheus on PATH, a real Prometheus on loopback scrapes
//     two secure_app replicas (configured from the compose file) in front of
//     mockupstream, under a little traffic, and every dashboard query
//     returns data through its HTTP API; promtool check metrics passes on
//     each replica's /metrics. Without prometheus it skips with the reason,
//     unless STACK_PROMETHEUS_REQUIRED=1 (make ci), which makes it fail.
package stack
