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

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/providers/sim"
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
	chatapi.WriteError(w, chatapi.InvalidAPIKey.New("missing or wrong API key"))
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
		chatapi.WriteError(w, chatapi.RequestTooLarge.New("request body too large or unreadable"))
		return
	}
	chat, err := chatapi.Parse(body)
	if err != nil {
		chatapi.WriteError(w, err.(*chatapi.Error)) // Parse's errors are all *chatapi.Error
		return
	}
	req := llm.Request{Chat: chat, Model: chat.Model}
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
	events := chatapi.NewEventStream(w, 0)
	_, err = h.p.Stream(r.Context(), req, func(c llm.Chunk) error { return events.Send(c.Raw) })
	switch {
	case err != nil && !events.Started():
		fail(w, err)
	case err != nil:
		// After the 200 an upstream can only stop; a real one drops the
		// connection, so this one does too.
		panic(http.ErrAbortHandler)
	default:
		_ = events.Done()
	}
}

// fail answers a call sim failed, as a real upstream would.
func fail(w http.ResponseWriter, err error) {
	var up *chatapi.UpstreamError
	switch {
	case errors.As(err, &up):
		chatapi.WriteError(w, &chatapi.Error{Status: up.Status, Type: chatapi.ErrorType(up.Type), Code: up.Code, Message: up.Message, RetryAfter: up.RetryAfter()})
	case errors.Is(err, sim.ErrReset):
		// No answer, the connection closed: what a reset looks like to the
		// caller. net/http closes the connection on this panic.
		panic(http.ErrAbortHandler)
	default:
		// The caller's context ended (a timeout draw, or it gave up): it is
		// gone, so nothing it could read is left to say.
		chatapi.WriteError(w, chatapi.ClientClosedRequest.New("the caller went away"))
	}
}
