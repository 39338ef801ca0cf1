// Package redistest gives tests a real Redis, or an honest skip.
//
// Client (and URL) look for a server in this order, once per test binary:
//
//  1. REDIS_URL, when set (e.g. redis://127.0.0.1:6379/9);
//  2. a redis-server binary on PATH, started on a free loopback port for
//     this test run and stopped when the run ends;
//  3. testcontainers-go, when a Docker engine answers — only in a build with
//     -tags testcontainers (the default build leaves Docker out);
//  4. none: the test skips — unless REDIS_INTEGRATION_REQUIRED=1, in which
//     case it fails. A CI job that exists to prove something on real Redis
//     sets that flag, so it cannot go green by skipping.
//
// Tests share a server they may not own: every key a test writes starts with
// Prefix(t), and the helper never runs FLUSHALL or FLUSHDB.
//
// A package that uses this helper checks for leaks and stops the server it
// started from TestMain:
//
//	func TestMain(m *testing.M) { redistest.VerifyTestMain(m) }
package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit/redismark"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// Environment variables the helper reads.
const (
	URLEnv      = "REDIS_URL"
	RequiredEnv = "REDIS_INTEGRATION_REQUIRED"
)

// Marker starts the log line a test prints when it really talks to Redis.
// `labctl integration` requires it in the output of every test it counts.
const Marker = redismark.Real

// ErrNoRedis is wrapped by the reason a search for a server failed.
var ErrNoRedis = errors.New("no Redis server")

// finder is where a server may come from; tests replace its functions to
// exercise the skip-or-fail rules without touching the machine.
type finder struct {
	getenv   func(string) string
	lookPath func(string) (string, error)
	docker   func(ctx context.Context) (url string, stop func(), err error)

	once sync.Once
	url  string
	how  string
	why  error
	stop func()
}

var defaultFinder = &finder{getenv: os.Getenv, lookPath: exec.LookPath, docker: startContainer}

// URL returns the URL of a real Redis server for this test, or skips (or,
// with REDIS_INTEGRATION_REQUIRED=1, fails) the test when there is none.
func URL(tb testing.TB) string {
	tb.Helper()
	return defaultFinder.find(tb)
}

// Client returns a client to a real Redis server, closed when the test ends,
// and deletes the keys under Prefix(tb) at the end of the test.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	url := URL(tb)
	opts, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	rdb := redis.NewClient(opts)
	prefix := Prefix(tb)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		_ = rdb.Close()
	})
	return rdb
}

// Prefix returns a key prefix unique to this test and run (the same for
// every call within one test, different for each -count repetition), with a
// Redis Cluster hash tag so that keys under it may be used in one script.
func Prefix(tb testing.TB) string {
	if p, ok := prefixes.Load(tb); ok {
		return p.(string)
	}
	name := strings.NewReplacer("/", "_", " ", "_", "{", "", "}", "").Replace(tb.Name())
	p := fmt.Sprintf("test:{%s-%d-%d}:", name, os.Getpid(), prefixSeq.Add(1))
	if actual, loaded := prefixes.LoadOrStore(tb, p); loaded {
		return actual.(string)
	}
	tb.Cleanup(func() { prefixes.Delete(tb) })
	return p
}

var (
	prefixes  sync.Map // testing.TB → string
	prefixSeq atomic.Uint64
)

// VerifyTestMain runs the tests, checks that no goroutine outlived them, stops
// a redis-server this binary started, and exits. It is goleak.VerifyTestMain
// with a longer wait: after a pool has failed to dial PoolSize times, go-redis
// starts a probe goroutine that sleeps a second between dials and only looks
// at the pool's closed flag when it wakes, so a test that closed its client
// after stopping a server leaves that goroutine alive for up to a second —
// longer than goleak's own retries (about half a second). rueidis's cluster
// client (gateway/redispipe on a cluster) closes the connections a slot
// refresh replaced from a goroutine that sleeps 5 s first, whether or not
// the client has been closed since. Both end by themselves, so the wait is
// 6 s; it is spent only while a goroutine is still there. A client nobody
// closed keeps its goroutines forever and is still reported.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := settledLeaks(6*time.Second, opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
			code = 1
		}
	}
	if defaultFinder.stop != nil {
		defaultFinder.stop()
	}
	os.Exit(code)
}

// settledLeaks asks goleak until it finds nothing or wait has passed.
func settledLeaks(wait time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(wait)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StopOnExit is a goleak option that stops a redis-server (or container)
// this test binary started, after the leak check, then exits.
func StopOnExit() goleak.Option {
	return goleak.Cleanup(func(code int) {
		if defaultFinder.stop != nil {
			defaultFinder.stop()
		}
		os.Exit(code)
	})
}

func (f *finder) find(tb testing.TB) string {
	tb.Helper()
	f.once.Do(func() { f.url, f.how, f.stop, f.why = f.search() })
	if f.why != nil {
		if f.getenv(RequiredEnv) == "1" {
			tb.Fatalf("redistest: %s=1 but %v", RequiredEnv, f.why)
		}
		tb.Skip(redismark.SkipMessage(f.why.Error(), URLEnv, RequiredEnv))
	}
	tb.Logf("%s at %s (%s)", Marker, redact(f.url), f.how)
	return f.url
}

func (f *finder) search() (url, how string, stop func(), err error) {
	if u := f.getenv(URLEnv); u != "" {
		if err := ping(u); err != nil {
			return "", "", nil, fmt.Errorf("%w: %s=%s does not answer: %v", ErrNoRedis, URLEnv, redact(u), err)
		}
		return u, URLEnv, nil, nil
	}
	var reasons []string
	if bin, err := f.lookPath("redis-server"); err == nil {
		url, stop, err := startServer(bin)
		if err == nil {
			return url, "redis-server started for this run", stop, nil
		}
		reasons = append(reasons, "redis-server on PATH did not start: "+err.Error())
	} else {
		reasons = append(reasons, "no redis-server on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	url, stop, err = f.docker(ctx)
	if err == nil {
		return url, "testcontainers", stop, nil
	}
	reasons = append(reasons, err.Error())
	return "", "", nil, fmt.Errorf("%w: %s unset; %s", ErrNoRedis, URLEnv, strings.Join(reasons, "; "))
}

func ping(url string) error {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return rdb.Ping(ctx).Err()
}

// startServer runs redis-server on a free loopback port, keeping nothing on disk.
func startServer(bin string) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	setParentDeathSignal(cmd)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(url)
		if err == nil {
			return url, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("no answer on port %d after 10s: %w", port, err)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process's port, not test timing
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// redact hides a password in a Redis URL before it is logged.
func redact(u string) string {
	opts, err := redis.ParseURL(u)
	if err != nil || opts.Password == "" {
		return u
	}
	return strings.Replace(u, opts.Password, "xxxxx", 1)
}
