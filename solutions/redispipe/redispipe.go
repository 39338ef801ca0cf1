// Package redispipe runs the shared limits' Lua scripts through go-redis's
// automatic pipelining, so that concurrent decisions share round trips,
// while each caller keeps its own context.
//
// A rate-limit or quota decision is one short script: Redis runs it in
// microseconds, and the caller waits a network round trip for it. With one
// connection per call, 32 concurrent decisions are 32 round trips, and the
// client's pool and the kernel's per-packet work, not Redis, set the
// ceiling. go-redis v9.23's AutoPipeliner collects the commands that arrive
// while a batch is in flight into the next one, so under load many
// decisions share a round trip, and a lone command still goes out at once.
//
// What the AutoPipeliner does not do is honour a command's context once the
// command is queued (its documentation says so: a timer per command would
// cost a goroutine each). The limits here need that: each decision has a
// short timeout of its own, and a caller who leaves must not wait. So every
// pipelined call runs on a goroutine this package owns, and the caller
// returns when its context ends, with the context's error; the command
// itself still completes (or fails) with its batch, and Close waits for
// those. A decision the caller gave up on may have been taken in Redis, as
// with a plain client whose command was already written — but only once:
// go-redis retries a pipeline that timed out, long after its callers left,
// so the pipeline runs on a client of its own with retries off (a plain
// command's timeout is never retried, so the caller's client may keep its
// MaxRetries for broken connections).
package redispipe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is what New needs: a *redis.Client or *redis.ClusterClient (a
// *redis.Ring has no AutoPipeline).
type Client interface {
	redis.Scripter
	AutoPipeline() (*redis.AutoPipeliner, error)
}

// pipeClient is the client of the Scripter's own that carries the pipeline.
type pipeClient interface {
	AutoPipeline() (*redis.AutoPipeliner, error)
	Close() error
}

// Scripter is a redis.Scripter whose EVAL and EVALSHA calls are pipelined
// with the other callers' and end when the caller's context does.
type Scripter struct {
	ap     *redis.AutoPipeliner
	pipe   pipeClient     // the AutoPipeliner's own client: retries off, closed by Close
	direct redis.Scripter // lone calls, SCRIPT LOAD and EXISTS: the caller's client
	// alone is whether a lone call may run on direct: only if that client
	// honours a call's deadline (ContextTimeoutEnabled); else every call
	// takes the pipeline, whose wait honours it.
	alone bool

	mu       sync.Mutex
	closed   bool
	wg       sync.WaitGroup // the calls in flight, abandoned ones included
	inFlight atomic.Int64   // calls between entry and answer (or abandonment)
}

var _ redis.Scripter = (*Scripter)(nil)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("redispipe: closed")

// New returns a Scripter that pipelines through c's shared AutoPipeliner.
func New(c Client) (*Scripter, error) {
	var pipe pipeClient
	var deadlines bool
	switch c := c.(type) {
	case *redis.Client:
		o := *c.Options()
		deadlines, o.MaxRetries = o.ContextTimeoutEnabled, -1
		pipe = redis.NewClient(&o)
	case *redis.ClusterClient:
		o := *c.Options()
		deadlines, o.MaxRetries = o.ContextTimeoutEnabled, -1
		pipe = redis.NewClusterClient(&o)
	case nil:
		return nil, errors.New("redispipe: no Redis client")
	default:
		return nil, fmt.Errorf("redispipe: a %T: want a *redis.Client or a *redis.ClusterClient", c)
	}
	// The blocking face's defaults: one ordered batch in flight, and the
	// callers that arrive meanwhile form the next. A flush delay (tried at
	// 50 and 200 µs) only made blocked callers wait: no gain at 50, half
	// the throughput at 200.
	ap, err := pipe.AutoPipeline()
	if err != nil {
		_ = pipe.Close()
		return nil, fmt.Errorf("redispipe: %w", err)
	}
	return &Scripter{ap: ap, pipe: pipe, direct: c, alone: deadlines}, nil
}

// Each call goes one of two ways. Alone (no other call in flight) it runs
// directly on the client, with the caller's context, as a plain client
// would: a lone decision pays no hand-off to a pipeline and its goroutine.
// With company it joins the pipeline, where it shares a round trip.

// Eval runs a script by its text, pipelined.
func (s *Scripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, "eval", func(ctx context.Context, c redis.Scripter) *redis.Cmd { return c.Eval(ctx, script, keys, args...) })
}

