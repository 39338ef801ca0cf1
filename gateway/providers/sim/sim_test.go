package sim

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/production-go/gateway-lab/gateway/chatapi"
	"github.com/production-go/gateway-lab/gateway/llm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var req = llm.Request{Chat: chatapi.NewRequest("why is the sky blue", true)}

func TestStreamsWordsAfterTheLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{Name: "alpha", Latency: 100 * time.Millisecond, ChunkDelay: 10 * time.Millisecond})
		require.NoError(t, err)
		start := time.Now()
		var chunks []string
		var first time.Duration
		c, err := p.Stream(t.Context(), req, func(ch llm.Chunk) error {
			a, ok, err := chatapi.ReadAnswer("alpha", ch.Raw)
			require.True(t, ok)
			require.NoError(t, err)
			assert.Equal(t, "alpha-1", a.Model, "every chunk names the model")
			if a.Text == "" {
				return nil // the role chunk, the finish chunk
			}
			if len(chunks) == 0 {
				first = time.Since(start)
			}
			chunks = append(chunks, a.Text)
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, "alpha-1", c.Model)
		assert.Equal(t, 100*time.Millisecond, first, "the first chunk arrives after Latency")
		assert.Greater(t, len(chunks), 5)
		assert.Equal(t, 100*time.Millisecond+time.Duration(len(chunks)-1)*10*time.Millisecond, time.Since(start))
	})
}

func TestSameSeedReplaysTheSameFailures(t *testing.T) {
	run := func() []bool {
		p, err := New(Config{Name: "a", ErrorRate: 0.5, Seed: 42})
		require.NoError(t, err)
		var out []bool
		for range 40 {
			_, err := p.Generate(context.Background(), req)
			out = append(out, err != nil)
		}
		return out
	}
	a, b := run(), run()
	assert.Equal(t, a, b, "a seed replays the same sequence of failures")
	assert.Contains(t, a, true)
	assert.Contains(t, a, false)
}

func TestErrorKinds(t *testing.T) {
	for kind, check := range map[Kind]func(*testing.T, error){
		KindRateLimited: func(t *testing.T, err error) {
			var e *chatapi.UpstreamError
			require.ErrorAs(t, err, &e)
			assert.Equal(t, http.StatusTooManyRequests, e.Status)
			assert.Equal(t, 2*time.Second, e.RetryAfter())
			assert.Equal(t, llm.ReasonRateLimited, llm.ReasonOf(err))
		},
		KindBadRequest: func(t *testing.T, err error) {
			var e *chatapi.UpstreamError
			require.ErrorAs(t, err, &e)
			assert.Equal(t, http.StatusBadRequest, e.Status)
			assert.Equal(t, "context_length_exceeded", e.Code, "shaped like the real refusal, code included")
			assert.Equal(t, llm.ReasonClient, llm.ReasonOf(err))
		},
		KindServer: func(t *testing.T, err error) { assert.Equal(t, llm.ReasonServer, llm.ReasonOf(err)) },
		KindTimeout: func(t *testing.T, err error) {
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, llm.ReasonTimeout, llm.ReasonOf(err))
		},
		KindReset: func(t *testing.T, err error) {
			assert.ErrorIs(t, err, syscall.ECONNRESET, "a reset is a connection error, as a real one is")
			assert.Equal(t, llm.ReasonConnection, llm.ReasonOf(err))
		},
	} {
		t.Run(string(kind), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p, err := New(Config{Name: "a", ErrorRate: 1, ErrorKinds: []Kind{kind}, RetryAfter: 2 * time.Second})
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				_, err = p.Generate(ctx, req)
				cancel()
				check(t, err)
			})
		})
	}
}

func TestOutageWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Config{Name: "a", Outages: []Window{{Start: time.Second, End: 2 * time.Second}}})
		require.NoError(t, err)
		_, err = p.Generate(t.Context(), req)
		assert.NoError(t, err)
		time.Sleep(time.Second)
		_, err = p.Generate(t.Context(), req)
		var e *chatapi.UpstreamError
		require.True(t, errors.As(err, &e), "inside the outage every call fails")
		assert.Equal(t, http.StatusServiceUnavailable, e.Status)
		time.Sleep(time.Second)
		_, err = p.Generate(t.Context(), req)
		assert.NoError(t, err, "after the outage calls succeed again")
	})
}

