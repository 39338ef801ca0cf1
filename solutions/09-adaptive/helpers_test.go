package adaptive

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newAIMD(t *testing.T, cfg AIMDConfig) *Limiter {
	t.Helper()
	alg, err := NewAIMD(cfg)
	require.NoError(t, err, "NewAIMD(%+v)", cfg)
	require.NotNil(t, alg, "NewAIMD returned nil")
	l, err := New(alg)
	require.NoError(t, err)
	require.NotNil(t, l, "New returned nil")
	return l
}

func newGradient(t *testing.T, cfg GradientConfig) *Limiter {
	t.Helper()
	alg, err := NewGradient(cfg)
	require.NoError(t, err, "NewGradient(%+v)", cfg)
	require.NotNil(t, alg, "NewGradient returned nil")
	l, err := New(alg)
	require.NoError(t, err)
	require.NotNil(t, l, "New returned nil")
	return l
}

// acquire takes n permits that must be free now. (It waits a fake
// millisecond for each before it gives up, so a wrong limit fails the test
// instead of blocking it.)
func acquire(t *testing.T, l *Limiter, n int) []*Token {
	t.Helper()
	toks := make([]*Token, n)
	for i := range toks {
		ctx, cancel := context.WithTimeout(t.Context(), time.Millisecond)
		tok, err := l.Acquire(ctx)
		cancel()
		require.NoError(t, err, "permit %d of %d should be free now (limit %d, in flight %d)", i+1, n, l.Limit(), l.InFlight())
		require.NotNil(t, tok, "Acquire returned a nil token without an error")
		toks[i] = tok
	}
	return toks
}

// round admits n requests at once, lets latency pass, and ends them all with o.
func round(t *testing.T, l *Limiter, n int, latency time.Duration, o Outcome) {
	t.Helper()
	toks := acquire(t, l, n)
	time.Sleep(latency) // always inside synctest.Test: fake time, no real wait
	for _, tok := range toks {
		tok.Done(o)
	}
}

// acquireAsync runs Acquire in a goroutine; the result arrives on the channel.
type acquireResult struct {
	tok *Token
	err error
	at  time.Duration // fake time since start
}

func acquireAsync(ctx context.Context, l *Limiter, start time.Time) <-chan acquireResult {
	out := make(chan acquireResult, 1)
	go func() {
		tok, err := l.Acquire(ctx)
		out <- acquireResult{tok, err, time.Since(start)}
	}()
	return out
}
