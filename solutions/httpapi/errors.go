package httpapi

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/internal/chatapi"
)

var errDraining = &chatapi.Error{Status: http.StatusServiceUnavailable, Type: "server_error", Code: "draining",
	Message: "the gateway is shutting down; retry on another instance"}

// fail writes the error response a gateway error deserves, and logs it
// without the upstream's message (it may quote the prompt).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := s.classify(err, context.Cause(r.Context()))
	if e.Status == statusClientClosed {
		if rec, ok := w.(*recorder); ok {
			rec.outcome = statusClientClosed
		}
		return // nobody is listening
	}
	if wait := retryAfter(err, e.Status); wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	}
	if e.Code == errDraining.Code {
		w.Header().Set("Connection", "close")
	}
	level := slog.LevelInfo
	if e.Status >= 500 {
		level = slog.LevelWarn
	}
	s.opts.Logger.LogAttrs(r.Context(), level, "request failed",
		slog.Int("status", e.Status), slog.String("code", e.Code), slog.String("error", logSafe(err)))
	s.writeError(w, e)
}

// classify maps a gateway error to the OpenAI error the caller gets. An
// upstream's refusal keeps its status, type, code and message (bounded);
// everything else says what happened in the gateway's words, never its
// internal error chain.
func (s *Server) classify(err, cause error) *chatapi.Error {
	var (
		rl *gateway.RateLimitError
		up *chatapi.UpstreamError
	)
	e := func(status int, typ, code, msg string) *chatapi.Error {
		return &chatapi.Error{Status: status, Type: typ, Code: code, Message: msg}
	}
	switch {
	case errors.Is(err, gateway.ErrUnknownProvider):
		return e(http.StatusNotFound, "invalid_request_error", "model_not_found", "the model names a provider this gateway does not have")
	case errors.Is(err, gateway.ErrInvalidRequest):
		return e(http.StatusBadRequest, "invalid_request_error", "invalid_request", "the request has no prompt or no tenant")
	case errors.Is(err, gateway.ErrTenantBusy):
		return e(http.StatusTooManyRequests, "rate_limit_error", "too_many_concurrent_requests", "this tenant has too many requests in flight; see Retry-After")
	case errors.As(err, &rl):
		return e(http.StatusTooManyRequests, "rate_limit_error", "rate_limited", "rate limit exceeded for this tenant; see Retry-After")
	case errors.Is(err, gateway.ErrOverloaded):
		return e(http.StatusServiceUnavailable, "server_error", "overloaded", "the gateway is at capacity; retry shortly")
	case errors.Is(err, gateway.ErrClosed):
		return errDraining
	case errors.Is(err, gateway.ErrLimiterFailed):
		return e(http.StatusServiceUnavailable, "server_error", "rate_limiter_unavailable", "the rate limiter is unavailable and this gateway fails closed; retry shortly")
	case errors.Is(err, gateway.ErrNoHealthyProvider):
		return e(http.StatusServiceUnavailable, "server_error", "no_healthy_provider", "every provider for this model is failing; see Retry-After")
	case errors.As(err, &up) && up.Status == http.StatusTooManyRequests:
		return e(http.StatusTooManyRequests, "rate_limit_error", "upstream_rate_limited", "the upstream provider is rate limiting this gateway; retry later")
	case errors.As(err, &up) && up.Status >= 400 && up.Status < 500:
		return upstreamRefusal(up)
	case errors.Is(err, drain.ErrCut), errors.Is(err, context.Canceled) && errors.Is(cause, drain.ErrCut):
		// Cut by the end of the drain grace, not by the client.
		return errDraining
	case errors.Is(err, context.Canceled):
		return e(statusClientClosed, "server_error", "client_closed", "the client closed the request")
	case errors.Is(err, context.DeadlineExceeded):
		return e(http.StatusGatewayTimeout, "server_error", "deadline_exceeded", "no provider answered within the deadline")
	}
	return e(http.StatusBadGateway, "server_error", "upstream_error", "the upstream provider failed")
}

// upstreamRefusal passes an upstream's 4xx on as the upstream said it.
func upstreamRefusal(up *chatapi.UpstreamError) *chatapi.Error {
	out := &chatapi.Error{Status: up.Status, Type: up.Type, Code: up.Code, Param: up.Param, Message: up.Message}
	if out.Type == "" {
		out.Type = "invalid_request_error"
	}
	if out.Message == "" {
		out.Message = "the upstream provider refused the request (HTTP " + strconv.Itoa(up.Status) + ")"
	}
	return out
}

// retryAfter is how long the caller should wait, for the statuses that say so.
func retryAfter(err error, status int) time.Duration {
	var rl *gateway.RateLimitError
	if errors.As(err, &rl) {
		return max(rl.RetryAfter, time.Second)
	}
	var ra gateway.RetryAfterer
	if (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests) && errors.As(err, &ra) && ra.RetryAfter() > 0 {
		return ra.RetryAfter()
	}
	if status == http.StatusServiceUnavailable {
		return time.Second
	}
	return 0
}

func (s *Server) writeError(w http.ResponseWriter, e *chatapi.Error) {
	s.writeDeadline(w)
	body := e.JSON()
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(e.RetryAfter.Seconds()))))
	}
	if e.Challenge != "" {
		w.Header().Set("WWW-Authenticate", e.Challenge)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(e.Status)
	_, _ = w.Write(body)
}

// writeDeadline bounds the writes of a whole (not streamed) answer, so a
// client that never reads it cannot hold the handler, its slot and a drain.
func (s *Server) writeDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.opts.WriteTimeout))
}

// logSafe is an error's text for a log line: bounded. Upstream errors leave
// out the upstream's message (see chatapi.UpstreamError), so no prompt text
// reaches the logs through them.
func logSafe(err error) string {
	msg := err.Error()
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	return msg
}
