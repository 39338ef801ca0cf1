package chatapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// Error is an error in OpenAI's shape, with the HTTP status it goes with:
//
//	{"error": {"message": "...", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}
type Error struct {
	Status  int
	Type    ErrorType // invalid_request_error, rate_limit_error, server_error (catalogue.go), or an upstream's
	Code    string    // model_not_found, context_length_exceeded, …; "" is sent as null
	Param   string    // the field at fault; "" is sent as null
	Message string
	// RetryAfter, if positive, is sent as a Retry-After header (429, 503).
	RetryAfter time.Duration
	// Challenge, if set, is sent as a WWW-Authenticate header (401).
	Challenge string
}

func (e *Error) Error() string { return e.Message }

func invalid(param string, f Failure, msg string) *Error {
	return f.New(msg).At(param)
}

// JSON is the error's body.
func (e *Error) JSON() []byte {
	type detail struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	d := detail{Message: e.Message, Type: string(e.Type)}
	if e.Param != "" {
		d.Param = &e.Param
	}
	if e.Code != "" {
		d.Code = &e.Code
	}
	b, _ := json.Marshal(struct {
		Error detail `json:"error"`
	}{d})
	return b
}

// MaxMessageBytes bounds the upstream text a caller is shown; MaxCodeBytes
// bounds an error's type, code and param, which are identifiers — and go
// to the logs, where an upstream that echoes the request must not put a
// prompt.
const (
	MaxMessageBytes = 1024
	MaxCodeBytes    = 64
)

// UpstreamError is what an upstream said when it refused or failed a call:
// its status and its own error type, code, param and message. The message
// may quote the caller's input, so the gateway shows it to the caller (who
// sent that input) but never logs it; Error() leaves it out for that reason.
type UpstreamError struct {
	Provider string
	Status   int // 0: the upstream said it in a stream event, after a 200
	Type     string
	Code     string
	Param    string
	Message  string // at most MaxMessageBytes, valid UTF-8
	// InBody: the upstream sent the error object in a 200 answer or a
	// stream event, so it had the request (and may bill for it), whatever
	// Status says.
	InBody     bool
	retryAfter time.Duration
}

// NewUpstreamError reads an error answer: body is the upstream's (an
// OpenAI error object, or anything else), retryAfter its Retry-After.
func NewUpstreamError(provider string, status int, body []byte, retryAfter time.Duration) *UpstreamError {
	e := &UpstreamError{Provider: provider, Status: status, retryAfter: retryAfter}
	if obj := gjson.GetBytes(body, "error"); obj.IsObject() {
		e.readObject(obj)
	}
	return e
}

// readObject takes the fields of an OpenAI error object.
func (e *UpstreamError) readObject(obj gjson.Result) {
	e.Message = bounded(obj.Get("message").String(), MaxMessageBytes)
	e.Type = bounded(obj.Get("type").String(), MaxCodeBytes)
	e.Code = bounded(obj.Get("code").String(), MaxCodeBytes) // some upstreams send a number
	e.Param = bounded(obj.Get("param").String(), MaxCodeBytes)
}

// bounded keeps s within limit bytes, cut at a character boundary, as
// valid UTF-8.
func bounded(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func (e *UpstreamError) Error() string {
	var b strings.Builder
	b.WriteString(e.Provider)
	if e.Status != 0 {
		b.WriteString(": HTTP ")
		b.WriteString(strconv.Itoa(e.Status))
	} else {
		b.WriteString(": error event in the stream")
	}
	if e.Code != "" {
		fmt.Fprintf(&b, " (%s)", e.Code)
	}
	return b.String()
}

// StatusCode is the upstream's HTTP status (0 for an error event in a stream).
func (e *UpstreamError) StatusCode() int { return e.Status }

// ErrorCode is the upstream's error code, e.g. context_length_exceeded.
func (e *UpstreamError) ErrorCode() string { return e.Code }

// RetryAfter is the upstream's Retry-After (0 if it sent none).
func (e *UpstreamError) RetryAfter() time.Duration { return e.retryAfter }

// ParseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (RFC 9110 §10.2.3). Anything else, or a date in the past, is 0.
func ParseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 32); err == nil {
		return time.Duration(max(secs, 0)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
