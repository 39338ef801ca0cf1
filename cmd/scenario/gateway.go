package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/production-go/gateway-lab/gateway/service"
)

// gateway is a production_app running in this process on a loopback port.
type gateway struct {
	url  string
	stop func()
}

// startGateway builds and serves production_app with args (its own flags).
func startGateway(ctx context.Context, args ...string) (*gateway, error) {
	c, err := service.Parse("scenario", append([]string{"-readiness-delay=0", "-drain-grace=2s", "-log-level=error"}, args...), io.Discard, nil)
	if err != nil {
		return nil, fmt.Errorf("gateway flags: %w", err)
	}
	svc, err := service.Build(c, slog.New(slog.DiscardHandler), service.Hooks{})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		svc.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = svc.Serve(ctx, ln, io.Discard, "")
	}()
	return &gateway{url: "http://" + ln.Addr().String(), stop: func() { cancel(); <-done }}, nil
}
