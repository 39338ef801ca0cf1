// Package simhttp serves a simulated provider (package sim) over HTTP as an
// OpenAI-compatible upstream: POST /v1/chat/completions (whole or streamed
// as server-sent events), GET /v1/models and GET /healthz. The gateway's
// openaicompat provider talks to it as it would to a real upstream, so the
// full stack (cmd/mockupstream in docker-compose.yml) exercises the real
// wire path — dial, headers, SSE — with sim's seeded latency, errors,
// outages and brown-outs.
//
// A failure sim draws is answered the way a real upstream answers it: an
// OpenAI error object with the status (429 with Retry-After, 500, 503 in an
// outage window, 400), a connection closed without an answer for "reset",
// and no answer at all until the caller gives up for "timeout".
package simhttp

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/internal/chatapi"
	"github.com/production-go/gateway-lab/solutions/providers/sim"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 1 << 20

// Options configure the handler.
type Options struct {
	// APIKey, if set, is the bearer token every /v1 request must carry.
	APIKey string
}

// Handler serves p. Calls run under the request's context, so a caller
// that gives up ends its call.
func Handler(p *sim.Provider, opts Options) http.Handler {
	h := &handler{p: p, opts: opts}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", h.chat)
	mux.HandleFunc("GET /v1/models", h.models)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}

type handler struct {
	p    *sim.Provider
	opts Options
}

func (h *handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	if h.opts.APIKey == "" || r.Header.Get("Authorization") == "Bearer "+h.opts.APIKey {
		return true
	}
	writeError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", "missing or wrong API key", 0)
	return false
}

func (h *handler) models(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(w, r) {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list",
		"data": []map[string]any{{"id": h.p.Model(), "object": "model", "owned_by": h.p.Name()}}})
}

func (h *handler) chat(w http.ResponseWriter, r *http.Request) {
	if !h.authorized(w, r) {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "request body too large or unreadable", 0)
		return
	}
	chat, err := chatapi.Parse(body)
	if err != nil {
		var e *chatapi.Error
		if errors.As(err, &e) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(e.Status)
			_, _ = w.Write(e.JSON())
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_request", "invalid request", 0)
		return
	}
	req := gateway.Request{Chat: chat, Model: chat.Model}
	if !chat.Stream {
		c, err := h.p.Generate(r.Context(), req)
		if err != nil {
			fail(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(c.Raw)))
		_, _ = w.Write(c.Raw)
		return
	}
	started := false
	_, err = h.p.Stream(r.Context(), req, func(c gateway.Chunk) error {
		if !started {
			started = true
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			w.WriteHeader(http.StatusOK)
		}
		if _, err := io.WriteString(w, "data: "+string(c.Raw)+"\n\n"); err != nil {
			return err
		}
		return http.NewResponseController(w).Flush()
	})
	switch {
	case err != nil && !started:
		fail(w, err)
	case err != nil:
		// After the 200 an upstream can only stop; a real one drops the
		// connection, so this one does too.
		panic(http.ErrAbortHandler)
	default:
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// fail answers a call sim failed, as a real upstream would.
func fail(w http.ResponseWriter, err error) {
	var up *chatapi.UpstreamError
	switch {
	case errors.As(err, &up):
		writeError(w, up.Status, up.Type, up.Code, up.Message, up.RetryAfter())
	case errors.Is(err, sim.ErrReset):
		// No answer, the connection closed: what a reset looks like to the
		// caller. net/http closes the connection on this panic.
		panic(http.ErrAbortHandler)
	default:
		// The caller's context ended (a timeout draw, or it gave up): it is
		// gone, so nothing it could read is left to say.
		writeError(w, 499, "server_error", "client_closed", "the caller went away", 0)
	}
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string, retryAfter time.Duration) {
	if retryAfter > 0 {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
	_, _ = w.Write(append(b, '\n'))
}
