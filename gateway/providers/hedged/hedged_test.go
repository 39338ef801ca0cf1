package hedged

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	hedging "github.com/production-go/gateway-lab/solutions/10-hedging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// scripted is a provider whose k-th call (from 1) takes took[k-1] and then
// answers "call k", or fails with fail[k-1] if that is set. It records how
// each call ended.
type scripted struct {
	took    []time.Duration
	fail    []error
	honours bool

	mu     sync.Mutex
	calls  int
	ended  []string // per call: "answered", or its context's error
	stream int
}

func (s *scripted) Name() string         { return "alpha" }
func (s *scripted) DefaultModel() string { return "alpha-1" }
func (s *scripted) HonoursContext() bool { return s.honours }

func (s *scripted) Generate(ctx context.Context, _ llm.Request) (llm.Completion, error) {
	s.mu.Lock()
	s.calls++
	k := s.calls
	s.mu.Unlock()
	t := time.NewTimer(s.took[k-1])
	defer t.Stop()
	select {
	case <-ctx.Done():
		s.end(ctx.Err().Error())
		return llm.Completion{}, ctx.Err()
	case <-t.C:
	}
	s.end("answered")
	if k <= len(s.fail) && s.fail[k-1] != nil {
		return llm.Completion{}, s.fail[k-1]
	}
	return completion("call " + string(rune('0'+k))), nil
}

func (s *scripted) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	s.mu.Lock()
	s.stream++
	s.mu.Unlock()
	c, err := s.Generate(ctx, req)
	if err == nil {
		err = emit(llm.Chunk{Raw: c.Raw})
	}
	return c, err
}

func (s *scripted) end(how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = append(s.ended, how)
}

func (s *scripted) history() (calls int, ended []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, append([]string(nil), s.ended...)
}

// ask is a request with a prompt.
var ask = llm.Request{Chat: chatapi.NewRequest("hi", false)}

// completion is a whole answer whose text is text.
func completion(text string) llm.Completion {
	return llm.Completion{Raw: chatapi.NewFrame("alpha-1").Completion(text, nil, "stop", nil), Model: "alpha-1"}
}

// textOf is an answer's text, read back from its wire format.
func textOf(t *testing.T, raw []byte) string {
	t.Helper()
	a, ok, err := chatapi.ReadAnswer("alpha", raw)
	require.True(t, ok, "a JSON object: %q", raw)
	require.NoError(t, err)
	return a.Text
}

// counts is an Observer that counts what it hears, per event.
type counts struct {
	mu sync.Mutex
	by map[string]int // "hedged", "won", "refused"
}

func (c *counts) add(event string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]int{}
	}
	c.by[event]++
}

func (c *counts) Hedged(provider string)       { c.add("hedged " + provider) }
func (c *counts) HedgeWon(provider string)     { c.add("won " + provider) }
func (c *counts) HedgeRefused(provider string) { c.add("refused " + provider) }

func (c *counts) of(event string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[event]
}

// hedged wraps p as the service does for cfg, with budget.
func hedged(t *testing.T, p llm.Provider, delay time.Duration, budget *hedging.Budget) (llm.Provider, *counts) {
	t.Helper()
	obs := &counts{}
	h, err := Wrap(p, hedging.Config{Delay: delay}, budget, obs)
	require.NoError(t, err)
	return h, obs
}

func TestHedgeAnswersWhenTheFirstCallIsSlowAndCancelsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &scripted{took: []time.Duration{time.Second, 30 * time.Millisecond}, honours: true}
		h, obs := hedged(t, p, 100*time.Millisecond, nil)
		start := time.Now()
		c, err := h.Generate(t.Context(), ask)
		require.NoError(t, err)
		assert.Equal(t, "call 2", textOf(t, c.Raw), "the hedge answered first")
		assert.Equal(t, 130*time.Millisecond, time.Since(start), "hedged at 100 ms, answered 30 ms later")
		calls, ended := p.history()
		assert.Equal(t, 2, calls)
		assert.Equal(t, []string{"answered", context.Canceled.Error()}, ended,
			"the slow call was cancelled, and had ended, before Generate returned")
		assert.Equal(t, 1.0, float64(obs.of("hedged alpha")))
		assert.Equal(t, 1.0, float64(obs.of("won alpha")))
	})
}

func TestNoHedgeForACallThatAnswersWithinTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &scripted{took: []time.Duration{99 * time.Millisecond}, honours: true}
		h, obs := hedged(t, p, 100*time.Millisecond, nil)
		c, err := h.Generate(t.Context(), ask)
		require.NoError(t, err)
		assert.Equal(t, "call 1", textOf(t, c.Raw))
		calls, _ := p.history()
		assert.Equal(t, 1, calls)
		assert.Zero(t, float64(obs.of("hedged alpha")))
	})
}

func TestTheFirstCallThatWinsAfterAHedgeIsNotCountedAsWon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &scripted{took: []time.Duration{150 * time.Millisecond, time.Second}, honours: true}
		h, obs := hedged(t, p, 100*time.Millisecond, nil)
		c, err := h.Generate(t.Context(), ask)
		require.NoError(t, err)
		assert.Equal(t, "call 1", textOf(t, c.Raw))
		assert.Equal(t, 1.0, float64(obs.of("hedged alpha")))
		assert.Zero(t, float64(obs.of("won alpha")))
	})
}

