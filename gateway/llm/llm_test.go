package llm_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func upstream(status int, code string) error {
	return chatapi.NewUpstreamError("up", status, []byte(`{"error":{"message":"m","type":"t","code":"`+code+`"}}`), 0)
}

func TestReasonOfClassifiesEachCauseOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		reason  llm.Reason
		outcome llm.Outcome
	}{
		{"success", nil, llm.ReasonNone, llm.OutcomeOK},
		{"caller left", fmt.Errorf("up: %w", context.Canceled), llm.ReasonCancelled, llm.OutcomeCancelled},
		{"deadline", fmt.Errorf("up: %w", context.DeadlineExceeded), llm.ReasonTimeout, llm.OutcomeTimeout},
		{"429", upstream(429, "rate_limited"), llm.ReasonRateLimited, llm.OutcomeError},
		{"500", upstream(500, ""), llm.ReasonServer, llm.OutcomeError},
		{"503", upstream(503, ""), llm.ReasonServer, llm.OutcomeError},
		{"400", upstream(400, "context_length_exceeded"), llm.ReasonClient, llm.OutcomeError},
		{"reset", fmt.Errorf("up: %w", syscall.ECONNRESET), llm.ReasonConnection, llm.OutcomeError},
		{"refused", fmt.Errorf("up: %w", syscall.ECONNREFUSED), llm.ReasonConnection, llm.OutcomeError},
		{"dns", &net.DNSError{Err: "no such host", Name: "x"}, llm.ReasonConnection, llm.OutcomeError},
		{"anything else", errors.New("malformed"), llm.ReasonOther, llm.OutcomeError},
		{"a panic", fmt.Errorf("x: %w", llm.ErrPanic), llm.ReasonOther, llm.OutcomeError},
		{"refused before it was sent (a quota out of tokens)", fmt.Errorf("%w: %w", llm.ErrNotSent, &chatapi.Error{Status: 429, Code: "tokens_per_minute"}), llm.ReasonCancelled, llm.OutcomeCancelled},
		{"cancelled wins over a status", errors.Join(context.Canceled, upstream(500, "")), llm.ReasonCancelled, llm.OutcomeCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.reason, llm.ReasonOf(tc.err))
			assert.Equal(t, tc.outcome, llm.OutcomeOf(tc.err))
		})
	}
}

func TestCallersFaultIsA4xxButNotATimeoutOrARateLimit(t *testing.T) {
	for status, want := range map[int]bool{400: true, 404: true, 413: true, 422: true, 499: true,
		401: false, 403: false, 407: false, 408: false, 429: false, 500: false, 503: false, 399: false} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			assert.Equal(t, want, llm.CallersFault(fmt.Errorf("wrapped: %w", upstream(status, ""))))
		})
	}
	assert.False(t, llm.CallersFault(errors.New("no status")), "an error without a status is nobody's 4xx")
	assert.False(t, llm.CallersFault(nil))
}

func TestErrorCodeAndStatusAreReadThroughWrapping(t *testing.T) {
	err := fmt.Errorf("a: %w", fmt.Errorf("b: %w", upstream(413, "context_length_exceeded")))
	assert.Equal(t, "context_length_exceeded", llm.ErrorCode(err))
	assert.Equal(t, 413, llm.StatusOf(err))
	assert.Empty(t, llm.ErrorCode(errors.New("x")))
	assert.Zero(t, llm.StatusOf(errors.New("x")))
}

// whole answers in one piece; it cannot stream.
type whole struct {
	answer []byte
	err    error
	calls  int
}

func (w *whole) Name() string { return "whole" }
func (w *whole) Generate(context.Context, llm.Request) (llm.Completion, error) {
	w.calls++
	return llm.Completion{Raw: w.answer, Model: "whole-1"}, w.err
}

type panicky struct{}

