package chatapi

import (
	"net/http"
	"time"
)

// ErrorType is an OpenAI error object's "type": the class of failure an SDK
// raises (the official SDKs map the status and this to their exceptions).
type ErrorType string

// The three types the gateway answers with. An upstream's refusal passed
// on keeps whatever type the upstream gave.
const (
	InvalidRequestError ErrorType = "invalid_request_error"
	RateLimitError      ErrorType = "rate_limit_error"
	ServerError         ErrorType = "server_error"
)

// Failure is one way a request fails, as the error object and the response
// say it: the HTTP status, the type and the code. The catalogue below is
// every failure the gateway, its tenant gate and its simulated upstreams
// answer with — one place to read what a client can receive, and the only
// place the codes are spelled (internal/repocheck's TestErrorsComeFromTheCatalogue
// refuses a status, type or code written by hand anywhere else). New makes
// one into an *Error with a message of its own.
type Failure struct {
	Status int
	Type   ErrorType
	Code   string
}

// New is the failure with msg as its message.
func (f Failure) New(msg string) *Error {
	return &Error{Status: f.Status, Type: f.Type, Code: f.Code, Message: msg}
}

// Is reports whether e is this failure: the same status, type and code.
func (f Failure) Is(e *Error) bool {
	return e != nil && e.Status == f.Status && e.Type == f.Type && e.Code == f.Code
}

// At names the field at fault (the error object's "param") and returns e.
func (e *Error) At(param string) *Error {
	e.Param = param
	return e
}

// After sets when to retry (a Retry-After header) and returns e.
func (e *Error) After(d time.Duration) *Error {
	e.RetryAfter = d
	return e
}

// The request as sent cannot be served: fix it, do not retry it.
var (
	InvalidJSON         = Failure{http.StatusBadRequest, InvalidRequestError, "invalid_json"}
	InvalidType         = Failure{http.StatusBadRequest, InvalidRequestError, "invalid_type"}
	InvalidValue        = Failure{http.StatusBadRequest, InvalidRequestError, "invalid_value"}
	InvalidField        = Failure{http.StatusBadRequest, InvalidRequestError, "invalid_field"}
	DuplicateField      = Failure{http.StatusBadRequest, InvalidRequestError, "duplicate_field"}
	MissingParameter    = Failure{http.StatusBadRequest, InvalidRequestError, "missing_required_parameter"}
	MissingPrompt       = Failure{http.StatusBadRequest, InvalidRequestError, "missing_prompt"}
	InvalidRequest      = Failure{http.StatusBadRequest, InvalidRequestError, "invalid_request"}
	InvalidBody         = Failure{http.StatusBadRequest, InvalidRequestError, "invalid_body"}
	InvalidHeader       = Failure{http.StatusBadRequest, InvalidRequestError, "invalid_header"}
	InvalidTenant       = Failure{http.StatusBadRequest, InvalidRequestError, "invalid_tenant"}
	ContextTooLong      = Failure{http.StatusBadRequest, InvalidRequestError, "context_length_exceeded"}
	ModelNotFound       = Failure{http.StatusNotFound, InvalidRequestError, "model_not_found"}
	NotFound            = Failure{http.StatusNotFound, InvalidRequestError, "not_found"}
	MethodNotAllowed    = Failure{http.StatusMethodNotAllowed, InvalidRequestError, "method_not_allowed"}
	BodyTimeout         = Failure{http.StatusRequestTimeout, InvalidRequestError, "request_timeout"}
	RequestTooLarge     = Failure{http.StatusRequestEntityTooLarge, InvalidRequestError, "request_too_large"}
	UnsupportedEncoding = Failure{http.StatusUnsupportedMediaType, InvalidRequestError, "unsupported_content_encoding"}
)

