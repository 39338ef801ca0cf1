// Package httpapi is the gateway's HTTP surface: an OpenAI-compatible
// /v1/chat/completions (streaming and not), /v1/models, the lesson's own
// /v1/generate, health and readiness, and Prometheus metrics.
//
// It only wires HTTP to the router. A chat request is forwarded as its
// caller sent it (see package chatapi) and an upstream's answer comes back
// as it came; bodies are size- and time-limited; errors are JSON in the
// OpenAI error shape with the status the failure deserves; logs carry no
// prompts and no upstream error text.
package httpapi

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/policy"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/telemetry"
	"github.com/production-go/gateway-lab/gateway/tenant"
	drain "github.com/production-go/gateway-lab/solutions/05-drain"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// MaxTenantBytes is the longest tenant id accepted; a longer one is refused
// rather than cut, since two cut ids could collide into one quota.
const MaxTenantBytes = 64

// Options configures a Server.
type Options struct {
	Router  *router.Router
	Drainer *drain.Drainer
	// Gate holds each caller to its tenant's rate and requests in flight
	// before its body is read (tenant.Gate). nil: a gate with no rate and
	// no cap but each identity's own (tenant.Identity.MaxInFlight).
	Gate *tenant.Gate
	// Metrics records the HTTP layer's telemetry; nil: a private registry's,
	// which nobody reads.
	Metrics      *telemetry.Metrics
	MetricsPage  http.Handler // serves /metrics; nil: not served here (e.g. on an admin listener)
	Logger       *slog.Logger
	MaxBodyBytes int64 // request bodies larger than this get 413; default 1 MiB
	// BodyTimeout bounds reading a request body, so a client that sends it
	// a byte at a time cannot hold a connection and a drain slot; default 10 s.
	BodyTimeout time.Duration
	// WriteTimeout bounds each write of a streamed answer, so a client that
	// stops reading cannot hold a slot forever; default 30 s.
	WriteTimeout time.Duration
	Stream       router.StreamLimits
	TenantHeader string // default "X-Tenant-ID"
	// Identify, if set, replaces the tenant header: it returns who is asking,
	// or an error to send (secure_app verifies a token here).
	Identify func(r *http.Request) (tenant.Identity, *chatapi.Error)
	// Admit, if set, runs after a request is parsed and routed and before
	// the gateway sees it (secure_app checks the tier's policy, reserves
	// tokens and takes a shared in-flight lease here). It returns the
	// context to serve the request under and a pass: its Done, which the
	// server calls once when the request ends — with the upstream's usage
	// (nil if none came) and the router's error (nil on success; one
	// wrapping router.ErrAfterFirstByte when a stream was cut after output)
	// — and its Meter, which the server puts on the router.Request; or an
	// error to send instead.
	Admit func(ctx context.Context, id tenant.Identity, a tenant.Admission) (context.Context, tenant.Pass, *chatapi.Error)
	// CallerLimited, if set, hears of each request refused for one of its
	// caller's own limits, which the identity carries and the server
	// enforces before Admit runs: policy.LimitPromptBytes
	// (tenant.Identity.MaxBodyBytes) or policy.LimitInFlight
	// (tenant.Identity.MaxInFlight). secure_app counts them as tier refusals.
	CallerLimited func(id tenant.Identity, limit policy.Limit)
	// Tracer, if set, records a server span per request — joined to the
	// caller's trace when it sends a W3C traceparent — under which the
	// gateway's and the upstream call's spans hang. nil records nothing.
	Tracer trace.TracerProvider
	// OverheadHeader adds X-Gateway-Overhead-Ms to non-streamed answers: the
	// time the gateway itself took (total minus queue wait, upstream calls
	// and backoffs). Off by default; for debugging.
	OverheadHeader bool
}

// Server serves the gateway over HTTP.
type Server struct {
	opts   Options
	tracer trace.Tracer // nil when Options.Tracer is
	mux    *http.ServeMux
	bodies sync.Pool // *bytes.Buffer for request bodies
	// tenantKey is Options.TenantHeader in canonical form, so reading it
	// does not canonicalize (allocate) the name on every request.
	tenantKey string
}