// EvalSha runs a loaded script by its SHA1, pipelined; redis.Script.Run
// falls back to Eval on NOSCRIPT.
func (s *Scripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, "evalsha", func(ctx context.Context, c redis.Scripter) *redis.Cmd { return c.EvalSha(ctx, sha1, keys, args...) })
}

// EvalRO is Eval for a read-only script.
func (s *Scripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, "eval_ro", func(ctx context.Context, c redis.Scripter) *redis.Cmd { return c.EvalRO(ctx, script, keys, args...) })
}

// EvalShaRO is EvalSha for a read-only script.
func (s *Scripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, "evalsha_ro", func(ctx context.Context, c redis.Scripter) *redis.Cmd { return c.EvalShaRO(ctx, sha1, keys, args...) })
}

// ScriptExists asks the server directly.
func (s *Scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return s.direct.ScriptExists(ctx, hashes...)
}

// ScriptLoad loads a script directly (on every shard of a cluster).
func (s *Scripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return s.direct.ScriptLoad(ctx, script)
}

// run makes one pipelined call on a goroutine of its own and waits for it
// or for ctx, whichever ends first.
func (s *Scripter) run(ctx context.Context, name string, call func(context.Context, redis.Scripter) *redis.Cmd) *redis.Cmd {
	if err := ctx.Err(); err != nil {
		return failed(ctx, name, err) // a caller who has left sends nothing
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return failed(ctx, name, ErrClosed)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	if s.inFlight.Add(1) == 1 && s.alone {
		defer s.wg.Done()
		defer s.inFlight.Add(-1)
		cmd := call(ctx, s.direct) // alone: the client honours a deadline itself (ContextTimeoutEnabled)
		if cmd.Err() != nil {
			if err := expired(ctx); err != nil {
				return failed(ctx, name, err) // the caller's cause, not the socket's "i/o timeout"
			}
		}
		return cmd
	}
	done := make(chan *redis.Cmd, 1) // buffered: an abandoned call's goroutine never blocks
	go func() {
		defer s.wg.Done()
		if err := ctx.Err(); err != nil { // left while this goroutine started: send nothing
			done <- failed(ctx, name, err)
			return
		}
		done <- call(ctx, s.ap)
	}()
	defer s.inFlight.Add(-1)
	select {
	case cmd := <-done:
		return cmd
	case <-ctx.Done():
		return failed(ctx, name, ctx.Err())
	}
}

// expired returns ctx's error, or context.DeadlineExceeded once its deadline
// has come even if ctx.Err() does not say so yet (a socket deadline set from
// it fires first).
func expired(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

func failed(ctx context.Context, name string, err error) *redis.Cmd {
	cmd := redis.NewCmd(ctx, name)
	cmd.SetErr(err)
	return cmd
}

// closeWait bounds how long Close waits for calls still in Redis' hands.
const closeWait = 5 * time.Second

// ErrStillWaiting is returned by Close when calls were still waiting for
// Redis after closeWait; their goroutines end when their batch does.
var ErrStillWaiting = errors.New("redispipe: calls still waiting for Redis")

// Close stops new calls, closes the pipeline's own client (its batches in
// flight finish or fail) and waits, up to 5 s, for every call's goroutine,
// the abandoned ones included. The caller's client is not touched. Call
// it before closing that client.
func (s *Scripter) Close() error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()
	var err error
	if first {
		err = s.pipe.Close()
	}
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	select {
	case <-waited:
		return err
	case <-time.After(closeWait):
		return errors.Join(err, ErrStillWaiting)
	}
}
