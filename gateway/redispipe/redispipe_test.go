package redispipe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redistest"
	distlimit "github.com/production-go/gateway-lab/solutions/07-distlimit"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
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

func answering(s *Scripter) bool { return s.answered.Load() == s.epoch.Load() }

// heldDialer dials as net.Dialer does, except the one dial after hold:
// that one waits until let or until its context ends, as a dial to an
// unreachable host would.
type heldDialer struct {
	mu         sync.Mutex
	next, held chan struct{}
	dials      atomic.Int64
}

func (h *heldDialer) hold() {
	h.mu.Lock()
	h.next = make(chan struct{})
	h.mu.Unlock()
}

func (h *heldDialer) let() {
	h.mu.Lock()
	close(h.held)
	h.mu.Unlock()
}

func (h *heldDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	h.mu.Lock()
	release := h.next
	if release != nil {
		h.next, h.held = nil, release
	}
	h.mu.Unlock()
	h.dials.Add(1)
	if release != nil {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// TestIntegrationACallWaitingForANewConnectionEndsAtItsContext: rueidis
// makes a caller wait for a connection another caller is making, whatever
// its own context says, and hands it the dialler's error. So from a dial
// until an answer, calls wait on goroutines of their own, and a context
// error that is not the caller's is sent once more.
func TestIntegrationACallWaitingForANewConnectionEndsAtItsContext(t *testing.T) {
	rdb0 := redistest.Client(t)
	opts := *rdb0.Options()
	opts.MaxRetries, opts.ContextTimeoutEnabled = -1, false // every call pipelined
	var h heldDialer
	opts.Dialer = h.dial
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	s := newScripter(t, rdb)
	require.False(t, s.alone)
	key := []string{redistest.Prefix(t) + "k"}
	assert.False(t, answering(s), "nothing answered yet on the connection New made")
	require.NoError(t, echo.Run(t.Context(), s, key, "warm").Err())
	assert.True(t, answering(s), "an answered call: the next ones run on their callers' goroutines")

	// Drop the pipeline's connection while idle: no call sees it fail.
	// The next caller dials (held: an unreachable Redis); one arriving
	// meanwhile must still leave at its context.
	kill := func() {
		t.Helper()
		require.NoError(t, rdb0.ClientKillByFilter(t.Context(), "TYPE", "normal", "SKIPME", "yes").Err())
	}
	// dialling starts a call with ctx that is making a new connection: a
	// call that reaches the dropped connection before rueidis noticed
	// ends with its error, and the next one dials.
	dialling := func(ctx context.Context, what string) chan error {
		t.Helper()
		for range 100 {
			before := h.dials.Load()
			done := make(chan error, 1)
			go func() { done <- echo.Run(ctx, s, key, what).Err() }()
			for h.dials.Load() == before {
				select {
				case err := <-done:
					require.Error(t, err, "%s: answered on a connection that was dropped", what)
					goto again
				default:
					runtime.Gosched() // until the call's connection is being made
				}
			}
			return done
		again:
		}
		t.Fatalf("%s: no call made a new connection", what)
		return nil
	}
	kill()
	h.hold()
	dialler := dialling(t.Context(), "dialler")
	assert.False(t, answering(s), "a connection being made: the next calls wait on goroutines of their own")
	left, leave := context.WithCancel(t.Context())
	go func() {
		for s.inFlight.Load() < 2 {
			runtime.Gosched() // until the call below is in flight
		}
		leave()
	}()
	returned := make(chan error, 1)
	go func() { returned <- echo.Run(left, s, key, "left").Err() }()
	select {
	case err := <-returned:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(time.Second): // a watchdog for a hang, not a timing assertion
		t.Fatal("a caller who left while another dialled: want context.Canceled, got it waiting for that dial")
	}
	h.let()
	assert.NoError(t, <-dialler, "the dialler is answered once its dial goes through")
	// The left caller's call may still end after the next call began (its
	// goroutine outlives its caller): that ending is a call unanswered, and
	// the answer to a call begun before it does not count. So: calls until
	// one begun after every earlier one ended is answered.
	for range 100 {
		require.NoError(t, echo.Run(t.Context(), s, key, "after").Err())
		if answering(s) {
			break
		}
		runtime.Gosched()
	}
	assert.True(t, answering(s), "answered again: back on the callers' goroutines")

	// Now the dialler is the one who leaves: rueidis hands its context's
	// error to the caller waiting for the same connection, who did not
	// leave and must not hear "context canceled". Nothing was sent for
	// it: it is sent once more.
	kill()
	h.hold()
	gone, goneNow := context.WithCancel(t.Context())
	leaver := dialling(gone, "leaver")
	stayer := make(chan error, 1)
	go func() { stayer <- echo.Run(t.Context(), s, key, "stayer").Err() }()
	for s.inFlight.Load() < 2 {
		runtime.Gosched() // until the stayer is in flight too
	}
	goneNow() // the leaver's held dial ends with its context; the stayer's second try dials freely
	assert.ErrorIs(t, <-leaver, context.Canceled)
	assert.NoError(t, <-stayer, "the leaver's cause is not the stayer's")
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

func TestThePipelineTakesTheClientsSettingsAndNeverRetries(t *testing.T) {
	var dialed []string
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DB: 3, Username: "u", Password: "p", ClientName: "gw",
		Protocol: 2, ReadTimeout: 700 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, MaxRetries: 3,
		ContextTimeoutEnabled: true,
		Dialer: func(_ context.Context, network, addr string) (net.Conn, error) {
			dialed = append(dialed, network+" "+addr)
			return nil, errors.New("no dialing in this test")
		}})
	t.Cleanup(func() { _ = rdb.Close() })
	var epoch atomic.Uint64
	opt, deadlines, err := options(rdb, &epoch)
	require.NoError(t, err)
	assert.True(t, deadlines, "a client that honours deadlines may take lone calls")
	assert.Equal(t, []string{"127.0.0.1:1"}, opt.InitAddress)
	assert.True(t, opt.ForceSingleClient, "one server: no cluster discovery")
	assert.Equal(t, 3, opt.SelectDB)
	assert.Equal(t, "u", opt.Username)
	assert.Equal(t, "p", opt.Password)
	assert.Equal(t, "gw", opt.ClientName)
	assert.True(t, opt.AlwaysRESP2, "the client's protocol")
	assert.Equal(t, 700*time.Millisecond, opt.ConnWriteTimeout, "the longer of the client's read and write timeouts")
	assert.True(t, opt.DisableRetry, "a call retried after its caller left would take a decision nobody asked for")
	assert.True(t, opt.DisableCache)
	assert.Equal(t, -1, opt.PipelineMultiplex, "one connection")
	assert.Equal(t, 64<<10, opt.ReadBufferEachConn, "not rueidis's 0.5 MiB")
	assert.Equal(t, 64<<10, opt.WriteBufferEachConn, "not rueidis's 0.5 MiB")
	_, err = opt.DialCtxFn(t.Context(), "127.0.0.1:1", nil, nil)
	require.Error(t, err)
	assert.Equal(t, []string{"tcp 127.0.0.1:1"}, dialed, "the pipeline dials through the client's own dialer (its TLS, its unix sockets)")

	plain := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = plain.Close() })
	opt, deadlines, err = options(plain, &epoch)
	require.NoError(t, err)
	assert.False(t, deadlines, "without ContextTimeoutEnabled every call takes the pipeline")
	assert.False(t, opt.AlwaysRESP2, "RESP3, go-redis's default")

	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, Username: "cu", Password: "cp",
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}, DialTimeout: 250 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cluster.Close() })
	opt, deadlines, err = options(cluster, &epoch)
	require.NoError(t, err)
	assert.True(t, deadlines)
	assert.Equal(t, []string{"127.0.0.1:1", "127.0.0.1:2"}, opt.InitAddress)
	assert.False(t, opt.ForceSingleClient, "a cluster: the pipeline learns its slots")
	assert.Equal(t, "cu", opt.Username)
	assert.Equal(t, "cp", opt.Password)
	assert.Equal(t, 250*time.Millisecond, opt.Dialer.Timeout)
	// TLS to every node, as go-redis dials it: the first byte a node sees
	// opens a TLS handshake record.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	first := make(chan byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			first <- 0
			return
		}
		defer c.Close()
		b := make([]byte, 1)
		_, _ = c.Read(b)
		first <- b[0]
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if c, err := opt.DialCtxFn(ctx, ln.Addr().String(), nil, nil); err == nil {
		_ = c.Close()
	}
	assert.Equal(t, byte(0x16), <-first, "a TLS handshake record")
	assert.True(t, opt.DisableRetry)

	creds := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", CredentialsProvider: func() (string, string) { return "cu2", "cp2" }})
	t.Cleanup(func() { _ = creds.Close() })
	opt, _, err = options(creds, &epoch)
	require.NoError(t, err)
	require.NotNil(t, opt.AuthCredentialsFn)
	got, err := opt.AuthCredentialsFn(rueidis.AuthCredentialsContext{})
	require.NoError(t, err)
	assert.Equal(t, rueidis.AuthCredentials{Username: "cu2", Password: "cp2"}, got, "credentials asked for at each dial, as go-redis does")

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	_, err = New(ring)
	assert.ErrorContains(t, err, "want a *redis.Client or a *redis.ClusterClient")
}

