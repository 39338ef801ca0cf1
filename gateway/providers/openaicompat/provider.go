// Package openaicompat is a provider for any OpenAI-compatible upstream
// (/v1/chat/completions), streaming and not.
//
// It forwards the caller's request as sent — every message, part and
// parameter, known or not — with only "model" set to the target's upstream
// model, and hands the upstream's answer back as it came: the whole body,
// or each stream event's data. It reads just enough of the answer to count
// it (model, usage, finish_reason, the first choice's text).
//
// Each upstream gets one shared http.Client with its own dial, TLS and
// response-header timeouts and a connection pool sized for a gateway; the
// request's context bounds the whole call. Every non-2xx answer is a
// *chatapi.UpstreamError carrying the status, Retry-After and the
// upstream's own error type and code; the gateway decides from those what
// to retry. Redirects off the upstream's host are refused.
package openaicompat

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/providers/spec"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/trace"
)

var (
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("openaicompat: invalid config")
	// ErrTruncated: the stream ended before the answer did — no
	// finish_reason and no [DONE].
	ErrTruncated = errors.New("openaicompat: stream ended before the answer did")
	// ErrMalformed: the upstream sent something that is not the expected JSON.
	ErrMalformed = errors.New("openaicompat: malformed upstream response")
)

// MaxAnswerBytes bounds a whole (non-streamed) answer read from an upstream.
const MaxAnswerBytes = 16 << 20

// Config describes one upstream.
type Config struct {
	Name    string // provider name in the gateway
	BaseURL string // e.g. https://api.example.com/v1
	Model   string // upstream model to ask for
	APIKey  string // sent as a bearer token; read it from the environment, never log it

	DialTimeout           time.Duration // default 3s
	TLSHandshakeTimeout   time.Duration // default 3s
	ResponseHeaderTimeout time.Duration // time to the response headers (first token for streams); default 30s
	MaxIdleConnsPerHost   int           // default 64

	// NoStreamUsage stops asking for a stream's usage on the caller's
	// behalf, for an upstream that refuses "stream_options". By default a
	// stream asks for it (and the usage chunk the caller did not ask for is
	// not passed on), so that what the stream used can be counted.
	NoStreamUsage bool

	// Prefill is how the upstream is asked to continue an answer (a route
	// that declares the target "continue": true sends it the answer so
	// far); "" is chatapi.PrefillAssistant. Set from the spec's prefill=.
	Prefill chatapi.PrefillStyle

	// Probe is how the router checks, in the background, that a target
	// whose breaker opened answers again: ProbeChat (the default) asks the
	// target's model for a one-token completion — a few tokens a probe, at
	// most one probe every -probe-max-interval, and proof that this model
	// answers; ProbeModels lists the upstream's models, which costs nothing
	// but says nothing of one model (a failing model on an upstream that
	// lists it would have its breaker closed by every probe); ProbeOff
	// never probes (the breaker waits out its recovery timeout). Set from
	// probe=.
	Probe ProbeKind

	// Local marks an upstream on this machine or a private network, for
	// development: a service that guards its egress (secure_app) lets it
	// through. Set from the spec's local=true.
	Local bool
	// DialControl, if set, vets every address dialled, after DNS (see
	// package egress); an error refuses the connection.
	DialControl func(network, address string, c syscall.RawConn) error
	// Tracer, if set, records a client span per call and sends its W3C
	// traceparent to the upstream. nil records nothing.
	Tracer trace.TracerProvider
	// OnTiming, if set, is told how long each call took to connect (zero
	// for a pooled connection) and to get the upstream's response headers.
	OnTiming func(Timing)
}

// Timing is where one upstream call's time went before its body.
type Timing struct {
	Provider string
	// Connect is dial plus TLS handshake; 0 when a pooled connection was reused.
	Connect time.Duration
	// Headers is from sending the request to the response headers: the
	// upstream's own queueing and (for a stream) its time to first token.
	Headers time.Duration
}

// Provider calls one OpenAI-compatible upstream.
type Provider struct {
	cfg      Config
	endpoint string
	rt       *http.Transport // see do
	tracer   trace.Tracer    // nil: no spans
	tls      bool            // an https upstream: its calls' timing includes the TLS handshake
	auth     []string        // the Authorization header's value; nil without a key
}

// Header names as net/http keeps them, and the values that never change.
const (
	contentType   = "Content-Type"
	accept        = "Accept"
	authorization = "Authorization"
)

var (
	jsonValue        = []string{"application/json"}
	eventStreamValue = []string{"text/event-stream"}
)