func TestParse(t *testing.T) {
	cfg, err := Parse("name=alpha,latency=80ms,jitter=20ms,error-rate=0.1,errors=500|429,outage=30s-60s,seed=7")
	require.NoError(t, err)
	assert.Equal(t, Config{Name: "alpha", Latency: 80 * time.Millisecond, Jitter: 20 * time.Millisecond, ErrorRate: 0.1,
		ErrorKinds: []Kind{KindServer, KindRateLimited}, Outages: []Window{{30 * time.Second, 60 * time.Second}}, Seed: 7}, cfg)
	for _, bad := range []string{"latency=1s", "name=a,latency=fast", "name=a,colour=blue", "name=a,outage=30s"} {
		t.Run(bad, func(t *testing.T) {
			_, err := Parse(bad)
			assert.ErrorIs(t, err, ErrInvalidConfig, bad)
		})
	}
	_, err = New(Config{Name: "a", ErrorKinds: []Kind{"418"}})
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

// Whatever schema a caller sends, the simulated answer is built without a
// panic: a request's own content must never crash a provider (and open its
// breaker for every tenant).
func TestOddSchemasNeverCrashTheAnswer(t *testing.T) {
	p, err := New(Config{Name: "alpha"})
	require.NoError(t, err)
	for _, tc := range []struct{ name, schema string }{
		{"a property whose type list is empty", `{"type":"object","required":["a"],"properties":{"a":{"type":[]}}}`},
		{"an empty type list", `{"type":[]}`},
		{"a type list of numbers", `{"type":[1,2]}`},
		{"a type list of two names", `{"type":["null","string"]}`},
		{"a type that is an object", `{"type":{}}`},
		{"an empty anyOf", `{"anyOf":[]}`},
		{"an empty enum", `{"enum":[]}`},
		{"required as a string", `{"type":"object","required":"a"}`},
		{"required naming a number", `{"type":"object","required":[1]}`},
		{"a list", `[]`},
		{"a number", `7`},
		{"null", `null`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			schema := tc.schema
			for _, body := range []string{
				`{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":` + schema + `}}]}`,
				`{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":` + schema + `}}}`,
			} {
				chat, err := chatapi.Parse([]byte(body))
				require.NoError(t, err, body)
				require.NotPanics(t, func() {
					_, err = p.Generate(t.Context(), llm.Request{Chat: chat})
				}, schema)
				assert.NoError(t, err, schema)
			}
		})
	}
}

func TestSlowdownSlowsAShareOfCallsInItsWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := Parse("name=a,latency=10ms,slow=1s-2s:50ms@0.25,seed=3")
		require.NoError(t, err)
		require.Equal(t, []Slowdown{{Window: Window{Start: time.Second, End: 2 * time.Second}, Extra: 50 * time.Millisecond, Share: 0.25}}, cfg.Slowdowns)
		p, err := New(cfg)
		require.NoError(t, err)
		took := func() time.Duration {
			start := time.Now()
			_, err := p.Generate(t.Context(), req)
			require.NoError(t, err)
			return time.Since(start)
		}
		for range 20 {
			assert.Equal(t, 10*time.Millisecond, took(), "before the window every call is fast")
		}
		time.Sleep(time.Second - 200*time.Millisecond)
		slow := 0
		for range 40 { // 40 calls of 10–60 ms stay inside the 1 s window
			if took() > 10*time.Millisecond {
				slow++
			}
		}
		assert.InDelta(t, 10, slow, 6, "about a quarter of the calls in the window are slow")
		_, err = Parse("name=a,slow=1s-2s:500ms")
		assert.ErrorIs(t, err, ErrInvalidConfig)
	})
}

func TestCapacitySlowsCallsInProportionAboveIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := Parse("name=a,latency=100ms,capacity=2")
		require.NoError(t, err)
		require.Equal(t, 2, cfg.Capacity)
		p, err := New(cfg)
		require.NoError(t, err)
		took := make([]time.Duration, 4)
		var wg sync.WaitGroup
		for i := range took { // four calls start at once, one after another
			wg.Go(func() {
				start := time.Now()
				_, err := p.Generate(t.Context(), req)
				assert.NoError(t, err)
				took[i] = time.Since(start)
			})
			synctest.Wait()
		}
		wg.Wait()
		assert.Equal(t, []time.Duration{100 * time.Millisecond, 100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond}, took,
			"the 1st and 2nd fit the capacity; the 3rd starts with 3 in flight (×1.5), the 4th with 4 (×2)")

		start := time.Now()
		_, err = p.Generate(t.Context(), req)
		require.NoError(t, err)
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "the calls that ended left the capacity free")

		_, err = Parse("name=a,capacity=-1")
		require.NoError(t, err, "Parse reads; New checks")
		_, err = New(Config{Name: "a", Capacity: -1})
		assert.ErrorIs(t, err, ErrInvalidConfig)
	})
}

// streamText streams req from p and returns the text and the error.
func streamText(t *testing.T, p *Provider, r llm.Request) (string, error) {
	t.Helper()
	var text string
	_, err := p.Stream(t.Context(), r, func(c llm.Chunk) error {
		pc, err := chatapi.ReadPiece(c.Raw)
		require.NoError(t, err)
		text += pc.Text
		return nil
	})
	return text, err
}

func TestACutStreamDropsHalfwayAndAPrefillIsContinued(t *testing.T) {
	whole, err := New(Config{Name: "alpha"})
	require.NoError(t, err)
	full, err := streamText(t, whole, req)
	require.NoError(t, err)

	cut, err := New(Config{Name: "alpha", ErrorRate: 1, ErrorKinds: []Kind{KindCut}})
	require.NoError(t, err)
	part, err := streamText(t, cut, req)
	require.ErrorIs(t, err, syscall.ECONNRESET, "the connection drops mid-answer")
	require.NotEmpty(t, part)
	assert.True(t, len(part) < len(full) && full[:len(part)] == part, "%q is the start of %q", part, full)
	_, err = cut.Generate(t.Context(), req)
	assert.ErrorIs(t, err, syscall.ECONNRESET)

	chat, err := chatapi.Parse([]byte(`{"stream":true,"messages":[{"role":"user","content":"why is the sky blue"}]}`))
	require.NoError(t, err)
	chat, err = chat.WithPrefill(part, chatapi.PrefillAssistant)
	require.NoError(t, err)
	rest, err := streamText(t, whole, llm.Request{Chat: chat})
	require.NoError(t, err)
	assert.Equal(t, full, part+rest, "the continuation is the rest of the answer the prefill began")
}
