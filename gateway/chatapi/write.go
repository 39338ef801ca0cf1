package chatapi

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// WriteError answers with e: its status, its body in OpenAI's error shape,
// a Retry-After header when e.RetryAfter is positive and a WWW-Authenticate
// header when e.Challenge is set. Every error response of the gateway and
// of the mock upstream goes through here, so the headers are computed in
// one place.
func WriteError(w http.ResponseWriter, e *Error) {
	body := e.JSON()
	h := w.Header()
	if e.RetryAfter > 0 {
		h.Set("Retry-After", RetryAfterSeconds(e.RetryAfter))
	}
	if e.Challenge != "" {
		h.Set("WWW-Authenticate", e.Challenge)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}

// RetryAfterSeconds is d as a Retry-After value: whole seconds, rounded up
// (a client told to come back sooner than the wait would be refused again),
// and at least 1.
func RetryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
