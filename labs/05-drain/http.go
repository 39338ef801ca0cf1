package drain

import (
	"net/http"
)

// Middleware counts each request in flight for the Drainer.
//
// TODO(lab 05): Enter for every request and leave when the handler returns
// (even by panic: defer). While draining: 503, Connection: close (set before
// the status is written), and the handler is not called.
func (d *Drainer) Middleware(next http.Handler) http.Handler {
	return next
}

// Readiness serves /readyz.
//
// TODO(lab 05): 200 while ready and accepting; 503 after MarkUnready or Drain.
func (d *Drainer) Readiness() http.Handler {
	return http.NotFoundHandler()
}

// Liveness serves /healthz.
//
// TODO(lab 05): 200 for as long as the process runs — draining or not.
func (d *Drainer) Liveness() http.Handler {
	return http.NotFoundHandler()
}