// New validates cfg and builds the upstream's client.
func New(cfg Config) (*Provider, error) {
	u, err := url.Parse(cfg.BaseURL)
	switch {
	case cfg.Name == "":
		return nil, fmt.Errorf("%w: a provider needs a name", ErrInvalidConfig)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return nil, fmt.Errorf("%w: base URL %q must be http(s)://host[/path]", ErrInvalidConfig, cfg.BaseURL)
	case u.User != nil:
		return nil, fmt.Errorf("%w: base URL must not carry credentials; use the API key setting", ErrInvalidConfig)
	case cfg.Model == "":
		return nil, fmt.Errorf("%w: upstream model is required", ErrInvalidConfig)
	}
	defaults(&cfg.DialTimeout, 3*time.Second)
	defaults(&cfg.TLSHandshakeTimeout, 3*time.Second)
	defaults(&cfg.ResponseHeaderTimeout, 30*time.Second)
	if cfg.MaxIdleConnsPerHost <= 0 {
		cfg.MaxIdleConnsPerHost = 64
	}
	transport := &http.Transport{
		Proxy:                 nil, // an upstream is dialled directly: no environment proxy in the path
		DialContext:           (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second, Control: cfg.DialControl}).DialContext,
		TLSHandshakeTimeout:   cfg.TLSHandshakeTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		MaxIdleConns:          cfg.MaxIdleConnsPerHost * 2,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	p := &Provider{cfg: cfg, endpoint: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions", rt: transport, tls: u.Scheme == "https"}
	if cfg.APIKey != "" {
		p.auth = []string{"Bearer " + cfg.APIKey}
	}
	if cfg.Tracer != nil {
		p.tracer = cfg.Tracer.Tracer("github.com/production-go/gateway-lab/gateway/providers/openaicompat")
	}
	return p, nil
}

func defaults(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

// Name is the provider's name.
func (p *Provider) Name() string { return p.cfg.Name }

// Close releases idle connections.
func (p *Provider) Close() { p.rt.CloseIdleConnections() }

// HonoursContext says every call returns promptly once its context ends,
// so the gateway need not run it on a goroutine of its own.
func (p *Provider) HonoursContext() bool { return true }

// ProbeKind is how an upstream is probed (see Config.Probe).
type ProbeKind string

// The probe kinds.
const (
	ProbeChat   ProbeKind = "chat"   // a one-token completion of the target's model (the default)
	ProbeModels ProbeKind = "models" // GET /models
	ProbeOff    ProbeKind = "off"
)

// Probe checks the upstream answers, as Config.Probe says: nil for a 2xx.
func (p *Provider) Probe(ctx context.Context, model string) error {
	var hreq *http.Request
	var err error
	switch p.cfg.Probe {
	case ProbeOff:
		return llm.ErrNoProbe
	case ProbeModels:
		hreq, err = http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(p.endpoint, "/chat/completions")+"/models", nil)
	default:
		body := chatapi.NewRequest("ping", false).WithMaxTokens(1).Upstream(cmp.Or(model, p.cfg.Model), false)
		hreq, err = http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
		if err == nil {
			hreq.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return err
	}
	if p.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	resp, err := p.do(hreq)
	if err != nil {
		return fmt.Errorf("openaicompat: %s: probe: %w", p.cfg.Name, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("openaicompat: %s: probe answered %d", p.cfg.Name, resp.StatusCode)
	}
	return nil
}

// PrefillStyle is how the upstream continues an answer.
func (p *Provider) PrefillStyle() chatapi.PrefillStyle { return p.cfg.Prefill }

// DefaultModel is the upstream model asked for when a request names none.
func (p *Provider) DefaultModel() string { return p.cfg.Model }

// Generate asks for a complete answer and returns the upstream's body as
// Completion.Raw.
func (p *Provider) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	resp, err := p.post(ctx, req, false)
	if err != nil {
		return llm.Completion{}, err
	}
	defer resp.Body.Close()
	body, err := readAnswer(resp)
	if err != nil {
		return llm.Completion{}, fmt.Errorf("openaicompat: %s: reading the answer: %w", p.cfg.Name, err)
	}
	if len(body) > MaxAnswerBytes {
		return llm.Completion{}, fmt.Errorf("%w: %s: the answer is larger than %d bytes", ErrMalformed, p.cfg.Name, MaxAnswerBytes)
	}
	a, ok, err := chatapi.ReadAnswerHead(p.cfg.Name, body)
	switch {
	case err != nil:
		return llm.Completion{}, p.inBody(err)
	case !ok:
		return llm.Completion{}, fmt.Errorf("%w: %s: the answer is not a JSON object", ErrMalformed, p.cfg.Name)
	}
	return llm.Completion{Raw: body, Model: cmp.Or(a.Model, req.Model, p.cfg.Model), Usage: a.Usage}, nil
}

// readAnswer reads a whole answer's body: into one slice of the size the
// upstream declared, when it declared one of at most 64 KiB (most answers;
// a larger declared size is not taken on trust before the bytes come), and
// otherwise as it arrives, up to one byte over MaxAnswerBytes. Either way
// it reads until the body says it has ended: over HTTP/2 the end can come
// after the last byte, and a body closed before its end cancels the
// upstream's stream, which the upstream would count as a client gone.
func readAnswer(resp *http.Response) ([]byte, error) {
	n := resp.ContentLength
	if n < 0 || n > 64<<10 {
		return io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	}
	b := make([]byte, n+1) // one more than declared, so the read goes on to the end
	m, err := io.ReadFull(resp.Body, b)
	switch {
	case int64(m) == n && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)):
		return b[:n], nil
	case err == nil:
		return nil, fmt.Errorf("%w: the answer is longer than its Content-Length of %d", ErrMalformed, n)
	case errors.Is(err, io.EOF):
		return nil, io.ErrUnexpectedEOF // shorter than declared, though the body did not say so
	}
	return nil, err
}

