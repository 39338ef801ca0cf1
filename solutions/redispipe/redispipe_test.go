package redispipe

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	distlimit "github.com/production-go/gateway-lab/solutions/07-distlimit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }

func newScripter(t *testing.T, rdb Client) *Scripter {
	t.Helper()
	s, err := New(rdb)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var echo = redis.NewScript(`return ARGV[1]`)

func TestIntegrationEachCallerGetsItsOwnAnswer(t *testing.T) {
	rdb := redistest.Client(t)
	s := newScripter(t, rdb)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Go(func() {
			for i := range 20 {
				want := strconv.Itoa(g*1000 + i)
				got, err := echo.Run(t.Context(), s, []string{redistest.Prefix(t) + "echo"}, want).Text()
				if err != nil || got != want {
					errs <- errors.New("caller " + want + " got " + got)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestIntegrationABucketPipelinedAdmitsExactlyItsBurst(t *testing.T) {
	rdb := redistest.Client(t)
	s := newScripter(t, rdb)
	const burst = 25
	l, err := distlimit.New(s, distlimit.Config{Rate: 0.001, Burst: burst, Prefix: redistest.Prefix(t) + "rl:", Timeout: time.Second})
	require.NoError(t, err)
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 4 {
				d, err := l.Allow(t.Context(), "tenant")
				if !assert.NoError(t, err) {
					return
				}
				if d.Allowed {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, burst, allowed, "128 decisions in shared round trips: the script is still one atomic step per decision")
}

func TestIntegrationAStalledRedisEndsEachCallAtItsCallersDeadline(t *testing.T) {
	srv := redistest.Own(t)
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	// As secure_app builds it: a lone call runs on the client directly,
	// which honours a deadline only with ContextTimeoutEnabled.
	opts.MaxRetries, opts.ReadTimeout, opts.ContextTimeoutEnabled = -1, 3*time.Second, true
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb)
	require.NoError(t, err)
	require.NoError(t, echo.Run(t.Context(), s, []string{"k"}, "warm").Err(), "the script is loaded")

	srv.Stall(1500 * time.Millisecond)
	within := func(what string, ctx context.Context, want error) {
		t.Helper()
		returned := make(chan error, 1)
		go func() { returned <- echo.Run(ctx, s, []string{"k"}, what).Err() }()
		select {
		case err := <-returned:
			assert.ErrorIs(t, err, want, "%s: the caller's own cause", what)
		case <-time.After(time.Second): // a watchdog for a hang, not a timing assertion
			t.Fatalf("%s: want the call to end with %v while Redis sleeps, got it waiting for Redis", what, want)
		}
	}
	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	within("alone, on the client", short, context.DeadlineExceeded)

	// A call that waits out the stall keeps the next ones company: they
	// go through the pipeline, which must still let each caller go.
	long := make(chan error, 1)
	go func() { long <- echo.Run(t.Context(), s, []string{"k"}, "long").Err() }()
	for s.inFlight.Load() == 0 {
		runtime.Gosched() // until the long call is in flight
	}
	short2, cancel2 := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel2()
	within("pipelined, deadline", short2, context.DeadlineExceeded)
	left, leave := context.WithCancel(t.Context())
	go func() {
		for s.inFlight.Load() < 2 {
			runtime.Gosched() // until the call below is in flight
		}
		leave()
	}()
	within("pipelined, a caller who leaves mid-call", left, context.Canceled)
	assert.NoError(t, <-long, "the long call is answered when Redis wakes")

	require.NoError(t, s.Close(), "Close waits for the abandoned calls, which finish when Redis wakes")
	assert.ErrorIs(t, echo.Run(t.Context(), s, []string{"k"}, "z").Err(), ErrClosed)
}

func TestADoneContextSendsNothing(t *testing.T) {
	// No server at all: a call with a done context must not even try.
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 10 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	s := newScripter(t, rdb)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, s.EvalSha(ctx, "0000", []string{"k"}).Err(), context.Canceled)
	ctx, cancel = context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	assert.ErrorIs(t, s.Eval(ctx, "return 1", []string{"k"}).Err(), context.DeadlineExceeded)
}

func TestNewRefusesNoClient(t *testing.T) {
	_, err := New(nil)
	assert.Error(t, err)
}

func TestIntegrationWithoutContextTimeoutsEveryCallTakesThePipelineAndKeepsItsDeadline(t *testing.T) {
	srv := redistest.Own(t)
	opts, err := redis.ParseURL(srv.URL())
	require.NoError(t, err)
	opts.ReadTimeout = 3 * time.Second // ContextTimeoutEnabled off: this client would wait the 3 s
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	s := newScripter(t, rdb)
	require.NoError(t, echo.Run(t.Context(), s, []string{"k"}, "warm").Err())
	srv.Stall(1500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- echo.Run(ctx, s, []string{"k"}, "alone").Err() }()
	select {
	case err := <-returned:
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(time.Second): // a watchdog for a hang, not a timing assertion
		t.Fatal("a lone call on a client that ignores deadlines must still end at its own: want it pipelined, got it waiting for Redis")
	}
}

func TestThePipelineHasAClientOfItsOwnThatNeverRetries(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: 3, ContextTimeoutEnabled: true, DialerRetries: 1, DialTimeout: 10 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb)
	require.NoError(t, err)
	own, ok := s.pipe.(*redis.Client)
	require.True(t, ok)
	assert.NotSame(t, rdb, own, "a batch retried after its callers left would take their decisions again: the pipeline gets its own client")
	assert.Zero(t, own.Options().MaxRetries, "no retries (go-redis stores -1 as 0 once the client is built)")
	assert.Equal(t, 3, rdb.Options().MaxRetries, "the caller's client keeps its retries for broken connections")
	assert.True(t, s.alone, "a client that honours deadlines may take lone calls")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close twice")
	assert.NotErrorIs(t, rdb.Ping(t.Context()).Err(), redis.ErrClosed, "Close leaves the caller's client open")

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err = New(ring)
	assert.ErrorContains(t, err, "want a *redis.Client or a *redis.ClusterClient")
}
