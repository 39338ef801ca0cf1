package limited_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/production-go/gateway-lab/gateway/providers/limited"
	adaptive "github.com/production-go/gateway-lab/solutions/09-adaptive"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixed is an Algorithm that keeps its limit and records what it is fed.
type fixed struct {
	n       int
	mu      sync.Mutex
	samples []bool // Dropped, per Update
}

func (f *fixed) InitialLimit() int { return f.n }
func (f *fixed) Update(s adaptive.Sample) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.samples = append(f.samples, s.Dropped)
	return f.n
}

func (f *fixed) fed() []bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]bool(nil), f.samples...)
}

// script answers after took with err, counting the calls in flight.
type script struct {
	took     time.Duration
	err      error
	mu       sync.Mutex
	inFlight int
	peak     int
}

func (s *script) Name() string         { return "alpha" }
func (s *script) DefaultModel() string { return "alpha-1" }
func (s *script) HonoursContext() bool { return true }
func (s *script) Generate(ctx context.Context, _ llm.Request) (llm.Completion, error) {
	s.mu.Lock()
	s.inFlight++
	s.peak = max(s.peak, s.inFlight)
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.inFlight--; s.mu.Unlock() }()
	select {
	case <-time.After(s.took):
	case <-ctx.Done():
		return llm.Completion{}, ctx.Err()
	}
	return llm.Completion{Raw: chatapi.NewFrame("alpha-1").Completion("ok", nil, "stop", nil)}, s.err
}

// streaming is a script that streams its answer as two chunks.
type streaming struct{ *script }

func (s streaming) Stream(ctx context.Context, req llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	c, err := s.Generate(ctx, req)
	if err != nil {
		return c, err
	}
	for range 2 {
		if err := emit(llm.Chunk{Raw: []byte(`{}`)}); err != nil {
			return c, err
		}
	}
	return c, nil
}

func wrap(t *testing.T, p llm.Provider, alg *fixed) *limited.Provider {
	t.Helper()
	lim, err := adaptive.New(alg)
	require.NoError(t, err)
	return limited.New(p, lim)
}

var ask = llm.Request{Chat: chatapi.NewRequest("hi", false)}

func TestCallsWaitForAPermitOfTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{took: time.Second}
		l := wrap(t, s, &fixed{n: 2})
		assert.Equal(t, 2, l.Limit())
		start := time.Now()
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() { _, err := l.Generate(t.Context(), ask); assert.NoError(t, err) })
		}
		wg.Wait()
		assert.Equal(t, 2, s.peak, "never more calls at once than the limit")
		assert.Equal(t, 3*time.Second, time.Since(start), "five one-second calls, two at a time")
	})
}

func TestACallThatGetsNoPermitInTimeFailsAsATimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{took: time.Minute}
		l := wrap(t, s, &fixed{n: 1})
		go func() { _, _ = l.Generate(t.Context(), ask) }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := l.Generate(ctx, ask)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the router retries or fails over as for any attempt timeout")
		assert.Contains(t, err.Error(), "adaptive-limit permit", "and the error says what it waited for")
		assert.Equal(t, llm.ReasonTimeout, llm.ReasonOf(err))
	})
}

func TestTheLimitLearnsOnlyFromWhatSaysSomethingAboutTheProvider(t *testing.T) {
	refusal := chatapi.NewUpstreamError("alpha", 400, nil, 0)
	for _, tc := range []struct {
		name string
		err  error
		fed  []bool
	}{
		{"a success", nil, []bool{false}},
		{"a server error is a drop", chatapi.NewUpstreamError("alpha", 503, nil, 0), []bool{true}},
		{"a timeout is a drop", context.DeadlineExceeded, []bool{true}},
		{"the caller's 4xx says nothing", refusal, nil},
		{"a cancellation says nothing", context.Canceled, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				alg := &fixed{n: 4}
				l := wrap(t, &script{took: time.Millisecond, err: tc.err}, alg)
				_, err := l.Generate(t.Context(), ask)
				if tc.err != nil {
					require.ErrorIs(t, err, tc.err)
				}
				assert.Equal(t, tc.fed, alg.fed())
			})
		})
	}
}