func (panicky) Name() string { return "panicky" }
func (panicky) Generate(context.Context, llm.Request) (llm.Completion, error) {
	panic("provider bug")
}
func (panicky) Stream(context.Context, llm.Request, func(llm.Chunk) error) (llm.Completion, error) {
	panic("provider bug mid-stream")
}

func TestAPanicInAProviderIsAnError(t *testing.T) {
	req := llm.Request{Chat: chatapi.NewRequest("hi", false)}
	_, err := llm.Generate(t.Context(), panicky{}, req)
	require.ErrorIs(t, err, llm.ErrPanic)
	assert.Contains(t, err.Error(), "panicky", "names the provider")
	assert.Contains(t, err.Error(), "provider bug", "and the panic")
	_, err = llm.Stream(t.Context(), panicky{}, req, func(llm.Chunk) error { return nil })
	require.ErrorIs(t, err, llm.ErrPanic, "streaming too")
}

const answer = `{"id":"chatcmpl-1","object":"chat.completion","created":7,"model":"whole-1","choices":[{"index":0,"message":{"role":"assistant","content":"a <b> & c"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`

func TestAProviderThatCannotStreamIsStreamedWhole(t *testing.T) {
	for _, usage := range []bool{false, true} {
		t.Run(fmt.Sprintf("include_usage=%v", usage), func(t *testing.T) {
			body := `{"stream":true,"messages":[{"role":"user","content":"hi"}]}`
			if usage {
				body = `{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
			}
			chat, err := chatapi.Parse([]byte(body))
			require.NoError(t, err)
			p := &whole{answer: []byte(answer)}
			var got []string
			c, err := llm.Stream(t.Context(), p, llm.Request{Chat: chat}, func(ch llm.Chunk) error {
				got = append(got, string(ch.Raw))
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, "whole-1", c.Model)
			want := []string{`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"whole-1","choices":[{"index":0,"delta":{"role":"assistant","content":"a <b> & c"},"finish_reason":"stop"}]}`}
			if usage {
				want = append(want, `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"whole-1","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`)
			}
			assert.Equal(t, want, got, "the message as one delta, then the usage when asked for")
		})
	}
}

