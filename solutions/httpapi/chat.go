package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/internal/chatapi"
)

// chatCompletions is POST /v1/chat/completions: the caller's request goes
// to the route's targets as sent (only "model" rewritten per target), and
// the answer comes back as the upstream sent it.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id, r, buf, ok := s.accept(w, r)
	if !ok {
		return
	}
	defer s.done(buf)
	chat, err := chatapi.Parse(buf.Bytes())
	if err != nil {
		s.writeError(w, err.(*chatapi.Error)) // Parse's errors are all *chatapi.Error
		return
	}
	req := gateway.Request{Tenant: id.Key, Chat: chat}
	if e := s.route(chat.Model, &req); e != nil {
		s.writeError(w, e)
		return
	}
	r, done, ok := s.admit(w, r, id, Admission{Model: chat.Model, BodyBytes: buf.Len(), MaxTokens: chat.MaxTokens, Stream: chat.Stream})
	if !ok {
		return
	}
	if chat.Stream {
		done(s.streamChat(w, r, req, chat.IncludeUsage))
		return
	}
	resp, err := s.opts.Gateway.Generate(r.Context(), req)
	done(resp.Usage, err)
	traceChat(r.Context(), modelOr(chat.Model, AutoModel), resp)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	body := resp.Raw
	if body == nil { // a provider that answers in text: frame it as an upstream would
		u := usageOf(resp.Usage, chat.Text(), resp.Text)
		body = chatapi.NewFrame(modelOr(resp.Model, chat.Model)).Completion(resp.Text, nil, "stop", &u)
	}
	s.overhead(w, start, resp)
	s.writeDeadline(w)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// route maps a public model name to the request: "auto" (or none) means any
// healthy provider; a route's name means its targets, in order; a
// provider's name pins it. Anything else is 404 model_not_found, as OpenAI
// answers.
func (s *Server) route(model string, req *gateway.Request) *chatapi.Error {
	if model == "" || model == AutoModel {
		return nil
	}
	if rt, ok := s.routes[model]; ok {
		req.Route, req.FallbackOn = rt.Targets, rt.FallbackOn
		return nil
	}
	if s.opts.Gateway.TargetState(gateway.Target{Provider: model}) != "" {
		req.Provider = model
		return nil
	}
	return &chatapi.Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "model_not_found", Param: "model",
		Message: fmt.Sprintf("the model %q does not exist here; GET /v1/models lists the models this gateway serves", model)}
}

// overhead records the gateway's own share of a request's time — what is
// left after queue wait, upstream calls and backoffs — and, if asked, says
// it in a header.
func (s *Server) overhead(w http.ResponseWriter, start time.Time, resp gateway.Response) {
	own := max(time.Since(start)-resp.QueueWait-resp.Upstream-resp.Backoff, 0)
	if s.opts.Metrics != nil {
		s.opts.Metrics.overhead.Observe(own.Seconds())
	}
	if s.opts.OverheadHeader {
		w.Header().Set("X-Gateway-Overhead-Ms", strconv.FormatFloat(ms(own), 'f', 3, 64))
	}
}

// streamChat sends the answer as server-sent events. Until the first chunk
// an error still gets a proper status and JSON body; after it, only an
// error event, and never a [DONE] that would make a cut answer look
// complete. An upstream's chunks go out as they came; a text provider's
// are framed here, one id and one model for the whole answer.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, req gateway.Request, includeUsage bool) (*gateway.Usage, error) {
	start := time.Now()
	st := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.opts.WriteTimeout, model: req.Chat.Model,
		metrics: s.opts.Metrics, begun: start}
	resp, err := s.opts.Gateway.Stream(r.Context(), req, s.opts.Stream, st.chunk)
	traceChat(r.Context(), modelOr(req.Chat.Model, AutoModel), resp)
	defer st.timeEnd()
	switch {
	case err != nil && !st.started:
		s.fail(w, r, err)
	case err != nil:
		s.cutStream(w, r, st, err)
	default:
		if s.opts.Metrics != nil {
			s.opts.Metrics.overhead.Observe(max(time.Since(start)-resp.QueueWait-resp.Upstream-resp.Backoff, 0).Seconds())
		}
		st.finish(resp, req.Chat, includeUsage)
	}
	return resp.Usage, err
}