// inBody marks an error object an upstream sent in a 200 answer or a
// stream event: a failure of the upstream's, like a 502, after it had the
// request.
func (p *Provider) inBody(err error) error {
	var ue *chatapi.UpstreamError
	if errors.As(err, &ue) {
		ue.InBody = true
		if ue.Status == 0 {
			ue.Status = http.StatusBadGateway
		}
		p.scrub(ue)
	}
	return err
}

// scrub replaces the gateway's own key wherever an upstream's error quotes
// it — in the decoded fields, so that a key spelled with JSON escapes
// (\u0073k-…) is caught too: the text reaches the caller (a 400 is theirs
// to fix) and the log.
func (p *Provider) scrub(e *chatapi.UpstreamError) {
	if len(p.cfg.APIKey) < 8 {
		return // too short to replace without mangling the text: never the case for a real key
	}
	for _, f := range []*string{&e.Message, &e.Type, &e.Code, &e.Param} {
		*f = scrubbed(*f, p.cfg.APIKey)
	}
}

// scrubbed is s with key replaced, and with any start of the key that
// ends s before its "…" (a field cut at its size limit mid-key) replaced
// too.
func scrubbed(s, key string) string {
	const mask = "[the gateway's key]"
	s = strings.ReplaceAll(s, key, mask)
	if body, cut := strings.CutSuffix(s, "…"); cut {
		for n := len(key) - 1; n >= 4; n-- {
			if strings.HasSuffix(body, key[:n]) {
				return body[:len(body)-n] + mask + "…"
			}
		}
	}
	return s
}

// Stream asks for a streamed answer and relays each event's data to emit,
// as it came. The answer is complete at [DONE], or when the stream closes
// after a finish_reason (some upstreams never send [DONE]); a stream that
// closes before either ends with ErrTruncated, a malformed event with
// ErrMalformed (nothing of it is passed on), an error event with an
// *chatapi.UpstreamError.
func (p *Provider) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	resp, err := p.post(ctx, req, true)
	if err != nil {
		return llm.Completion{}, err
	}
	defer resp.Body.Close()
	r := &streamReader{p: p, name: p.cfg.Name, model: cmp.Or(req.Model, p.cfg.Model), emit: emit,
		dropUsage: !p.cfg.NoStreamUsage && !req.Chat.IncludeUsage}
	err = chatapi.ReadEvents(resp.Body, r.event)
	c := llm.Completion{Model: r.model, Usage: r.usage}
	switch {
	case errors.Is(err, errDone):
		return c, nil
	case err != nil:
		return c, err
	case ctx.Err() != nil:
		return c, ctx.Err()
	case r.finished:
		return c, nil // closed after the last choice finished: the answer is whole
	}
	return c, fmt.Errorf("%w: %s", ErrTruncated, p.cfg.Name)
}

// errDone ends ReadEvents at [DONE].
var errDone = errors.New("[DONE]")

// streamReader handles one stream's events.
type streamReader struct {
	p        *Provider
	name     string
	model    string
	emit     func(llm.Chunk) error
	usage    *chatapi.Usage
	finished bool
	// dropUsage: the usage was asked for on the caller's behalf, so the
	// chunk that carries only it is not passed on.
	dropUsage bool
}

func (r *streamReader) event(data []byte) error {
	if bytes.Equal(data, chatapi.DoneData) {
		return errDone
	}
	p, model, ok, err := chatapi.ReadChunk(r.name, data)
	switch {
	case err != nil:
		return r.p.inBody(err)
	case !ok:
		return fmt.Errorf("%w: %s: an event that is not a JSON object", ErrMalformed, r.name)
	}
	r.model = cmp.Or(model, r.model)
	if p.Usage != nil {
		r.usage = p.Usage // sent with the last chunk when include_usage is asked for
	}
	r.finished = r.finished || p.Finish != ""
	if r.dropUsage && p.Usage != nil && gjson.GetBytes(data, "choices.#").Int() == 0 {
		return nil
	}
	return r.emit(llm.Chunk{Raw: bytes.Clone(data), Piece: &p})
}