func TestStreamingWholeStopsAtTheFirstEmitError(t *testing.T) {
	chat, err := chatapi.Parse([]byte(`{"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	gone := errors.New("client gone")
	n := 0
	_, err = llm.Stream(t.Context(), &whole{answer: []byte(answer)}, llm.Request{Chat: chat}, func(llm.Chunk) error { n++; return gone })
	require.ErrorIs(t, err, gone)
	assert.Equal(t, 1, n, "nothing is emitted after the caller is gone")
}

func TestStreamWholeUsesTheMiddlewaresOwnGenerate(t *testing.T) {
	inner := &whole{answer: []byte(answer)}
	mine := 0
	generate := func(ctx context.Context, req llm.Request) (llm.Completion, error) {
		mine++
		return inner.Generate(ctx, req)
	}
	_, err := llm.StreamWhole(t.Context(), inner, llm.Request{Chat: chatapi.NewRequest("hi", true)}, func(llm.Chunk) error { return nil }, generate)
	require.NoError(t, err)
	assert.Equal(t, 1, mine, "the middleware's Generate answered, once")
	assert.Equal(t, 1, inner.calls, "and the wrapped provider was called once, by it")
}

func TestAFailedOrMalformedWholeAnswerEmitsNothing(t *testing.T) {
	req := llm.Request{Chat: chatapi.NewRequest("hi", true)}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		p    *whole
		want error
	}{
		{"failed", &whole{err: boom}, boom},
		{"not a completion", &whole{answer: []byte(`[1,2]`)}, chatapi.ErrNotACompletion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			emitted := 0
			_, err := llm.Stream(t.Context(), tc.p, req, func(llm.Chunk) error { emitted++; return nil })
			require.ErrorIs(t, err, tc.want)
			assert.Zero(t, emitted)
		})
	}
}

// promising says it honours its context and names its default model.
type promising struct{ whole }

func (promising) HonoursContext() bool { return true }
func (promising) DefaultModel() string { return "p-1" }

func TestWrappedPassesThePromisesThrough(t *testing.T) {
	w := llm.Wrapped{Inner: &promising{}}
	assert.Equal(t, "whole", w.Name())
	assert.Equal(t, "p-1", w.DefaultModel())
	assert.True(t, w.HonoursContext())
	bare := llm.Wrapped{Inner: &whole{}}
	assert.Empty(t, bare.DefaultModel(), "a provider that names no default has none")
	assert.False(t, bare.HonoursContext(), "and one that promises nothing promises nothing")
}

func TestAnAnswerWithNothingInItIsAnError(t *testing.T) {
	_, err := llm.Generate(t.Context(), &whole{}, llm.Request{Chat: chatapi.NewRequest("hi", false)})
	require.ErrorIs(t, err, llm.ErrEmptyAnswer, "a 200 with an empty body is not an answer to pass on")
	assert.Contains(t, err.Error(), "whole", "and the error names the provider")
}

// echo answers with the model it was asked for, and says whether the
// request it got still carried a meter.
type echo struct{ sawMeter []bool }

func (e *echo) Name() string { return "echo" }

func (e *echo) Generate(_ context.Context, req llm.Request) (llm.Completion, error) {
	e.sawMeter = append(e.sawMeter, req.Meter != nil)
	return llm.Completion{Raw: []byte(`{"model":"` + req.Model + `"}`)}, nil
}

func (e *echo) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	c, err := e.Generate(ctx, req)
	if err == nil {
		err = emit(llm.Chunk{Raw: []byte("piece")})
	}
	return c, err
}

// tally is a Meter that counts the calls run through it and charges each
// one token.
type tally struct{ calls, emits int }

func (m *tally) Call(ctx context.Context, req llm.Request, emit func(llm.Chunk) error, call llm.Call) (llm.Completion, error) {
	m.calls++
	relay := emit
	if emit != nil {
		relay = func(c llm.Chunk) error { m.emits++; return emit(c) }
	}
	c, err := call(ctx, req, relay)
	c.Charged = &llm.Usage{TotalTokens: 1}
	return c, err
}

func TestMeteredRunsEachCallThroughItsRequestsMeterOnce(t *testing.T) {
	inner := &echo{}
	p := llm.Metered(llm.Metered(inner)) // wrapped twice: still charged once
	c, err := p.Generate(t.Context(), llm.Request{Chat: chatapi.NewRequest("hi", false), Model: "m"})
	require.NoError(t, err, "a request without a meter passes through")
	assert.Nil(t, c.Charged)

	m := &tally{}
	c, err = p.Generate(t.Context(), llm.Request{Chat: chatapi.NewRequest("hi", false), Model: "m", Meter: m})
	require.NoError(t, err)
	assert.Equal(t, 1, m.calls, "one call, charged once however many times the provider is wrapped")
	assert.Equal(t, &llm.Usage{TotalTokens: 1}, c.Charged, "the meter's charge comes back with the completion")
	assert.Equal(t, `{"model":"m"}`, string(c.Raw), "the request reaches the provider as asked")

	var got []string
	c, err = p.(llm.StreamingProvider).Stream(t.Context(), llm.Request{Chat: chatapi.NewRequest("hi", true), Model: "m", Meter: m},
		func(ch llm.Chunk) error { got = append(got, string(ch.Raw)); return nil })
	require.NoError(t, err)
	assert.Equal(t, 2, m.calls)
	assert.Equal(t, 1, m.emits, "a stream's chunks pass through the meter on their way to the caller")
	assert.Equal(t, []string{"piece"}, got)
	assert.NotNil(t, c.Charged)
	assert.Equal(t, []bool{false, false, false}, inner.sawMeter, "the provider never sees the meter: no one further in charges the call again")
}
