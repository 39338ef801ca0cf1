// Package httpapi is the gateway's HTTP surface: an OpenAI-compatible
// /v1/chat/completions (streaming and not), /v1/models, the lesson's own
// /v1/generate, health and readiness, and Prometheus metrics.
//
// It only wires HTTP to the gateway: bodies are size-limited and strictly
// decoded, errors are JSON in the OpenAI error shape with the status the
// failure deserves, and logs carry no prompts.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
)

// AutoModel is the public model name that means "any healthy provider".
const AutoModel = "auto"

// statusClientClosed is logged (never sent) when the client went away.
const statusClientClosed = 499

// Options configures a Server.
type Options struct {
	Gateway      *gateway.Gateway
	Drainer      *drain.Drainer
	Metrics      *Metrics
	MetricsPage  http.Handler // serves /metrics
	Logger       *slog.Logger
	MaxBodyBytes int64 // request bodies larger than this get 413
	Stream       gateway.StreamLimits
	TenantHeader string // default "X-Tenant-ID"
	// Routes are public model names, each an ordered list of (provider,
	// upstream model) targets: the primary first, then fallbacks. "auto"
	// (every provider in priority order) and each provider's own name
	// (pinned, no fallback) are always there too.
	Routes []Route
}

// Route is one public model name and the targets behind it.
type Route struct {
	Name    string
	Targets []gateway.Target
}

// Server serves the gateway over HTTP.
type Server struct {
	opts Options
	mux  *http.ServeMux
}

// New builds the routes.
func New(opts Options) *Server {
	if opts.TenantHeader == "" {
		opts.TenantHeader = "X-Tenant-ID"
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, mux: http.NewServeMux()}
	api := func(route string, h http.HandlerFunc) {
		s.mux.Handle(route, s.observe(route, opts.Drainer.Middleware(h)))
	}
	api("POST /v1/chat/completions", s.chatCompletions)
	api("POST /v1/generate", s.generate)
	s.mux.Handle("GET /v1/models", s.observe("GET /v1/models", http.HandlerFunc(s.models)))
	s.mux.Handle("GET /healthz", opts.Drainer.Liveness())
	s.mux.Handle("GET /readyz", opts.Drainer.Readiness())
	if opts.MetricsPage != nil {
		s.mux.Handle("GET /metrics", opts.MetricsPage)
	}
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// recorder remembers the status a handler wrote, for metrics and logs.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the real writer (Flush).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// observe measures and logs each request: route, status, duration. Never
// the prompt or the answer.
func (s *Server) observe(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get("X-Request-ID")
		if id == "" || len(id) > 128 {
			id = newID()
		}
		w.Header().Set("X-Request-ID", id)
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		if r.Context().Err() != nil && status < 400 {
			status = statusClientClosed
		}
		took := time.Since(start)
		if s.opts.Metrics != nil {
			s.opts.Metrics.observeRequest(route, status, took)
		}
		s.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("route", route), slog.Int("status", status),
			slog.Float64("duration_ms", ms(took)), slog.String("tenant", s.tenant(r)),
			slog.String("request_id", id))
	})
}

func (s *Server) tenant(r *http.Request) string {
	t := strings.TrimSpace(r.Header.Get(s.opts.TenantHeader))
	if t == "" {
		return "anonymous"
	}
	if len(t) > 64 {
		t = t[:64]
	}
	return t
}

