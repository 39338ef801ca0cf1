package httpapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/production-go/gateway-lab/gateway/tenant"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
)

// errDraining is the answer to a request that comes while the server shuts
// down: retry elsewhere, in a second.
func errDraining() *chatapi.Error {
	return chatapi.Draining.New("the gateway is shutting down; retry on another instance").After(time.Second)
}

// fail writes the error response a router error deserves, and logs it
// without the upstream's message (it may quote the prompt).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	cause := context.Cause(r.Context())
	e := classify(err, cause)
	if e.Status == telemetry.StatusClientClosed {
		if rec, ok := w.(*recorder); ok {
			rec.outcome = telemetry.StatusClientClosed
		}
		return // nobody is listening
	}
	if shutdown(err, cause) {
		w.Header().Set("Connection", "close")
	}
	var up *chatapi.UpstreamError
	level := slog.LevelInfo
	switch {
	case errors.As(err, &up) && upstreamAuth(up.Status):
		level = slog.LevelError // an operator must fix the key; no retry will
	case e.Status >= 500:
		level = slog.LevelWarn
	}
	s.opts.Logger.LogAttrs(r.Context(), level, "request failed",
		slog.Int("status", e.Status), slog.String("code", e.Code), slog.String("error", logSafe(err)))
	s.writeError(w, e)
}

// shutdown reports whether err ended a request because this server is
// shutting down: the router closed, or the drain grace cut it (cause is
// the request context's cause).
func shutdown(err, cause error) bool {
	return errors.Is(err, router.ErrClosed) || errors.Is(err, drain.ErrCut) ||
		(errors.Is(err, context.Canceled) && errors.Is(cause, drain.ErrCut))
}

// cutOf says why a stream that had started ended with err.
func cutOf(err, cause error) telemetry.StreamCut {
	switch {
	case shutdown(err, cause):
		return telemetry.CutShutdown
	case errors.Is(err, context.Canceled):
		return telemetry.CutClientClosed
	}
	return telemetry.CutUpstream
}

// classify maps a router error to the OpenAI error the caller gets, with
// its Retry-After. An upstream's refusal keeps its status, type, code and
// message (bounded); everything else says what happened in the gateway's
// words, never its internal error chain.
func classify(err, cause error) *chatapi.Error {
	e := describe(err, cause)
	e.RetryAfter = max(e.RetryAfter, retryAfter(err, e.Status))
	return e
}

func describe(err, cause error) *chatapi.Error {
	var (
		up      *chatapi.UpstreamError
		ready   *chatapi.Error
		refused *tenant.Refusal
	)
	switch {
	case errors.As(err, &ready):
		// A hook's own answer (the guard refusing a retry the tenant has
		// no tokens for): it says what to send.
		out := *ready
		return &out
	case errors.Is(err, router.ErrUnknownProvider):
		return chatapi.ModelNotFound.New("the model names a provider this gateway does not have")
	case errors.Is(err, router.ErrInvalidRequest):
		return chatapi.InvalidRequest.New("the request has no prompt or no tenant")
	case errors.As(err, &refused):
		return gateRefusal(refused)
	case errors.Is(err, router.ErrOverloaded):
		return chatapi.Overloaded.New("the gateway is at capacity; retry shortly")
	case errors.Is(err, tenant.ErrLimitFailed):
		return chatapi.LimiterUnavailable.New("the rate limiter is unavailable and this gateway fails closed; retry shortly")
	case errors.Is(err, router.ErrNoHealthyProvider):
		return chatapi.NoHealthyProvider.New("every provider for this model is failing; see Retry-After")
	case errors.As(err, &up) && upstreamAuth(up.Status):
		// The gateway's own credentials were refused: the upstream's words
		// may quote the key, and the caller can do nothing about it.
		return chatapi.UpstreamAuthFailed.New("the gateway could not authenticate to the upstream provider")
	case errors.As(err, &up) && up.Status == http.StatusTooManyRequests:
		return chatapi.UpstreamLimiting.New("the upstream provider is rate limiting this gateway; retry later")
	case errors.As(err, &up) && up.Status >= 400 && up.Status < 500:
		return upstreamRefusal(up)
	case shutdown(err, cause):
		return errDraining()
	case errors.Is(err, context.Canceled):
		return chatapi.ClientClosedRequest.New("the client closed the request")
	case errors.Is(err, context.DeadlineExceeded):
		return chatapi.DeadlineExceeded.New("no provider answered within the deadline")
	}
	return chatapi.UpstreamFailed.New("the upstream provider failed")
}

// upstreamAuth reports whether an upstream status refuses the gateway's own
// credentials rather than the caller's request.
func upstreamAuth(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusProxyAuthRequired
}

// upstreamRefusal passes an upstream's 4xx on as the upstream said it.
func upstreamRefusal(up *chatapi.UpstreamError) *chatapi.Error {
	out := &chatapi.Error{Status: up.Status, Type: chatapi.ErrorType(up.Type), Code: up.Code, Param: up.Param, Message: up.Message}
	if out.Type == "" {
		out.Type = chatapi.InvalidRequestError
	}
	if out.Message == "" {
		out.Message = "the upstream provider refused the request (HTTP " + strconv.Itoa(up.Status) + ")"
	}
	return out
}

// gateRefusal is the answer to a request the tenant gate refused: the one
// place its refusals become OpenAI errors.
func gateRefusal(rf *tenant.Refusal) *chatapi.Error {
	switch {
	case rf.Limit == policy.LimitInFlight && rf.Own:
		return chatapi.TenantBusy.New(fmt.Sprintf("this caller may have %d requests in flight", rf.Max))
	case rf.Limit == policy.LimitInFlight:
		return chatapi.TenantBusy.New("this tenant has too many requests in flight; see Retry-After")
	}
	return chatapi.RateLimited.New("rate limit exceeded for this tenant; see Retry-After")
}

// retryAfter is how long the caller should wait, for the statuses that say so.
func retryAfter(err error, status int) time.Duration {
	var rf *tenant.Refusal
	if errors.As(err, &rf) {
		return max(rf.RetryAfter, time.Second)
	}
	var ra llm.RetryAfterer
	if (status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests) && errors.As(err, &ra) && ra.RetryAfter() > 0 {
		return ra.RetryAfter()
	}
	if status == http.StatusServiceUnavailable {
		return time.Second
	}
	return 0
}

// writeError answers with e within the write timeout.
func (s *Server) writeError(w http.ResponseWriter, e *chatapi.Error) {
	s.writeDeadline(w)
	chatapi.WriteError(w, e)
}

// writeDeadline bounds the writes of a whole (not streamed) answer, so a
// client that never reads it cannot hold the handler, its slot and a drain.
// settled calls an admission's done once the answer is on its way: the
// response is flushed first, since net/http would otherwise hold a small
// answer in its buffer until the handler returns — after done's Redis
// round trips, which are not the caller's to wait for.
func settled(w http.ResponseWriter, done tenant.Done, u *llm.Usage, err error) {
	_ = http.NewResponseController(w).Flush()
	done(u, err)
}

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
