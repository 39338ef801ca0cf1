package drain

import (
	"net/http"
)

// Middleware counts each request in flight for the Drainer.
//
// TODO(lab 05): every request counts in Active from before the handler runs
// until it returns, even by panic. While draining: 503 with Connection: close,
// and the handler is not called.
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