// Who is asking is not let in, or not for this.
var (
	MissingToken     = Failure{http.StatusUnauthorized, InvalidRequestError, "missing_token"}
	InvalidToken     = Failure{http.StatusUnauthorized, InvalidRequestError, "invalid_token"}
	ExpiredToken     = Failure{http.StatusUnauthorized, InvalidRequestError, "expired_token"}
	InvalidAPIKey    = Failure{http.StatusUnauthorized, InvalidRequestError, "invalid_api_key"}
	UnknownTier      = Failure{http.StatusForbidden, InvalidRequestError, "unknown_tier"}
	ModelNotAllowed  = Failure{http.StatusForbidden, InvalidRequestError, "model_not_allowed"}
	PromptTooLarge   = Failure{http.StatusRequestEntityTooLarge, InvalidRequestError, "prompt_too_large"}
	TokensOverQuota  = Failure{http.StatusRequestEntityTooLarge, InvalidRequestError, "tokens_over_quota"}
	RateLimited      = Failure{http.StatusTooManyRequests, RateLimitError, "rate_limited"}
	TenantBusy       = Failure{http.StatusTooManyRequests, RateLimitError, "too_many_concurrent_requests"}
	TokensPerMinute  = Failure{http.StatusTooManyRequests, RateLimitError, "tokens_per_minute"}
	UpstreamLimiting = Failure{http.StatusTooManyRequests, RateLimitError, "upstream_rate_limited"}
)

// The gateway, or what is behind it, could not serve the request now: a
// retry later (or on another replica) may succeed.
var (
	Overloaded          = Failure{http.StatusServiceUnavailable, ServerError, "overloaded"}
	LimiterUnavailable  = Failure{http.StatusServiceUnavailable, ServerError, "rate_limiter_unavailable"}
	LimitsUnavailable   = Failure{http.StatusServiceUnavailable, ServerError, "limits_unavailable"}
	NoHealthyProvider   = Failure{http.StatusServiceUnavailable, ServerError, "no_healthy_provider"}
	Draining            = Failure{http.StatusServiceUnavailable, ServerError, "draining"}
	UpstreamAuthFailed  = Failure{http.StatusBadGateway, ServerError, "upstream_auth_failed"}
	UpstreamFailed      = Failure{http.StatusBadGateway, ServerError, "upstream_error"}
	DeadlineExceeded    = Failure{http.StatusGatewayTimeout, ServerError, "deadline_exceeded"}
	ClientClosedRequest = Failure{StatusClientClosed, ServerError, "client_closed"}
)

// What a simulated upstream answers with, as a real provider would.
var (
	UpstreamRateLimit   = Failure{http.StatusTooManyRequests, RateLimitError, "rate_limit_exceeded"}
	UpstreamUnavailable = Failure{http.StatusServiceUnavailable, ServerError, "service_unavailable"}
	UpstreamInternal    = Failure{http.StatusInternalServerError, ServerError, "internal_error"}
)

// StatusClientClosed is nginx's 499, for a request whose caller left before
// the answer: no client reads it, but logs and metrics tell it from a 5xx.
const StatusClientClosed = 499

// Catalogue is every failure above, for a tool that reads answers (the
// scenarios classify refusals by it) and for the catalogue's own test.
var Catalogue = []Failure{
	InvalidJSON, InvalidType, InvalidValue, InvalidField, DuplicateField, MissingParameter, MissingPrompt,
	InvalidRequest, InvalidBody, InvalidHeader, InvalidTenant, ContextTooLong, ModelNotFound, NotFound,
	MethodNotAllowed, BodyTimeout, RequestTooLarge, UnsupportedEncoding,
	MissingToken, InvalidToken, ExpiredToken, InvalidAPIKey, UnknownTier, ModelNotAllowed, PromptTooLarge,
	TokensOverQuota, RateLimited, TenantBusy, TokensPerMinute, UpstreamLimiting,
	Overloaded, LimiterUnavailable, LimitsUnavailable, NoHealthyProvider, Draining, UpstreamAuthFailed,
	UpstreamFailed, DeadlineExceeded, ClientClosedRequest,
	UpstreamRateLimit, UpstreamUnavailable, UpstreamInternal,
}