// New builds the routes.
func New(opts Options) *Server {
	if opts.TenantHeader == "" {
		opts.TenantHeader = "X-Tenant-ID"
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = 10 * time.Second
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Metrics == nil {
		opts.Metrics = telemetry.New(prometheus.NewRegistry())
	}
	if opts.Gate == nil {
		opts.Gate, _ = tenant.NewGate(tenant.GateConfig{Observer: opts.Metrics}) // a valid config: no error
	}
	s := &Server{opts: opts, mux: http.NewServeMux(), tenantKey: textproto.CanonicalMIMEHeaderKey(opts.TenantHeader)}
	if opts.Tracer != nil {
		s.tracer = opts.Tracer.Tracer("github.com/production-go/gateway-lab/gateway/httpapi")
	}
	s.bodies.New = func() any { return new(bytes.Buffer) }
	api := func(route string, h http.HandlerFunc) {
		s.mux.Handle(route, s.observe(route, s.admitting(h)))
	}
	api("POST /v1/chat/completions", s.chatCompletions)
	api("POST /v1/generate", s.generate)
	s.mux.Handle("GET /v1/models", s.observe("GET /v1/models", http.HandlerFunc(s.models)))
	// The same paths with another method, and every other path, answer in
	// the OpenAI error shape too (the mux's own answers are plain text).
	for path, allow := range map[string]string{"/v1/chat/completions": "POST", "/v1/generate": "POST", "/v1/models": "GET, HEAD"} {
		s.mux.Handle(path, s.observe("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			s.refuseBody(w, chatapi.MethodNotAllowed.New(r.Method+" is not allowed on "+path+"; use "+allow))
		})))
	}
	s.mux.Handle("/", s.observe("other", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.refuseBody(w, chatapi.NotFound.New("no such endpoint; this gateway serves POST /v1/chat/completions, POST /v1/generate and GET /v1/models"))
	})))
	s.mux.Handle("GET /healthz", opts.Drainer.Liveness())
	s.mux.Handle("GET /readyz", opts.Drainer.Readiness())
	if opts.MetricsPage != nil {
		s.mux.Handle("GET /metrics", opts.MetricsPage)
	}
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// recorder remembers the status a handler wrote, and the outcome it
// reports for metrics and logs when that differs (a stream that failed
// after its 200 went out).
type recorder struct {
	http.ResponseWriter
	status  int
	outcome int    // the status metrics and logs record; 0: status (telemetry.StatusClientClosed: the client left)
	tenant  string // who asked, once known
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

// Unwrap lets http.ResponseController reach the real writer (Flush,
// deadlines).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// observe measures and logs each request: route, status, duration, tenant.
// Never the prompt, the answer or an upstream's error text.
func (s *Server) observe(route string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := ""
		if v := r.Header["X-Request-Id"]; len(v) > 0 { // canonical: Get would build the key per request
			id = v[0]
		}
		if id == "" || len(id) > 128 || !printable(id) {
			id = chatapi.NewID()
		}
		w.Header()["X-Request-Id"] = []string{id} // the canonical key: Set would build it per request
		rec := &recorder{ResponseWriter: w}
		r, span := s.serverSpan(r, route, id)
		next.ServeHTTP(rec, r)
		status := rec.outcome
		if status == 0 {
			status = rec.status
		}
		if status == 0 {
			status = http.StatusOK
		}
		took := time.Since(start)
		endServerSpan(span, status)
		s.opts.Metrics.Request(route, status, took)
		s.opts.Logger.LogAttrs(r.Context(), slog.LevelInfo, "request",
			slog.String("route", route), slog.Int("status", status),
			slog.Float64("duration_ms", ms(took)), slog.String("tenant", rec.tenant),
			slog.String("request_id", id))
	})
}

// admitting counts the request as in flight for the drain, and refuses it
// with the OpenAI error shape once the server is draining.
func (s *Server) admitting(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leave, err := s.opts.Drainer.Enter()
		if err != nil {
			w.Header().Set("Connection", "close")
			s.writeError(w, errDraining())
			return
		}
		defer leave()
		next(w, r)
	})
}