// post sends the caller's request with the target's model and turns every
// non-2xx answer into an *chatapi.UpstreamError; on success the caller
// owns resp.Body.
func (p *Provider) post(ctx context.Context, req llm.Request, stream bool) (*http.Response, error) {
	if req.Chat == nil {
		return nil, fmt.Errorf("openaicompat: %s: a request without a chat body", p.cfg.Name)
	}
	model := cmp.Or(req.Model, p.cfg.Model)
	ctx, span := p.span(ctx, model)
	defer span.end()
	ctx = p.timed(ctx)
	var body []byte
	if stream && !p.cfg.NoStreamUsage {
		body = req.Chat.UpstreamAskingUsage(model)
	} else {
		body = req.Chat.Upstream(model, stream)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	// The header values are shared, read-only slices built once (the
	// transport only reads them): a call allocates none of its own.
	hreq.Header[contentType] = jsonValue
	if stream {
		hreq.Header[accept] = eventStreamValue
	}
	if p.auth != nil {
		hreq.Header[authorization] = p.auth
	}
	span.inject(hreq.Header)
	resp, err := p.do(hreq)
	if err != nil {
		span.fail(string(llm.ReasonConnection))
		return nil, fmt.Errorf("openaicompat: %s: %w", p.cfg.Name, err) // connection-level: retryable
	}
	span.status(resp.StatusCode)
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var retryAfter time.Duration
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		retryAfter = chatapi.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	e := chatapi.NewUpstreamError(p.cfg.Name, resp.StatusCode, body, retryAfter)
	p.scrub(e)
	return nil, e
}

// do sends one request on the upstream's transport: what http.Client.Do
// would do, less what a gateway does not want. A redirect is refused, not
// followed — an API endpoint has no business redirecting a POST, and
// following one would send the caller's prompt (and our key) where the
// operator never pointed it — so no copy of the headers is made per call
// for one (Client.Do's makeHeadersCopier), nor any of Do's other
// bookkeeping. Errors are *url.Error, as Do's are, so they classify the
// same (llm.ReasonOf: a net.Error is a connection failure).
func (p *Provider) do(hreq *http.Request) (*http.Response, error) {
	resp, err := p.rt.RoundTrip(hreq)
	if err != nil {
		return nil, urlError(hreq, err)
	}
	switch resp.StatusCode {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		to, lerr := resp.Location()
		if lerr != nil {
			break // no Location: not a redirect; Do returns it as it came too
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		return nil, urlError(hreq, fmt.Errorf("openaicompat: refusing redirect to %s: upstream redirects are not followed", to.Redacted()))
	}
	return resp, nil
}

// urlError wraps err as http.Client.Do would: "Post \"https://…\": err".
func urlError(hreq *http.Request, err error) *url.Error {
	return &url.Error{Op: hreq.Method[:1] + strings.ToLower(hreq.Method[1:]), URL: hreq.URL.Redacted(), Err: err}
}

// ParseSpec reads an upstream from the command line:
//
//	name=openai,url=https://api.example.com/v1,model=small-1,key-env=EXAMPLE_API_KEY
//
// The API key is never on the command line: key-env names the environment
// variable that holds it, read through getenv.
func ParseSpec(s string, getenv func(string) string) (Config, error) {
	var cfg Config
	err := spec.Each(s, func(k, v string) error {
		var err error
		switch k {
		case "name":
			cfg.Name = v
		case "url":
			cfg.BaseURL = v
		case "model":
			cfg.Model = v
		case "key-env":
			if cfg.APIKey = getenv(v); cfg.APIKey == "" {
				return errors.New("that environment variable is empty or unset")
			}
		case "dial-timeout":
			cfg.DialTimeout, err = time.ParseDuration(v)
		case "header-timeout":
			cfg.ResponseHeaderTimeout, err = time.ParseDuration(v)
		case "local":
			cfg.Local, err = strconv.ParseBool(v)
		case "prefill":
			cfg.Prefill, err = chatapi.ParsePrefillStyle(v)
		case "probe":
			switch k := ProbeKind(v); k {
			case ProbeModels, ProbeChat, ProbeOff:
				cfg.Probe = k
			default:
				err = errors.New("want models, chat or off")
			}
		case "stream-usage":
			var ask bool
			ask, err = strconv.ParseBool(v)
			cfg.NoStreamUsage = !ask
		default:
			return errors.New("unknown field (want name, url, model, key-env, dial-timeout, header-timeout, local, stream-usage, prefill, probe)")
		}
		return err
	})
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return cfg, nil
}
