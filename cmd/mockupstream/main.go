// Command mockupstream is a simulated OpenAI-compatible upstream: the
// simulated provider the gateway runs in-process (package sim), served over
// HTTP (package simhttp) with its latency and failure knobs as flags. The
// full stack (docker-compose.yml) points both gateway replicas at it, so
// the dashboard shows the real upstream path: connect, time to headers,
// streamed chunks, retries, breaker trips.
//
//	go run ./cmd/mockupstream -latency 80ms -error-rate 0.05 -errors '500|429'
//	go run ./cmd/mockupstream -slow 60s-120s:800ms@0.2     # a brown-out from the first to the second minute
//	go run ./cmd/mockupstream -h                           # every flag and its MOCKUPSTREAM_* variable
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}