func TestCloseTwiceAndCallsAfterClose(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 10 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := New(rdb)
	require.NoError(t, err, "a server that does not answer yet is not New's failure: the pipeline dials when it is needed")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close twice")
	assert.ErrorIs(t, s.EvalSha(t.Context(), "0000", []string{"k"}).Err(), ErrClosed)
	assert.NotErrorIs(t, rdb.Ping(t.Context()).Err(), redis.ErrClosed, "Close leaves the caller's client open")
}

func TestArgumentsAreWrittenAsGoRedisWritesThem(t *testing.T) {
	when := time.Date(2026, 12, 2, 4, 5, 6, 7, time.UTC)
	for _, c := range []struct {
		arg  any
		want string
	}{
		{"s", "s"}, {[]byte("b"), "b"}, {-7, "-7"}, {int8(-8), "-8"}, {int16(16), "16"}, {int32(32), "32"}, {int64(-64), "-64"},
		{uint(1), "1"}, {uint8(8), "8"}, {uint16(16), "16"}, {uint32(32), "32"}, {uint64(1 << 63), "9223372036854775808"},
		{float32(0.1), "0.10000000149011612"}, {1.5, "1.5"}, {1e21, "1000000000000000000000"}, {true, "1"}, {false, "0"}, {nil, ""},
		{when, "2026-12-02T04:05:06.000000007Z"}, {1500 * time.Millisecond, "1500000000"},
	} {
		got, err := argString(c.arg)
		require.NoError(t, err, "%T", c.arg)
		assert.Equal(t, c.want, got, "%T %v", c.arg, c.arg)
	}
	_, err := argString([]int{1})
	assert.ErrorContains(t, err, "can't marshal []int")
}