// decode reads a size-limited, strictly typed JSON body into v. It writes
// the error response itself and reports whether decoding succeeded.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if dec.More() {
			err = errors.New("unexpected data after the JSON object")
		} else if _, extra := dec.Token(); extra != io.EOF {
			err = errors.New("unexpected data after the JSON object")
		}
	}
	if err == nil {
		return true
	}
	var tooBig *http.MaxBytesError
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "request_too_large", "",
			fmt.Sprintf("request body is larger than %d bytes", tooBig.Limit))
	case errors.As(err, &syntax):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "",
			fmt.Sprintf("malformed JSON at byte %d: %v", syntax.Offset, err))
	case errors.As(err, &typeErr):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_type", typeErr.Field,
			fmt.Sprintf("field %q must be %s, not %s", typeErr.Field, typeErr.Type, typeErr.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "unknown_field", field,
			fmt.Sprintf("unknown field %q", field))
	case errors.Is(err, io.EOF):
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "", "request body is empty")
	default:
		writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "", err.Error())
	}
	return false
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if !s.decode(w, r, &req) {
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "missing_messages", "messages", "messages must contain at least one message")
		return
	}
	var prompt strings.Builder
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant", "developer", "tool":
		default:
			writeError(w, http.StatusBadRequest, "invalid_request_error", "invalid_role", fmt.Sprintf("messages[%d].role", i),
				fmt.Sprintf("messages[%d].role %q is not one of system, developer, user, assistant, tool", i, m.Role))
			return
		}
		if i > 0 {
			prompt.WriteByte('\n')
		}
		prompt.WriteString(m.Content)
	}
	if strings.TrimSpace(prompt.String()) == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "empty_prompt", "messages", "messages have no content")
		return
	}
	greq := gateway.Request{Tenant: s.tenant(r), Prompt: prompt.String()}
	if !s.route(w, req.Model, &greq) {
		return
	}
	if req.Stream {
		s.streamChat(w, r, greq, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	resp, err := s.opts.Gateway.Generate(r.Context(), greq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	stop := "stop"
	writeJSON(w, http.StatusOK, chatResponse{
		ID: "chatcmpl-" + newID(), Object: "chat.completion", Created: time.Now().Unix(), Model: resp.Model,
		Choices: []chatChoice{{Message: &chatMessage{Role: "assistant", Content: resp.Text}, FinishReason: &stop}},
		Usage:   usageOf(resp.Usage, greq.Prompt, resp.Text),
	})
}

// route maps a public model name to the request: "auto" (or none) means any
// healthy provider; a route's name means its targets, in order; a
// provider's name pins it.
func (s *Server) route(w http.ResponseWriter, model string, req *gateway.Request) bool {
	if model == "" || model == AutoModel {
		return true
	}
	for _, r := range s.opts.Routes {
		if r.Name == model {
			req.Route = r.Targets
			return true
		}
	}
	for _, p := range s.opts.Gateway.Providers() {
		if p == model {
			req.Provider = p
			return true
		}
	}
	writeError(w, http.StatusBadRequest, "invalid_request_error", "model_not_found", "model",
		fmt.Sprintf("model %q does not exist; GET /v1/models lists them", model))
	return false
}

// streamChat sends the answer as server-sent events. Until the first chunk
// an error still gets a proper status and JSON body; after it, only an error
// event, and never a [DONE] that would make a cut answer look complete.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, req gateway.Request, includeUsage bool) {
	requested := req.Provider // chunks name the requested model; the last one names the model that answered
	if requested == "" {
		requested = AutoModel
	}
	id, created := "chatcmpl-"+newID(), time.Now().Unix()
	rc := http.NewResponseController(w)
	started := false
	var text strings.Builder
	send := func(v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return err
		}
		return rc.Flush()
	}
	resp, err := s.opts.Gateway.Stream(r.Context(), req, s.opts.Stream, func(chunk string) error {
		if !started {
			started = true
			h := w.Header()
			h.Set("Content-Type", "text/event-stream")
			h.Set("Cache-Control", "no-cache")
			h.Set("X-Accel-Buffering", "no")
			w.WriteHeader(http.StatusOK)
		}
		text.WriteString(chunk)
		return send(chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: requested,
			Choices: []chatChoice{{Delta: &chatMessage{Role: "assistant", Content: chunk}}}})
	})
	if err != nil {
		if !started {
			s.fail(w, r, err)
			return
		}
		status, typ, code, msg := classify(err)
		s.opts.Logger.LogAttrs(r.Context(), slog.LevelWarn, "stream failed after the first byte",
			slog.Int("would_be_status", status), slog.String("code", code), slog.String("error", err.Error()))
		_ = send(errorBody{Error: errorDetail{Message: msg, Type: typ, Code: code}})
		return
	}
	stop := "stop"
	final := chatResponse{ID: id, Object: "chat.completion.chunk", Created: created, Model: resp.Model,
		Choices: []chatChoice{{Delta: &chatMessage{}, FinishReason: &stop}}}
	if includeUsage {
		final.Usage = usageOf(resp.Usage, req.Prompt, text.String())
	}
	if send(final) == nil {
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		_ = rc.Flush()
	}
}

