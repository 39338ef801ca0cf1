package httpapi

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/production-go/gateway-lab/gateway/tenant"
)

// ContinuationHeader, set to "off", asks that a stream which breaks after
// its first byte end with an error event rather than be continued on
// another of its route's targets (see router.Stream). A header, not a body
// field: the body goes upstream as sent, and an upstream may refuse a
// field it does not know.
const ContinuationHeader = "X-Gateway-Continuation"

// chatCompletions is POST /v1/chat/completions: the caller's request goes
// to the route's targets as sent (only "model" rewritten per target), and
// the answer comes back as the upstream sent it.
func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id, r, buf, release, ok := s.accept(w, r)
	if !ok {
		return
	}
	var served error // the router's answer, for the gate (see accept)
	defer func() { release(served) }()
	chat, err := chatapi.Parse(buf.Bytes())
	if err != nil {
		s.writeError(w, err.(*chatapi.Error)) // Parse's errors are all *chatapi.Error
		return
	}
	req := router.Request{Tenant: id.Key, Chat: chat}
	switch v := r.Header.Get(ContinuationHeader); {
	case v == "", strings.EqualFold(v, "on"):
	case strings.EqualFold(v, "off"):
		req.NoContinue = true
	default:
		s.writeError(w, chatapi.InvalidHeader.New(fmt.Sprintf("%s must be on or off", ContinuationHeader)).At(ContinuationHeader))
		return
	}
	if !s.opts.Router.Resolve(chat.Model, &req) {
		s.writeError(w, chatapi.ModelNotFound.New(fmt.Sprintf("the model %q does not exist here; GET /v1/models lists the models this gateway serves", chat.Model)).At("model"))
		return
	}
	r, done, ok := s.admit(w, r, id, tenant.Admission{Model: chat.Model, BodyBytes: buf.Len(), MaxTokens: chat.MaxTokens, Choices: chat.Choices, MediaParts: chat.MediaParts, Stream: chat.Stream}, &req)
	if !ok {
		return
	}
	if chat.Stream {
		u, err := s.streamChat(w, r, req)
		served = err
		settled(w, done, u, err)
		return
	}
	resp, err := s.opts.Router.Generate(r.Context(), req)
	served = err
	defer settled(w, done, resp.Usage, err)
	traceChat(r.Context(), cmp.Or(chat.Model, router.AutoModel), resp)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if own := s.overhead(start, resp); s.opts.OverheadHeader {
		w.Header().Set("X-Gateway-Overhead-Ms", strconv.FormatFloat(ms(own), 'f', 3, 64))
	}
	s.writeDeadline(w)
	h := w.Header()
	h["Content-Type"] = jsonContentType // shared and read-only: net/http only reads it
	h["Content-Length"] = []string{strconv.Itoa(len(resp.Raw))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(resp.Raw)
}

var jsonContentType = []string{"application/json"}

// overhead records and returns the gateway's own share of an answered
// request's time: what is left after queue wait, upstream calls and
// backoffs. A non-streamed answer may say it in a header, if asked
// (Options.OverheadHeader); a stream's headers are gone by then.
func (s *Server) overhead(start time.Time, resp router.Response) time.Duration {
	own := max(time.Since(start)-resp.QueueWait-resp.Upstream-resp.Backoff, 0)
	s.opts.Metrics.Overhead(own)
	return own
}

// streamChat sends the answer as server-sent events, each upstream chunk
// as it came. Until the first chunk an error still gets a proper status
// and JSON body; after it, only an error event, and never a [DONE] that
// would make a cut answer look complete.
func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, req router.Request) (*llm.Usage, error) {
	st := &sseWriter{events: chatapi.NewEventStream(w, s.opts.WriteTimeout), metrics: s.opts.Metrics, begun: time.Now()}
	resp, err := s.opts.Router.Stream(r.Context(), req, s.opts.Stream, st.chunk)
	traceChat(r.Context(), cmp.Or(req.Chat.Model, router.AutoModel), resp)
	defer st.timeEnd()
	switch {
	case err != nil && !st.events.Started():
		s.fail(w, r, err)
	case err != nil:
		s.cutStream(w, r, st, err)
	default:
		s.overhead(st.begun, resp)
		_ = st.events.Done()
	}
	return resp.Usage, err
}

// cutStream ends a stream that failed after its first chunk: an error
// event, no [DONE], and the outcome recorded as what it was — the client
// gone (499), the server shutting down (503), or the upstream failing (502
// or 504) — not as the 200 that went out first.
func (s *Server) cutStream(w http.ResponseWriter, r *http.Request, st *sseWriter, err error) {
	cause := context.Cause(r.Context())
	e := classify(err, cause)
	if rec, ok := w.(*recorder); ok {
		rec.outcome = e.Status
	}
	s.opts.Logger.LogAttrs(r.Context(), slog.LevelWarn, "stream cut after the first byte",
		slog.Int("outcome", e.Status), slog.String("code", e.Code), slog.String("error", logSafe(err)))
	cut := cutOf(err, cause)
	s.opts.Metrics.StreamCut(cut)
	if cut != telemetry.CutClientClosed {
		_ = st.events.Send(e.JSON())
	}
}

// sseWriter relays one streamed answer and times it as the client sees it.
type sseWriter struct {
	events           *chatapi.EventStream
	metrics          *telemetry.Metrics
	begun, lastChunk time.Time // the stream's start at the gateway; the last chunk out
	firstChunk       time.Time
}

// chunk is the router's emit.
func (st *sseWriter) chunk(c llm.Chunk) error {
	now := time.Now()
	if st.firstChunk.IsZero() {
		st.firstChunk = now
		st.metrics.FirstChunk(now.Sub(st.begun))
	} else {
		st.metrics.ChunkGap(now.Sub(st.lastChunk))
	}
	st.lastChunk = now
	return st.events.Send(c.Raw)
}

// timeEnd records how long the stream ran after its first chunk.
func (st *sseWriter) timeEnd() {
	if !st.firstChunk.IsZero() {
		st.metrics.StreamDuration(time.Since(st.firstChunk))
	}
}