func TestAStreamHoldsItsPermitToTheEndAndAClientWhoLeavesSaysNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alg := &fixed{n: 1}
		l := wrap(t, streaming{&script{took: time.Second}}, alg)
		first := make(chan struct{})
		release := make(chan struct{})
		go func() {
			n := 0
			_, _ = l.Stream(t.Context(), ask, func(llm.Chunk) error {
				if n++; n == 1 {
					close(first)
					<-release
				}
				return nil
			})
		}()
		<-first
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := l.Generate(ctx, ask)
		require.ErrorIs(t, err, context.DeadlineExceeded, "the stream still holds the only permit")
		close(release)
		synctest.Wait()
		assert.Equal(t, []bool{false}, alg.fed(), "a whole stream is one success")

		gone := errors.New("client gone")
		_, err = l.Stream(t.Context(), ask, func(llm.Chunk) error { return gone })
		require.ErrorIs(t, err, gone)
		assert.Equal(t, []bool{false}, alg.fed(), "a client that stopped reading says nothing about the provider")
	})
}

func TestAProviderThatCannotStreamIsStreamedWholeUnderOnePermit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alg := &fixed{n: 1}
		s := &script{took: time.Second}
		l := wrap(t, s, alg)
		chunks := 0
		_, err := l.Stream(t.Context(), llm.Request{Chat: chatapi.NewRequest("hi", true)}, func(llm.Chunk) error { chunks++; return nil })
		require.NoError(t, err)
		assert.Equal(t, 1, chunks, "the whole answer as one chunk")
		assert.Equal(t, []bool{false}, alg.fed(), "one call, one permit, one sample")
	})
}

func TestAWrappedProviderKeepsItsNameAndPromises(t *testing.T) {
	l := wrap(t, &script{}, &fixed{n: 1})
	assert.Equal(t, "alpha", l.Name())
	assert.Equal(t, "alpha-1", l.DefaultModel())
	assert.True(t, l.HonoursContext())
}

func TestNewLimiterMakesEitherAlgorithmUnderTheCeiling(t *testing.T) {
	for _, alg := range []limited.Algorithm{limited.AIMD, limited.Gradient} {
		t.Run(string(alg), func(t *testing.T) {
			lim, err := limited.NewLimiter(alg, 32)
			require.NoError(t, err)
			assert.Equal(t, 16, lim.Limit(), "it starts at half the ceiling")
		})
	}
	_, err := limited.NewLimiter("vegas", 32)
	assert.ErrorContains(t, err, "aimd, gradient", "an unknown algorithm names the ones there are")
	_, err = limited.NewLimiter(limited.AIMD, 0)
	assert.Error(t, err)
	lim, err := limited.NewLimiter(limited.AIMD, 1)
	require.NoError(t, err)
	assert.Equal(t, 1, lim.Limit(), "a ceiling of 1 starts at 1, not 0")
}

// panicky panics on every call.
type panicky struct{ script }

func (*panicky) Generate(context.Context, llm.Request) (llm.Completion, error) { panic("provider bug") }

func TestAPanicGivesThePermitBackAndSaysNothingAboutLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		alg := &fixed{n: 1}
		l := wrap(t, &panicky{}, alg)
		for range 3 {
			_, err := l.Generate(t.Context(), ask)
			require.ErrorIs(t, err, llm.ErrPanic, "a panic is an error, not a crash")
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := l.Generate(ctx, ask)
		require.ErrorIs(t, err, llm.ErrPanic,
			"a fourth call gets the only permit (and panics too): had a panic kept it, this call would wait out its deadline")
		assert.Empty(t, alg.fed(), "a provider's bug is not a sample of its load")
	})
}

// slowStream streams one chunk, then says nothing until its context ends.
type slowStream struct{ script }

func (s *slowStream) Stream(ctx context.Context, _ llm.Request, emit func(llm.Chunk) error) (llm.Completion, error) {
	if err := emit(llm.Chunk{Raw: []byte(`{}`)}); err != nil {
		return llm.Completion{}, err
	}
	<-ctx.Done()
	return llm.Completion{}, ctx.Err()
}

func TestAStreamCutForSilenceIsADrop(t *testing.T) {
	silence := fmt.Errorf("stream went idle: %w", context.DeadlineExceeded) // the router's cause for such a cut
	for _, tc := range []struct {
		name string
		emit func(cut func()) func(llm.Chunk) error
	}{
		{"the provider sees its context cancelled", func(cut func()) func(llm.Chunk) error {
			return func(llm.Chunk) error { time.AfterFunc(time.Second, cut); return nil }
		}},
		{"the relay refuses the chunk with the cause", func(cut func()) func(llm.Chunk) error {
			return func(llm.Chunk) error { cut(); return silence }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				alg := &fixed{n: 1}
				l := wrap(t, &slowStream{}, alg)
				ctx, cancel := context.WithCancelCause(t.Context())
				defer cancel(nil)
				_, err := l.Stream(ctx, ask, tc.emit(func() { cancel(silence) }))
				require.Error(t, err)
				assert.Equal(t, []bool{true}, alg.fed(), "an upstream that goes silent is the overload signal the limit learns from")
			})
		})
	}
}