func TestARefusedHedgeLeavesTheCallAsIfUnhedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		upstreamErr := chatapi.NewUpstreamError("alpha", http.StatusServiceUnavailable, []byte(`{"error":{"message":"busy"}}`), 0)
		p := &scripted{took: []time.Duration{time.Second}, fail: []error{upstreamErr}, honours: true}
		empty, err := hedging.NewBudget(hedging.BudgetConfig{TTL: time.Second})
		require.NoError(t, err)
		h, obs := hedged(t, p, 100*time.Millisecond, empty)
		start := time.Now()
		_, err = h.Generate(t.Context(), ask)
		assert.Same(t, upstreamErr, err, "no hedge ran: the one call's error comes back as it was")
		assert.Equal(t, time.Second, time.Since(start))
		calls, _ := p.history()
		assert.Equal(t, 1, calls)
		assert.Equal(t, 1.0, float64(obs.of("refused alpha")))
		assert.Zero(t, float64(obs.of("hedged alpha")))
	})
}

func TestHedgesSpendTheSharedRetryBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &scripted{took: []time.Duration{time.Second, 10 * time.Millisecond, time.Second, 10 * time.Millisecond}, honours: true}
		oneASecond, err := hedging.NewBudget(hedging.BudgetConfig{TTL: time.Second, MinRetriesPerSec: 1})
		require.NoError(t, err)
		h, obs := hedged(t, p, 100*time.Millisecond, oneASecond)
		c, err := h.Generate(t.Context(), ask)
		require.NoError(t, err)
		assert.Equal(t, "call 2", textOf(t, c.Raw), "the floor allows one hedge")
		assert.Zero(t, oneASecond.Balance("alpha"), "the hedge withdrew from the budget the gateway's retries use")
		c, err = h.Generate(t.Context(), ask)
		require.NoError(t, err)
		assert.Equal(t, "call 3", textOf(t, c.Raw), "the second hedge was refused: the slow call answers")
		assert.Equal(t, 1.0, float64(obs.of("hedged alpha")))
		assert.Equal(t, 1.0, float64(obs.of("refused alpha")))
	})
}

func TestBothCallsFailingReportsTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e1, e2 := errors.New("first"), errors.New("hedge")
		p := &scripted{took: []time.Duration{time.Second, 1500 * time.Millisecond}, fail: []error{e1, e2}, honours: true}
		h, _ := hedged(t, p, 100*time.Millisecond, nil)
		start := time.Now()
		_, err := h.Generate(t.Context(), ask)
		require.ErrorIs(t, err, e2, "the hedge failed last: its error is the last one")
		assert.Equal(t, 1600*time.Millisecond, time.Since(start), "the first call's failure waits for the hedge still running")
	})
}

// panicky panics on every call.
type panicky struct{ scripted }

func (*panicky) Generate(context.Context, llm.Request) (llm.Completion, error) { panic("boom") }

func TestAPanicInAHedgedCallIsAnErrorNotACrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := hedged(t, &panicky{scripted{honours: true}}, 100*time.Millisecond, nil)
		_, err := h.Generate(t.Context(), ask)
		require.ErrorIs(t, err, llm.ErrPanic, "a hedged call runs on Do's goroutine, out of the gateway's recover")
		assert.Contains(t, err.Error(), "boom")
	})
}

func TestTheAttemptDeadlineBoundsTheHedgeToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &scripted{took: []time.Duration{time.Second, time.Second}, honours: true}
		h, _ := hedged(t, p, 100*time.Millisecond, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := h.Generate(ctx, ask)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, context.Canceled)
		assert.Equal(t, 300*time.Millisecond, time.Since(start))
		_, ended := p.history()
		require.Len(t, ended, 2, "both calls ended before Generate returned")
		for _, e := range ended { // the deadline, or Do's cancel racing it by a hair
			assert.Contains(t, []string{context.DeadlineExceeded.Error(), context.Canceled.Error()}, e)
		}
	})
}

func TestAContextAlreadyEndedCallsNothingAndSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func(parent context.Context) (context.Context, context.CancelFunc)
		want error
	}{
		{"cancelled", context.WithCancel, context.Canceled},
		{"expired", func(parent context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(parent, 0)
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &scripted{took: []time.Duration{time.Second}, honours: true}
				h, _ := hedged(t, p, 100*time.Millisecond, nil)
				ctx, cancel := tc.ctx(t.Context())
				cancel()
				_, err := h.Generate(ctx, ask)
				require.ErrorIs(t, err, tc.want, tc.name)
				calls, _ := p.history()
				assert.Zero(t, calls)
			})
		})
	}
}

func TestStreamsAreNotHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &scripted{took: []time.Duration{time.Second}, honours: true}
		h, _ := hedged(t, p, 100*time.Millisecond, nil)
		sp, ok := h.(llm.StreamingProvider)
		require.True(t, ok, "a hedged provider that streams still streams")
		var got []string
		_, err := sp.Stream(t.Context(), ask, func(c llm.Chunk) error { got = append(got, textOf(t, c.Raw)); return nil })
		require.NoError(t, err)
		assert.Equal(t, []string{"call 1"}, got)
		calls, _ := p.history()
		assert.Equal(t, 1, calls, "one stream, no hedge: only one may ever reach the client")
	})
}

func TestAProviderThatIgnoresItsContextIsNotHedged(t *testing.T) {
	p := &scripted{took: []time.Duration{0}}
	h, _ := hedged(t, p, 100*time.Millisecond, nil)
	assert.Same(t, llm.Provider(p), h, "its loser could not be stopped, only waited for")
}

func TestAWrappedProviderKeepsItsName(t *testing.T) {
	p := &scripted{took: []time.Duration{0}, honours: true}
	h, _ := hedged(t, p, time.Millisecond, nil)
	assert.Equal(t, "alpha", h.Name())
	assert.Equal(t, "alpha-1", h.(llm.DefaultModeler).DefaultModel())
	assert.True(t, h.(llm.ContextHonourer).HonoursContext())
}
