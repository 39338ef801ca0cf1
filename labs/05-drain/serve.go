package drain

import (
	"context"
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
//  4. if Grace ended first, the requests still running have their contexts
//     cancelled, with cause ErrCut — Shutdown does not cancel them, and a
//     stream would otherwise hold the server open;
//  5. srv.Shutdown, bounded by ShutdownTimeout and not by ctx (which has
//     ended), so it still waits for connections the Drainer does not see.
//
// srv.Handler should be wrapped with d.Middleware so the drain sees the
// requests. Serve sets srv.BaseContext. It returns the report and the first
// error from serving or shutting down; if serving fails before ctx ends, it
// returns that error at once.
//
// TODO(lab 05): Serve returns only once srv.Serve has returned and nothing
// it started runs on; the requests' contexts end at the cut, not when ctx
// ends; when ctx ends, steps 1–5 happen in that order.
// If serving fails before ctx ends, return that error at once. Grace starts
// after ReadinessDelay. Cut is the in-flight count when Grace ended: if it is
// already 0 then (a request left at that very instant), report Drained.
func Serve(ctx context.Context, srv *http.Server, ln net.Listener, d *Drainer, opts ServeOptions) (Report, error) {
	return Report{}, ErrNotImplemented
}