func (s *Server) generate(w http.ResponseWriter, r *http.Request) {
	var req generateRequest
	if !s.decode(w, r, &req) {
		return
	}
	if strings.TrimSpace(req.Prompt) == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "missing_prompt", "prompt", "prompt is required")
		return
	}
	resp, err := s.opts.Gateway.Generate(r.Context(), gateway.Request{Tenant: s.tenant(r), Prompt: req.Prompt, Provider: req.Provider})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, generateResponse{Provider: resp.Provider, Model: resp.Model, Text: resp.Text, Attempts: resp.Attempts,
		QueueWaitMS: ms(resp.QueueWait), LatencyMS: ms(resp.Latency)})
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	list := modelList{Object: "list", Data: []modelEntry{{ID: AutoModel, Object: "model", OwnedBy: "gateway"}}}
	for _, r := range s.opts.Routes {
		list.Data = append(list.Data, modelEntry{ID: r.Name, Object: "model", OwnedBy: "gateway"})
	}
	for _, p := range s.opts.Gateway.Providers() {
		list.Data = append(list.Data, modelEntry{ID: p, Object: "model", OwnedBy: p})
	}
	writeJSON(w, http.StatusOK, list)
}

// fail writes the error response a gateway error deserves.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, typ, code, msg := classify(err)
	var rl *gateway.RateLimitError
	if errors.As(err, &rl) {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(rl.RetryAfter.Seconds()))))
	}
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	if status == statusClientClosed {
		return // nobody is listening
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	s.opts.Logger.LogAttrs(r.Context(), level, "request failed", slog.Int("status", status), slog.String("code", code), slog.String("error", err.Error()))
	writeError(w, status, typ, code, "", msg)
}

// statusCoder is implemented by upstream errors that carry an HTTP status.
type statusCoder interface{ StatusCode() int }

// classify maps an error to status, OpenAI error type, code and message.
func classify(err error) (status int, typ, code, msg string) {
	var sc statusCoder
	switch {
	case errors.Is(err, gateway.ErrInvalidRequest), errors.Is(err, gateway.ErrUnknownProvider):
		return http.StatusBadRequest, "invalid_request_error", "invalid_request", err.Error()
	case errors.Is(err, gateway.ErrRateLimited):
		return http.StatusTooManyRequests, "rate_limit_error", "rate_limited", "rate limit exceeded for this tenant; see Retry-After"
	case errors.Is(err, gateway.ErrOverloaded):
		return http.StatusServiceUnavailable, "server_error", "overloaded", "the gateway is at capacity; retry shortly"
	case errors.Is(err, gateway.ErrClosed):
		return http.StatusServiceUnavailable, "server_error", "draining", "the gateway is shutting down; retry on another instance"
	case errors.Is(err, gateway.ErrNoHealthyProvider):
		return http.StatusServiceUnavailable, "server_error", "no_healthy_provider", "no healthy provider is available"
	case errors.As(err, &sc) && sc.StatusCode() >= 400 && sc.StatusCode() < 500 && sc.StatusCode() != http.StatusTooManyRequests:
		return sc.StatusCode(), "invalid_request_error", "upstream_rejected", err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "server_error", "deadline_exceeded", "no provider answered within the deadline"
	case errors.Is(err, context.Canceled):
		return statusClientClosed, "server_error", "client_closed", "the client closed the request"
	}
	return http.StatusBadGateway, "server_error", "upstream_error", "the upstream provider failed"
}

func writeError(w http.ResponseWriter, status int, typ, code, param, msg string) {
	var p *string
	if param != "" {
		p = &param
	}
	writeJSON(w, status, errorBody{Error: errorDetail{Message: msg, Type: typ, Param: p, Code: code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// usageOf passes the upstream's own token counts through when it reported
// them, and otherwise approximates tokens by words (the simulated providers
// have no tokenizer).
func usageOf(u *gateway.Usage, prompt, answer string) *usage {
	if u != nil {
		return &usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	}
	p, c := len(strings.Fields(prompt)), len(strings.Fields(answer))
	return &usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c}
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func codeLabel(code int) string { return strconv.Itoa(code) }