// identify names the tenant, from Options.Identify or the tenant header.
// A request without the header is anonymous, under a key no header value
// can produce; a header that is too long or not printable is refused.
func (s *Server) identify(w http.ResponseWriter, r *http.Request) (tenant.Identity, *http.Request, bool) {
	var (
		id  tenant.Identity
		err *chatapi.Error
	)
	if s.opts.Identify != nil {
		id, err = s.opts.Identify(r)
	} else {
		id, err = s.headerTenant(r)
	}
	if err != nil {
		s.refuseBody(w, err)
		return tenant.Identity{}, r, false
	}
	if rec, ok := w.(*recorder); ok {
		rec.tenant = id.Tenant
	}
	return id, r.WithContext(tenant.WithIdentity(r.Context(), id)), true
}

// admit runs Options.Admit, if set. The caller must call done (never nil)
// with the answer's usage when the request ends; done also counts the
// tokens.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, id tenant.Identity, a tenant.Admission, req *router.Request) (*http.Request, tenant.Done, bool) {
	hook := func(*llm.Usage, error) {}
	if s.opts.Admit != nil {
		a.Model = cmp.Or(a.Model, router.AutoModel)
		ctx, pass, err := s.opts.Admit(r.Context(), id, a)
		if err != nil {
			s.writeError(w, err)
			return r, nil, false
		}
		if pass.Done != nil {
			hook = pass.Done
		}
		req.Meter = pass.Meter
		r = r.WithContext(ctx)
	}
	return r, func(u *llm.Usage, err error) {
		s.opts.Metrics.Tokens(u)
		hook(u, err)
	}, true
}

func (s *Server) headerTenant(r *http.Request) (tenant.Identity, *chatapi.Error) {
	values := r.Header[s.tenantKey]
	bad := func() *chatapi.Error {
		return chatapi.InvalidTenant.New(s.opts.TenantHeader + " must be one header of at most " + strconv.Itoa(MaxTenantBytes) + " printable ASCII characters")
	}
	if len(values) > 1 {
		return tenant.Identity{}, bad() // which of two tenants to charge is not ours to guess
	}
	t := ""
	if len(values) == 1 {
		t = strings.Trim(values[0], " \t") // ASCII space only: a no-break space is not "nothing"
	}
	switch {
	case t == "":
		return tenant.Identity{Key: "anonymous"}, nil
	case len(t) > MaxTenantBytes || !printable(t):
		return tenant.Identity{}, bad()
	}
	return tenant.Identity{Key: "tenant:" + t, Tenant: t}, nil
}

// printable reports whether s is visible ASCII: no spaces, controls or
// bytes a log line or a Redis key would trip over.
func printable(s string) bool {
	for i := range len(s) {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// accept is what every POST does first: name the caller, hold it to its
// tenant's in-flight cap and rate (the tenant gate, Options.Gate), then read
// the body — so the cheapest refusals come before a byte of the body is
// read or parsed. On false the response is written; on true the caller
// calls release once when the request ends, with the router's error (an
// ErrOverloaded request did no work, and its rate token comes back), which
// gives back the buffer and the caller's place.
func (s *Server) accept(w http.ResponseWriter, r *http.Request) (id tenant.Identity, _ *http.Request, _ *bytes.Buffer, release func(error), ok bool) {
	id, r, ok = s.identify(w, r)
	if !ok {
		return tenant.Identity{}, r, nil, nil, false
	}
	leave, err := s.opts.Gate.Enter(r.Context(), id)
	if err != nil {
		s.gateRefused(w, r, id, err)
		return tenant.Identity{}, r, nil, nil, false
	}
	buf, ok := s.readBody(w, r, id)
	if !ok {
		leave(false)
		return tenant.Identity{}, r, nil, nil, false
	}
	return id, r, buf, func(err error) { leave(errors.Is(err, router.ErrOverloaded)); s.done(buf) }, true
}

// gateRefused answers a request the tenant gate refused, its body unread
// (see refuseBody). A cap that is the identity's own (its tier's) is the
// caller's limit, and CallerLimited hears of it.
func (s *Server) gateRefused(w http.ResponseWriter, r *http.Request, id tenant.Identity, err error) {
	var rf *tenant.Refusal
	if errors.As(err, &rf) && rf.Limit == policy.LimitInFlight && rf.Own {
		s.callerLimited(id, policy.LimitInFlight)
	}
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now()) // see refuseBody
	s.fail(w, r, err)
}

// readBody reads a size- and time-limited body into a pooled buffer: at
// most Options.MaxBodyBytes, or the caller's own smaller limit
// (tenant.Identity.MaxBodyBytes). It writes the error response itself (413, 408,
// 400) and reports whether it succeeded; the caller gives the buffer back
// with s.done.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, id tenant.Identity) (*bytes.Buffer, bool) {
	limit := s.opts.MaxBodyBytes
	if id.MaxBodyBytes > 0 && id.MaxBodyBytes < limit {
		limit = id.MaxBodyBytes
	}
	if r.ContentLength > limit {
		// Declared too big: say so now, without waiting for (or asking for,
		// with 100 Continue) a body we would refuse anyway.
		s.refuseTooLarge(w, r, id, limit, r.ContentLength)
		return nil, false
	}
	if enc := r.Header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		s.refuseBody(w, chatapi.UnsupportedEncoding.New("request bodies are read as sent; Content-Encoding "+strconv.Quote(enc)+" is not supported"))
		return nil, false
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	buf := s.bodies.Get().(*bytes.Buffer)
	buf.Reset()
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		// Clear the deadline: net/http reads the connection in the
		// background to notice a client that leaves, and an expired
		// deadline would look like one. (On the error paths below it
		// stays, so nothing waits on the rest of a body we refused.)
		_ = rc.SetReadDeadline(time.Time{})
		return buf, true
	}
	s.done(buf)
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		s.refuseTooLarge(w, r, id, tooBig.Limit, -1)
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.refuseBody(w, chatapi.BodyTimeout.New("the request body did not arrive within "+s.opts.BodyTimeout.String()))
	default:
		s.refuseBody(w, chatapi.InvalidBody.New("the request body could not be read"))
	}
	return nil, false
}

