package guard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/router"
	"github.com/production-go/gateway-lab/gateway/tenant"
	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// upstream is a scripted provider: it answers with usage, or fails with
// err, after sending chunks (streamed calls); it remembers the answer cap
// it was asked for.
type upstream struct {
	usage  *llm.Usage
	err    error
	chunks int

	mu        sync.Mutex
	calls     int
	maxTokens int
}

func (*upstream) Name() string         { return "up" }
func (*upstream) HonoursContext() bool { return true }
func (u *upstream) Generate(_ context.Context, req llm.Request) (llm.Completion, error) {
	u.mu.Lock()
	u.calls++
	u.maxTokens = req.Chat.MaxTokens
	u.mu.Unlock()
	if u.err != nil {
		return llm.Completion{}, u.err
	}
	return llm.Completion{Raw: chatapi.NewFrame("up-1").Completion("ok", nil, "stop", u.usage), Usage: u.usage}, nil
}
func (u *upstream) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	u.mu.Lock()
	u.calls++
	u.maxTokens = req.Chat.MaxTokens
	u.mu.Unlock()
	for range u.chunks {
		if err := emit(llm.Chunk{Raw: []byte(`{}`)}); err != nil {
			return llm.Completion{}, err
		}
	}
	return llm.Completion{Usage: u.usage}, u.err
}

// call makes one upstream call through the guard's meter, as the router
// would, under the request context Admit returned.
func (r *rig) call(ctx context.Context, p llm.Provider) (llm.Completion, error) {
	return metered(p).Generate(ctx, llm.Request{Chat: chatapi.NewRequest("hi", false)})
}

// stream is call for a streamed answer.
func (r *rig) stream(ctx context.Context, p llm.Provider) (llm.Completion, error) {
	return metered(p).(llm.StreamingProvider).Stream(ctx, llm.Request{Chat: chatapi.NewRequest("hi", true)}, func(llm.Chunk) error { return nil })
}

// left is the tokens in tenant's bucket now (Redis' clock stands still in
// these tests, so nothing refills between two steps).
func (r *rig) left(t *testing.T, tenant string, perMinute int) int {
	t.Helper()
	bucket := r.g.tokens.Keys(tenant)[0]
	if !r.m.Exists(bucket) {
		return perMinute // an absent bucket is a full one
	}
	v := r.m.HGet(bucket, "tokens")
	units, err := strconv.Atoi(v)
	require.NoError(t, err)
	return units / 60000
}

var dialRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// TestEachCallIsChargedByTheRules: what one upstream call costs a tenant,
// for every way it can end. The small tier's quota is 2,000 tokens; each
// call reserves 100 (the prompt) + 50 (the answer) = 150.
func TestEachCallIsChargedByTheRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p       *upstream
		stream  bool
		charged int
	}{
		{"answered with usage: the usage", &upstream{usage: &llm.Usage{TotalTokens: 42}}, false, 42},
		{"answered with an absurd usage: held to the debt limit, one minute's quota in debt", &upstream{usage: &llm.Usage{TotalTokens: 5_000_000_000}}, false, 4000},
		{"answered with parts that overflow when added: held to the debt limit", &upstream{usage: &llm.Usage{PromptTokens: math.MaxInt, CompletionTokens: math.MaxInt}}, false, 4000},
		{"answered with a usage that counts nothing ({}, another schema): the reservation", &upstream{usage: &llm.Usage{}}, false, 150},
		{"answered with negative counts: the reservation", &upstream{usage: &llm.Usage{PromptTokens: -5, CompletionTokens: -5, TotalTokens: -10}}, false, 150},
		{"answered with usage but no total: prompt and completion", &upstream{usage: &llm.Usage{PromptTokens: 10, CompletionTokens: 300}}, false, 310},
		{"answered with a total short of its parts: the parts", &upstream{usage: &llm.Usage{PromptTokens: 10, CompletionTokens: 300, TotalTokens: 5}}, false, 310},
		{"answered without usage: the reservation", &upstream{}, false, 150},
		{"an upstream 500 before any output: nothing", &upstream{err: chatapi.NewUpstreamError("up", 500, nil, 0)}, false, 0},
		{"an upstream 429: nothing", &upstream{err: chatapi.NewUpstreamError("up", 429, nil, 0)}, false, 0},
		{"an error object in a 200: the reservation", &upstream{err: &chatapi.UpstreamError{Provider: "up", Status: 502, InBody: true}}, false, 150},
		{"an error event before any output: the reservation", &upstream{err: &chatapi.UpstreamError{Provider: "up", Status: 502, InBody: true}}, true, 150},
		{"a dial refused: nothing, the upstream never had it", &upstream{err: fmt.Errorf("up: %w", dialRefused)}, false, 0},
		{"the caller hung up: the reservation", &upstream{err: context.Canceled}, false, 150},
		{"the attempt timed out: the reservation", &upstream{err: context.DeadlineExceeded}, false, 150},
		{"the connection reset after the request went out: the reservation", &upstream{err: fmt.Errorf("up: %w", syscall.ECONNRESET)}, false, 150},
		{"a malformed answer: the reservation", &upstream{err: errors.New("malformed")}, false, 150},
		{"a stream with usage: the usage", &upstream{usage: &llm.Usage{TotalTokens: 60}, chunks: 3}, true, 60},
		{"a stream cut after output: the reservation", &upstream{chunks: 2, err: fmt.Errorf("reset: %w", syscall.ECONNRESET)}, true, 150},
		{"a stream cut after output by an error event: the reservation", &upstream{chunks: 2, err: chatapi.NewUpstreamError("up", 502, nil, 0)}, true, 150},
		{"a stream cut after output with usage above the reservation: the usage", &upstream{chunks: 2, usage: &llm.Usage{TotalTokens: 400}, err: context.Canceled}, true, 400},
		{"a stream refused before output: nothing", &upstream{err: chatapi.NewUpstreamError("up", 503, nil, 0)}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, false)
			ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
			require.Nil(t, e)
			if tc.stream {
				_, _ = r.stream(ctx, tc.p)
			} else {
				_, _ = r.call(ctx, tc.p)
			}
			done(nil, nil)
			assert.Equal(t, 2000-tc.charged, r.left(t, "acme", 2000))
		})
	}
}

func TestAnUnderestimateIsOwedUpToTheConfiguredDebt(t *testing.T) {
	r := newRigWith(t, false, func(c *Config) { c.TokenDebtMinutes = 3 })
	ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	_, err := r.call(ctx, &upstream{usage: &llm.Usage{TotalTokens: 1_000_000}}) // a prompt of files
	require.NoError(t, err)
	done(nil, nil)
	assert.Equal(t, -3*2000, r.left(t, "acme", 2000), "three minutes of the quota owed, the rest forgiven")
}

func TestARequestThatMadeNoCallIsRefundedItsReservation(t *testing.T) {
	r := newRig(t, false)
	_, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 1900))
	require.Nil(t, e)
	assert.Equal(t, 0, r.left(t, "acme", 2000), "the whole quota is reserved while it runs")
	done(nil, router.ErrOverloaded) // no slot: no call was made
	assert.Equal(t, 2000, r.left(t, "acme", 2000), "and given back when it made no call")
}

func TestEveryRetryAndHedgeReservesForItself(t *testing.T) {
	r := newRig(t, false)
	ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 500)) // 600 a call
	require.Nil(t, e)
	defer done(nil, nil)
	timeout := &upstream{err: context.DeadlineExceeded}
	for i := range 3 {
		_, err := r.call(ctx, timeout)
		require.ErrorIs(t, err, context.DeadlineExceeded, "call %d reached the upstream", i+1)
	}
	assert.Equal(t, 3, timeout.calls)
	assert.Equal(t, 200, r.left(t, "acme", 2000), "three calls the upstream had: three reservations of 600, none refunded")
	_, err := r.call(ctx, timeout)
	require.ErrorIs(t, err, llm.ErrNotSent, "a fourth does not fit: refused before it is sent")
	var refusal *chatapi.Error
	require.ErrorAs(t, err, &refusal)
	assert.Equal(t, 429, refusal.Status)
	assert.Equal(t, "tokens_per_minute", refusal.Code)
	assert.Positive(t, refusal.RetryAfter)
	assert.Equal(t, 3, timeout.calls, "and the upstream never saw it")
}