// TestIntegrationThePipelineAnswersAsTheClientDoes runs the same scripts on
// go-redis and on the pipeline and wants the same values and errors, so
// that a script's caller cannot tell which path its call took.
func TestIntegrationThePipelineAnswersAsTheClientDoes(t *testing.T) {
	rdb := redistest.Client(t)
	s := newScripter(t, rdb)
	s.alone = false // every call through the pipeline
	piped := func(name, scriptOrSha string, keys []string, args []any) *redis.Cmd {
		return s.run(t.Context(), name, scriptOrSha, keys, args, nil)
	}
	key := []string{redistest.Prefix(t) + "same"}
	args := []any{"s", -7, int64(1) << 40, 2.5, true, 1500 * time.Millisecond, []byte("b")}
	for _, script := range []string{
		`return ARGV`,
		`return 42`,
		`return 3.7`,
		`return "text"`,
		`return {1, "two", {3, {"four"}}, false, 5}`,
		`return nil`,
		`return false`,
		`return true`,
		`return redis.status_reply("FINE")`,
		`return redis.error_reply("MYERR the script said no")`,
		`return redis.call("INCRBY", KEYS[1], 2)`,
		`return redis.call("NOSUCHCOMMAND")`,
		`return string.rep("x", 300000)`, // a reply larger than one read
	} {
		want := rdb.Eval(t.Context(), script, key, args...)
		got := piped("eval", script, key, args)
		assert.Equal(t, fmt.Sprint(want.Err()), fmt.Sprint(got.Err()), "%s: error", script)
		assert.Equal(t, errors.Is(want.Err(), redis.Nil), errors.Is(got.Err(), redis.Nil), "%s: redis.Nil", script)
		var wantRE, gotRE redis.Error
		assert.Equal(t, errors.As(want.Err(), &wantRE), errors.As(got.Err(), &gotRE), "%s: an error reply is a redis.Error", script)
		if script == `return redis.call("INCRBY", KEYS[1], 2)` {
			assert.Equal(t, want.Val().(int64)+2, got.Val(), "%s: the pipeline ran it once more", script)
			continue
		}
		assert.Equal(t, want.Val(), got.Val(), "%s: value", script)
	}

	// The one text that reads differently (see replyErr).
	err := piped("eval", `return redis.error_reply("no code")`, key, nil).Err()
	assert.EqualError(t, err, "ERR no code")

	// EVALSHA of a script Redis does not hold: NOSCRIPT, which
	// redis.Script.Run answers by sending the script's text.
	missing := redis.NewScript(`return "loaded on demand ` + redistest.Prefix(t) + `"`)
	err = piped("evalsha", missing.Hash(), key, nil).Err()
	assert.ErrorIs(t, err, redis.ErrNoScript, "as go-redis's Eval family reports it")
	v, err := missing.Run(t.Context(), s, key).Text()
	require.NoError(t, err)
	assert.Equal(t, "loaded on demand "+redistest.Prefix(t), v)
	_, err = piped("evalsha_ro", missing.Hash(), key, nil).Text()
	assert.NoError(t, err, "EVALSHA_RO after the load")
	_, err = piped("eval_ro", `return redis.call("GET", KEYS[1])`, key, nil).Text()
	assert.NoError(t, err, "EVAL_RO")
	err = piped("eval", "return 1", key, []any{struct{}{}}).Err()
	assert.ErrorContains(t, err, "eval argument 1: can't marshal struct {}", "an argument go-redis could not write either: nothing sent")
}
