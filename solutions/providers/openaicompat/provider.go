// Package openaicompat is a provider for any OpenAI-compatible upstream
// (/v1/chat/completions), streaming and not.
//
// Each upstream gets one shared http.Client with its own dial, TLS and
// response-header timeouts and a connection pool sized for a gateway; the
// request's context bounds the whole call. Failures are classified the way
// the retry loop needs them: 429 and 5xx and connection errors are
// retryable (429 with the server's Retry-After), other 4xx are permanent and
// carry the upstream's reason. Redirects off the upstream's host are refused.
package openaicompat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	gateway "github.com/production-go/gateway-lab/solutions/08-gateway"
	"github.com/production-go/gateway-lab/solutions/providers/spec"
)

var (
	// ErrInvalidConfig is returned by New for settings that cannot work.
	ErrInvalidConfig = errors.New("openaicompat: invalid config")
	// ErrTruncated: the stream ended cleanly at the HTTP level without [DONE].
	ErrTruncated = errors.New("openaicompat: stream ended without [DONE]")
	// ErrMalformed: the upstream sent something that is not the expected JSON.
	ErrMalformed = errors.New("openaicompat: malformed upstream response")
)

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
}

// Provider calls one OpenAI-compatible upstream.
type Provider struct {
	cfg      Config
	endpoint string
	client   *http.Client
}

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
		DialContext:           (&net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   cfg.TLSHandshakeTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		MaxIdleConns:          cfg.MaxIdleConnsPerHost * 2,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	host := u.Host
	client := &http.Client{
		Transport: transport,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if req.URL.Host != host {
				return fmt.Errorf("openaicompat: refusing redirect from %s to another host (%s)", host, req.URL.Host)
			}
			if len(via) >= 3 {
				return errors.New("openaicompat: too many redirects")
			}
			return nil
		},
	}
	return &Provider{cfg: cfg, endpoint: strings.TrimRight(cfg.BaseURL, "/") + "/chat/completions", client: client}, nil
}

func defaults(d *time.Duration, v time.Duration) {
	if *d <= 0 {
		*d = v
	}
}

// Name is the provider's name.
func (p *Provider) Name() string { return p.cfg.Name }

// Close releases idle connections.
func (p *Provider) Close() { p.client.CloseIdleConnections() }

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type request struct {
	Model         string         `json:"model"`
	Messages      []message      `json:"messages"`
	Stream        bool           `json:"stream,omitempty"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func (u *usage) gateway() *gateway.Usage {
	if u == nil {
		return nil
	}
	return &gateway.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
}

type response struct {
	Model   string `json:"model"`
	Choices []struct {
		Message message `json:"message"`
		Delta   message `json:"delta"`
	} `json:"choices"`
	Usage *usage    `json:"usage"`
	Error *apiError `json:"error"`
}

type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

// StatusError is an upstream HTTP error.
type StatusError struct {
	Provider   string
	Status     int
	Code       string // the upstream's error code, e.g. context_length_exceeded
	Message    string // the upstream's reason
	retryAfter time.Duration
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("%s: HTTP %d", e.Provider, e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

// StatusCode is the upstream's HTTP status.
func (e *StatusError) StatusCode() int { return e.Status }

// RetryAfter is the upstream's Retry-After on a 429 or 503 (0 if none).
func (e *StatusError) RetryAfter() time.Duration { return e.retryAfter }

// Generate asks for a complete answer.
func (p *Provider) Generate(ctx context.Context, req gateway.Request) (gateway.Completion, error) {
	resp, err := p.post(ctx, req, false)
	if err != nil {
		return gateway.Completion{}, err
	}
	defer resp.Body.Close()
	var r response
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&r); err != nil {
		return gateway.Completion{}, fmt.Errorf("%w: %s: %v", ErrMalformed, p.cfg.Name, err)
	}
	if len(r.Choices) == 0 {
		return gateway.Completion{}, fmt.Errorf("%w: %s: no choices", ErrMalformed, p.cfg.Name)
	}
	return gateway.Completion{Text: r.Choices[0].Message.Content, Model: modelOr(r.Model, modelOr(req.Model, p.cfg.Model)), Usage: r.Usage.gateway()}, nil
}

// Stream asks for a streamed answer and relays each content delta to emit.
// A malformed chunk ends the stream with ErrMalformed (nothing of it is
// passed on); a stream that ends without [DONE] ends with ErrTruncated.
func (p *Provider) Stream(ctx context.Context, req gateway.Request, emit func(string) error) (gateway.Completion, error) {
	resp, err := p.post(ctx, req, true)
	if err != nil {
		return gateway.Completion{}, err
	}
	defer resp.Body.Close()
	model := modelOr(req.Model, p.cfg.Model)
	var used *gateway.Usage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data:")
		if !ok {
			continue // comments, event names, blank separators
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			return gateway.Completion{Model: model, Usage: used}, nil
		}
		var chunk response
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return gateway.Completion{Model: model}, fmt.Errorf("%w: %s: bad chunk: %v", ErrMalformed, p.cfg.Name, err)
		}
		if chunk.Error != nil {
			return gateway.Completion{Model: model}, &StatusError{Provider: p.cfg.Name, Status: http.StatusBadGateway, Code: codeString(chunk.Error.Code), Message: chunk.Error.Message}
		}
		model = modelOr(chunk.Model, model)
		if chunk.Usage != nil {
			used = chunk.Usage.gateway() // sent with the last chunk when include_usage is asked for
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content == "" {
				continue
			}
			if err := emit(c.Delta.Content); err != nil {
				return gateway.Completion{Model: model}, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return gateway.Completion{Model: model}, fmt.Errorf("openaicompat: %s: reading stream: %w", p.cfg.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return gateway.Completion{Model: model}, err
	}
	return gateway.Completion{Model: model}, fmt.Errorf("%w: %s", ErrTruncated, p.cfg.Name)
}

// post sends the request and turns every non-2xx answer into an error of
// the right kind; on success the caller owns resp.Body.
func (p *Provider) post(ctx context.Context, req gateway.Request, stream bool) (*http.Response, error) {
	out := request{Model: modelOr(req.Model, p.cfg.Model), Messages: []message{{Role: "user", Content: req.Prompt}}, Stream: stream}
	if stream {
		out.StreamOptions = &streamOptions{IncludeUsage: true} // so usage can be passed through
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, p.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if stream {
		hreq.Header.Set("Accept", "text/event-stream")
	}
	if p.cfg.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+p.cfg.APIKey)
	}
	resp, err := p.client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("openaicompat: %s: %w", p.cfg.Name, err) // connection-level: retryable
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	se := &StatusError{Provider: p.cfg.Name, Status: resp.StatusCode}
	var r response
	if b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); json.Unmarshal(b, &r) == nil && r.Error != nil {
		se.Message, se.Code = r.Error.Message, codeString(r.Error.Code)
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		se.retryAfter = parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusRequestTimeout {
		return nil, gateway.Permanent(se) // the same request fails the same way: no retry
	}
	return nil, se
}

// parseRetryAfter reads delay-seconds or an HTTP date (RFC 9110 §10.2.3).
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

func codeString(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return ""
}

func modelOr(got, fallback string) string {
	if got != "" {
		return got
	}
	return fallback
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
		default:
			return errors.New("unknown field (want name, url, model, key-env, dial-timeout, header-timeout)")
		}
		return err
	})
	if err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return cfg, nil
}