// tooLarge is the refusal of a body over limit: the server's own limit, or
// the caller's (its tier's) when that is the smaller.
func (s *Server) tooLarge(id tenant.Identity, limit int64) *chatapi.Error {
	if id.MaxBodyBytes > 0 && id.MaxBodyBytes == limit && limit < s.opts.MaxBodyBytes {
		s.callerLimited(id, policy.LimitPromptBytes)
		return chatapi.PromptTooLarge.New(fmt.Sprintf("the request is over %d bytes, the most the %s tier allows", limit, cmp.Or(id.Tier, "caller's")))
	}
	return chatapi.RequestTooLarge.New("the request body is larger than " + strconv.FormatInt(limit, 10) + " bytes")
}

func (s *Server) callerLimited(id tenant.Identity, limit policy.Limit) {
	if s.opts.CallerLimited != nil {
		s.opts.CallerLimited(id, limit)
	}
}

// refuseTooLarge answers a body over limit (declared, when known, or -1).
// Over the server's own limit, or with Expect: 100-continue (the client
// has sent nothing yet), it is refused unread. Over only the caller's
// smaller limit — a tier's prompt size, which an honest client may not
// know — the rest of the body, up to the server's limit and within the
// body timeout, is read and thrown away before the refusal is sent:
// closing a connection with unread data resets it, and a client still
// sending would get a broken pipe instead of the 413. Nothing of it is
// kept or parsed.
func (s *Server) refuseTooLarge(w http.ResponseWriter, r *http.Request, id tenant.Identity, limit, declared int64) {
	e := s.tooLarge(id, limit)
	if limit >= s.opts.MaxBodyBytes || declared > s.opts.MaxBodyBytes || r.Header.Get("Expect") != "" {
		s.refuseBody(w, e)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, s.opts.MaxBodyBytes))
	w.Header().Set("Connection", "close")
	s.writeError(w, e)
}

// refuseBody answers a request whose body will not be read, and closes the
// connection after. net/http would otherwise read up to 256 KiB of the
// unread body once the handler returns (to reuse the connection), waiting
// as long as the client cares to dribble it: an expired read deadline makes
// that read fail at once.
func (s *Server) refuseBody(w http.ResponseWriter, e *chatapi.Error) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	s.writeError(w, e)
}

// done gives a body buffer back to the pool, unless it grew past the body
// limit's worth (a pool of huge buffers is a leak by another name).
func (s *Server) done(buf *bytes.Buffer) {
	if int64(buf.Cap()) <= s.opts.MaxBodyBytes+bytes.MinRead {
		s.bodies.Put(buf)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
