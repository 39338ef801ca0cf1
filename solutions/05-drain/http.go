package drain

import (
	"net/http"
)

// Middleware counts each request in flight for the Drainer. Once draining
// has begun it answers 503 with Connection: close, so the client's next
// request opens a connection the load balancer sends elsewhere.
func (d *Drainer) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leave, err := d.Enter()
		if err != nil {
			w.Header().Set("Connection", "close")
			w.Header().Set("Retry-After", "1")
			http.Error(w, "server is shutting down", http.StatusServiceUnavailable)
			return
		}
		defer leave()
		next.ServeHTTP(w, r)
	})
}

// Readiness serves /readyz: 200 while ready and accepting, 503 after
// MarkUnready or once draining.
func (d *Drainer) Readiness() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		d.mu.Lock()
		ready := d.ready && d.accepting
		d.mu.Unlock()
		w.Header().Set("Cache-Control", "no-store")
		if !ready {
			http.Error(w, "draining", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ready\n"))
	})
}

// Liveness serves /healthz: 200 for as long as the process can answer,
// draining or not.
func (d *Drainer) Liveness() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
}