// cutStream ends a stream that failed after its first chunk: an error
// event, no [DONE], and the outcome recorded as what it was — the client
// gone (499), the server shutting down (503), or the upstream failing (502
// or 504) — not as the 200 that went out first.
func (s *Server) cutStream(w http.ResponseWriter, r *http.Request, st *sseWriter, err error) {
	e := s.classify(err, context.Cause(r.Context()))
	if rec, ok := w.(*recorder); ok {
		rec.outcome = e.Status
	}
	s.opts.Logger.LogAttrs(r.Context(), slog.LevelWarn, "stream cut after the first byte",
		slog.Int("outcome", e.Status), slog.String("code", e.Code), slog.String("error", logSafe(err)))
	if s.opts.Metrics != nil {
		reason := "upstream"
		switch e.Code {
		case "client_closed":
			reason = "client_closed"
		case errDraining.Code:
			reason = "shutdown"
		}
		s.opts.Metrics.streamCut(reason)
	}
	if e.Status != statusClientClosed {
		_ = st.event(e.JSON())
	}
}

// sseWriter writes one streamed answer.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	model   string // the public name asked for, until a chunk names the upstream's

	started bool
	raw     bool // the provider sent OpenAI chunks: nothing to frame at the end
	frame   *chatapi.Frame
	text    strings.Builder

	metrics          *Metrics
	begun, lastChunk time.Time // the stream's start at the gateway; the last chunk out
	firstChunk       time.Time
}

// timeChunk records time to first chunk and the gap since the last one.
func (st *sseWriter) timeChunk() {
	if st.metrics == nil {
		return
	}
	now := time.Now()
	if st.firstChunk.IsZero() {
		st.firstChunk = now
		st.metrics.firstChunk.Observe(now.Sub(st.begun).Seconds())
	} else {
		st.metrics.chunkGap.Observe(now.Sub(st.lastChunk).Seconds())
	}
	st.lastChunk = now
}

// timeEnd records how long the stream ran after its first chunk.
func (st *sseWriter) timeEnd() {
	if st.metrics != nil && !st.firstChunk.IsZero() {
		st.metrics.streamTime.Observe(time.Since(st.firstChunk).Seconds())
	}
}

func (st *sseWriter) start() {
	if st.started {
		return
	}
	st.started = true
	h := st.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	st.w.WriteHeader(http.StatusOK)
}

// chunk is the gateway's emit.
func (st *sseWriter) chunk(c gateway.Chunk) error {
	st.start()
	st.timeChunk()
	st.text.WriteString(c.Text)
	if c.Raw != nil {
		st.raw = true
		return st.event(c.Raw)
	}
	if st.frame == nil {
		f := chatapi.NewFrame(modelOr(c.Model, st.model))
		st.frame = &f
		empty := ""
		if err := st.event(f.Chunk(chatapi.Delta{Role: "assistant", Content: &empty}, "")); err != nil {
			return err
		}
	}
	return st.event(st.frame.Chunk(chatapi.Delta{Content: &c.Text}, ""))
}

// event writes one "data:" event and flushes it, within the write timeout.
func (st *sseWriter) event(data []byte) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(st.timeout))
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, '\n', '\n')
	if _, err := st.w.Write(buf); err != nil {
		return err
	}
	return st.rc.Flush()
}

// finish ends a complete stream: a text provider's last chunk (and usage,
// if asked for), then [DONE].
func (st *sseWriter) finish(resp gateway.Response, chat *chatapi.Request, includeUsage bool) {
	st.start()
	if !st.raw {
		if st.frame == nil {
			f := chatapi.NewFrame(modelOr(resp.Model, st.model))
			st.frame = &f
		}
		if st.event(st.frame.Chunk(chatapi.Delta{}, "stop")) != nil {
			return
		}
		if includeUsage && st.event(st.frame.UsageChunk(usageOf(resp.Usage, chat.Text(), st.text.String()))) != nil {
			return
		}
	}
	_ = st.event([]byte("[DONE]"))
}

// usageOf is the upstream's own token counts when it reported them, and
// otherwise an estimate by words (the simulated providers have no tokenizer).
func usageOf(u *gateway.Usage, prompt, answer string) chatapi.Usage {
	if u != nil {
		return chatapi.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	}
	p, c := len(strings.Fields(prompt)), len(strings.Fields(answer))
	return chatapi.Usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c}
}

func modelOr(model, fallback string) string {
	if model != "" {
		return model
	}
	return fallback
}