func TestTheUpstreamIsAskedForNoMoreAnswerThanReserved(t *testing.T) {
	r := newRig(t, false)
	id := tenant.Identity{Key: "acme", Tier: "small"}
	ctx, done, e := r.admit(t.Context(), id, ask(40, 0))
	require.Nil(t, e)
	p := &upstream{usage: &llm.Usage{TotalTokens: 10}}
	_, err := r.call(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, DefaultMaxTokens, p.maxTokens, "a caller who set no limit: the reserved answer is the limit upstream")
	done(nil, nil)

	ctx, done, e = r.admit(t.Context(), id, ask(40, 77))
	require.Nil(t, e)
	defer done(nil, nil)
	_, err = r.call(ctx, p)
	require.NoError(t, err)
	assert.Equal(t, 77, p.maxTokens, "the answer a caller asked for is the answer reserved, and the limit upstream")
}

// gated is an upstream that answers only when its gate opens.
type gated struct {
	upstream
	entered, gate chan struct{}
}

func (g *gated) Generate(ctx context.Context, req llm.Request) (llm.Completion, error) {
	close(g.entered)
	<-g.gate
	return g.upstream.Generate(ctx, req)
}

func TestACallThatEndsAfterItsRequestIsSettledWhenItEnds(t *testing.T) {
	r := newRig(t, false)
	ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	p := &gated{upstream: upstream{usage: &llm.Usage{TotalTokens: 7}}, entered: make(chan struct{}), gate: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = r.call(ctx, p) }) // a provider that ignores its context, abandoned by its attempt
	<-p.entered
	done(nil, nil) // the request ended before its call did
	assert.Equal(t, 2000-150, r.left(t, "acme", 2000), "the running call keeps its reservation: nothing is refunded while the upstream works")
	close(p.gate)
	wg.Wait()
	assert.Equal(t, 2000-7, r.left(t, "acme", 2000), "and is settled at its usage when it ends")
}

func TestALeaseIsRenewedWhileItsRequestRunsAndNotAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var renewals atomic.Int32
		stop := keepAlive(5*time.Second, func() { renewals.Add(1) })
		time.Sleep(16 * time.Second)
		stop()
		assert.Equal(t, int32(3), renewals.Load(), "every 5 s: at 5, 10 and 15")
		time.Sleep(time.Minute)
		assert.Equal(t, int32(3), renewals.Load(), "stop ended the loop, and returned only once it had")
	})
}

func TestALeaseLostWhileItsRequestRunsIsLogged(t *testing.T) {
	var logs testkit.LogBuffer
	r := newRigWith(t, false, func(c *Config) {
		c.LeaseTTL = 30 * time.Millisecond // renewed every 10 ms of real time
		c.Log = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	_, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tenant: "acme", Tier: "small"}, ask(400, 50))
	require.Nil(t, e)
	defer done(nil, nil)
	r.m.FastForward(time.Minute) // Redis' clock jumps past the lease's TTL: a stall that outlived it
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "in-flight lease lost") },
		5*time.Second, 5*time.Millisecond, "the next renewal finds the lease gone, and says so")
	assert.Contains(t, logs.String(), `"tenant":"acme"`)
}

// panicker is a provider with a bug.
type panicker struct{}

func (panicker) Name() string         { return "up" }
func (panicker) HonoursContext() bool { return true }
func (panicker) Generate(context.Context, llm.Request) (llm.Completion, error) {
	panic("a bug")
}
func (panicker) Stream(context.Context, llm.Request, func(llm.Chunk) error) (llm.Completion, error) {
	panic("a bug")
}

func TestACallThatPanicsIsSettledAtItsReservation(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			r := newRig(t, false)
			ctx, done, e := r.admit(t.Context(), tenant.Identity{Key: "acme", Tier: "small"}, ask(400, 50))
			require.Nil(t, e)
			var err error
			if stream {
				_, err = r.stream(ctx, panicker{})
			} else {
				_, err = r.call(ctx, panicker{})
			}
			require.ErrorIs(t, err, llm.ErrPanic)
			done(nil, nil)
			open := r.g.tokens.Keys("acme")[1]
			if r.m.Exists(open) {
				members, err := r.m.ZMembers(open)
				require.NoError(t, err)
				for _, m := range members {
					assert.True(t, strings.HasPrefix(m, "settled:"), "no reservation is left open for its window: %q", m)
				}
			}
			assert.Equal(t, 2000-150, r.left(t, "acme", 2000), "whether it reached the upstream is not known: it keeps its reservation")
		})
	}
}
