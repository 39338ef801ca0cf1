// Command production_app is the reference gateway: bounded concurrency,
// per-tenant rate limits and in-flight caps, layered deadlines, jittered
// retries, health-aware fallback across (provider, model) targets, RED and
// saturation metrics, and a graceful drain on SIGTERM. By default it serves
// two simulated providers, so it runs with nothing else installed:
//
//	go run ./solutions/production_app            # or: make run
//	go run ./solutions/production_app -h         # every flag, and its environment variable
//
// It trusts X-Tenant-ID and limits in this process; secure_app is the one to
// deploy behind the internet (verified identity, limits shared by replicas).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/production-go/gateway-lab/gateway/service"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	stop()
	os.Exit(code)
}

const try = `try:  curl -s http://{addr}/v1/chat/completions -H 'Content-Type: application/json' -H 'X-Tenant-ID: demo' \
        -d '{"model":"auto","messages":[{"role":"user","content":"hello"}]}'
      ("stream":true for SSE; GET /v1/models, /metrics, /readyz; Ctrl-C drains and exits)
`

// run is main without the process: flags, build, serve until ctx ends.
// It returns the exit code: 0 after a drain, 1 if serving failed, 2 for
// bad configuration.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ln net.Listener) int {
	c, err := service.Parse("production_app", args, stderr, nil)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "production_app:", err)
		return 2
	}
	log, err := service.NewLogger(stderr, c.LogLevel)
	if err != nil {
		fmt.Fprintln(stderr, "production_app:", err)
		return 2
	}
	svc, err := service.Build(c, log, service.Hooks{})
	if err != nil {
		fmt.Fprintln(stderr, "production_app:", err)
		return 2
	}
	report, err := svc.Serve(ctx, ln, stdout, try)
	if err != nil {
		fmt.Fprintln(stderr, "production_app:", err)
		return 1
	}
	fmt.Fprintf(stdout, "stopped: drained=%t cut=%d\n", report.Drained, report.Cut)
	return 0
}
