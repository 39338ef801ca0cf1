package drain

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ServeOptions tunes Serve's shutdown sequence.
type ServeOptions struct {
	// ReadinessDelay is how long to keep serving normally after /readyz
	// turns 503, so load balancers notice before anything is refused.
	ReadinessDelay time.Duration
	// Grace bounds the drain: requests still running when it ends have
	// their contexts cancelled and are counted in Report.Cut.
	Grace time.Duration
	// ShutdownTimeout bounds http.Server.Shutdown after the drain (closing
	// idle connections, letting cancelled handlers return); 0 means 5s.
	// Past it the server is closed hard.
	ShutdownTimeout time.Duration
}

// Report says how a shutdown went.
type Report struct {
	// Drained is true if every in-flight request finished within Grace.
	Drained bool
	// Cut is how many requests were still running when Grace ended: at
	// least 1 when Drained is false, 0 when it is true.
	Cut int
}

// Serve runs srv on ln until ctx ends (wire SIGTERM to it with
// signal.NotifyContext), then shuts down in order:
//
//  1. /readyz turns 503 (MarkUnready); requests are still served;
//  2. wait ReadinessDelay, so whoever routes here hears of it and stops;
//  3. Drain within Grace: new requests get 503, in-flight ones finish;
//  4. if Grace ended first, cancel the requests' base context — Shutdown
//     does not, and a stream would otherwise hold the server open;
//  5. srv.Shutdown with a fresh context (ctx is already done: passing it
//     would make Shutdown give up at once).
//
// srv.Handler should be wrapped with d.Middleware so the drain sees the
// requests. Serve sets srv.BaseContext. It returns the report and the first
// error from serving or shutting down; if serving fails before ctx ends, it
// returns that error at once.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, d *Drainer, opts ServeOptions) (Report, error) {
	base, cancelBase := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelBase(nil)
	srv.BaseContext = func(net.Listener) context.Context { return base }

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	select {
	case err := <-served:
		return Report{}, fmt.Errorf("drain: server stopped before shutdown began: %w", err)
	case <-ctx.Done():
	}

	d.MarkUnready()
	if opts.ReadinessDelay > 0 {
		t := time.NewTimer(opts.ReadinessDelay)
		select {
		case <-t.C:
		case err := <-served:
			t.Stop()
			return Report{}, fmt.Errorf("drain: server stopped during the readiness delay: %w", err)
		}
	}

	graceCtx, cancelGrace := context.WithTimeout(context.Background(), opts.Grace)
	drained := d.Drain(graceCtx)
	cancelGrace()
	report := Report{Drained: true}
	if !drained {
		// A request may leave at the very instant Grace ends, after Drain
		// gave up: the count decides, so the report never says "not
		// drained" with nothing cut.
		if report.Cut = d.Active(); report.Cut > 0 {
			report.Drained = false
			cancelBase(ErrCut)
		}
	}

	timeout := opts.ShutdownTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	shutCtx, cancelShut := context.WithTimeout(context.Background(), timeout)
	defer cancelShut()
	err := srv.Shutdown(shutCtx)
	if err != nil {
		err = errors.Join(fmt.Errorf("drain: shutdown: %w", err), srv.Close())
	}
	if serveErr := <-served; !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("drain: serve: %w", serveErr))
	}
	return report, err
}
