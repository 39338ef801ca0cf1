// Package redispipe runs the shared limits' Lua scripts so that concurrent
// decisions share round trips, while each caller keeps its own context.
//
// A rate-limit or quota decision is one short script: Redis runs it in a few
// microseconds, and the caller waits a network round trip for it. With one
// connection per call, 32 concurrent decisions are 32 round trips, and the
// client's pool and the kernel's per-packet work, not Redis, set the
// ceiling. Pipelining sends the decisions that arrive together down one
// connection in one write and reads their answers back in one read.
//
// Two clients do the work. A call with no other in flight runs directly on
// the caller's go-redis client, as a plain call would: a lone decision pays
// no hand-off to a pipeline. A call with company goes to a rueidis client
// of the Scripter's own, on one connection, which pipelines by design: its
// writer goroutine flushes whatever callers queued while it wrote the last
// batch, its reader hands each answer to its caller, and the two overlap
// (full duplex). go-redis v9.23's AutoPipeliner was the first choice, since
// it is the client the product already has; measured side by side in one
// run (make bench-redis, docs/performance.md) it reached about 1.5× the
// decisions of go-redis/redis_rate at 32 goroutines, rueidis on one
// connection about 2×: go-redis's blocking face waits for one batch's
// answers before it writes the next, so the client and Redis take turns.
// Its deferred face in full duplex honours each caller's deadline and
// could do this package's work alone, at about 0.9× rueidis's decisions
// in the same rounds, behind an API v9.23 marks experimental
// (docs/performance.md, "One client, or two").
//
// Each caller keeps its context: rueidis ends a queued call's wait when its
// context ends, as the lone path's client does (ContextTimeoutEnabled). A
// decision the caller gave up on may still be taken in Redis, as with any
// client whose command was already written — but only once: the pipeline's
// client never retries (a call retried after its caller left would take a
// second decision nobody asked for).
package redispipe

import (
	"context"
	"crypto/tls"
	"encoding"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Client is what New needs: a *redis.Client or a *redis.ClusterClient. Its
// address, database, credentials, TLS and dial timeout are the pipeline's
// too.
type Client interface {
	redis.Scripter
}

// Scripter is a redis.Scripter whose EVAL and EVALSHA calls are pipelined
// with the other callers' and end when the caller's context does.
type Scripter struct {
	pipe   rueidis.Client // concurrent calls: one connection, pipelined
	direct redis.Scripter // lone calls, SCRIPT LOAD and EXISTS: the caller's client
	// alone is whether a lone call may run on direct: only if that client
	// honours a call's deadline (ContextTimeoutEnabled, and socket
	// timeouts not disabled); else every call takes the pipeline, which
	// honours it.
	alone bool
	// epoch counts the pipeline's connections made and its calls ended
	// without an answer; answered is the epoch in which a call was last
	// answered. The pipeline is answering while the two are equal: no
	// connection made and no call failed since an answer (see
	// pipelinedCall).
	epoch, answered atomic.Uint64

	mu       sync.Mutex
	closed   bool
	wg       sync.WaitGroup // the calls in progress
	inFlight atomic.Int64   // calls between entry and answer (or their caller's leaving)
}

var _ redis.Scripter = (*Scripter)(nil)

// ErrClosed is returned by calls made after Close.
var ErrClosed = errors.New("redispipe: closed")

// New returns a Scripter for c, and dials the pipeline's connection. With
// one server a failed dial is not New's failure: the next pipelined call
// dials again, and Redis may be back by then. A cluster must answer now,
// since the pipeline learns its slots from it.
func New(c Client) (*Scripter, error) {
	s := &Scripter{}
	opt, deadlines, err := options(c, &s.epoch)
	if err != nil {
		return nil, err
	}
	pipe, err := rueidis.NewClient(opt)
	if pipe == nil {
		return nil, fmt.Errorf("redispipe: %w", err)
	}
	// With ForceSingleClient a failed first dial still returns a client,
	// which dials again on its first call: Redis may come back by then.
	s.pipe, s.direct, s.alone = pipe, c, deadlines
	return s, nil
}

// options are the pipeline's rueidis options, taken from c's go-redis
// ones, and whether c honours a call's deadline. Each connection the
// pipeline dials adds one to epoch.
func options(c Client, epoch *atomic.Uint64) (rueidis.ClientOption, bool, error) {
	opt := rueidis.ClientOption{
		DisableCache:      true, // the limits' keys change on every call: nothing to cache
		DisableRetry:      true, // see the package doc
		AlwaysPipelining:  true, // every call queued, so its context can end its wait (see pipelinedCall)
		PipelineMultiplex: -1,   // one connection: Redis runs commands on one thread, and more connections split the batches
		// A limiter's commands and replies are a few hundred bytes; rueidis's
		// default 0.5 MiB read and write buffers would be 1 MiB per Redis
		// node per process. 64 KiB holds a batch of hundreds, and a longer
		// one is read and written in more than one system call, not refused.
		ReadBufferEachConn:  64 << 10,
		WriteBufferEachConn: 64 << 10,
	}
	var deadlines bool
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options() // defaults filled in: Dialer and Protocol are set
		if o.StreamingCredentialsProvider != nil {
			return opt, false, errors.New("redispipe: a client with a StreamingCredentialsProvider: use one with a password or a CredentialsProvider")
		}
		// Socket timeouts of -2 (stored as -1) set no deadline at all, the
		// context's neither: such a client cannot take lone calls.
		deadlines = o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0
		opt.InitAddress = []string{o.Addr}
		opt.ForceSingleClient = true
		opt.SelectDB = o.DB
		opt.ClientName = o.ClientName
		opt.AlwaysRESP2 = o.Protocol == 2
		opt.Username, opt.Password = o.Username, o.Password
		opt.AuthCredentialsFn = credentials(o.CredentialsProvider, o.CredentialsProviderContext)
		dial, network := o.Dialer, o.Network
		// go-redis's dialer speaks TLS itself when o.TLSConfig is set
		// (redis.NewDialer), and knows unix sockets: the pipeline dials
		// the same way.
		opt.DialCtxFn = func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			epoch.Add(1)
			return dial(ctx, network, addr)
		}
		opt.Dialer.Timeout = o.DialTimeout // bounds the handshake too
		opt.ConnWriteTimeout = max(o.ReadTimeout, o.WriteTimeout, 0)
	case *redis.ClusterClient:
		o := c.Options()
		if o.StreamingCredentialsProvider != nil {
			return opt, false, errors.New("redispipe: a client with a StreamingCredentialsProvider: use one with a password or a CredentialsProvider")
		}
		deadlines = o.ContextTimeoutEnabled && o.ReadTimeout >= 0 && o.WriteTimeout >= 0 // see above
		opt.InitAddress = append([]string(nil), o.Addrs...)
		opt.ClientName = o.ClientName
		opt.AlwaysRESP2 = o.Protocol == 2
		opt.Username, opt.Password = o.Username, o.Password
		opt.AuthCredentialsFn = credentials(o.CredentialsProvider, o.CredentialsProviderContext)
		dial := o.Dialer
		if dial == nil {
			dial = redis.NewDialer(&redis.Options{DialTimeout: o.DialTimeout, TLSConfig: o.TLSConfig}) // as go-redis dials each node
		}
		opt.DialCtxFn = func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			epoch.Add(1)
			return dial(ctx, "tcp", addr)
		}
		opt.Dialer.Timeout = o.DialTimeout
		opt.ConnWriteTimeout = max(o.ReadTimeout, o.WriteTimeout, 0)
	case nil:
		return opt, false, errors.New("redispipe: no Redis client")
	default:
		return opt, false, fmt.Errorf("redispipe: a %T: want a *redis.Client or a *redis.ClusterClient", c)
	}
	return opt, deadlines, nil
}

// credentials adapts go-redis's credential callbacks to rueidis's (nil if
// there are none: the static username and password then apply).
func credentials(p func() (string, string), pc func(context.Context) (string, string, error)) func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
	switch {
	case pc != nil:
		return func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			u, pw, err := pc(ctx)
			return rueidis.AuthCredentials{Username: u, Password: pw}, err
		}
	case p != nil:
		return func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
			u, pw := p()
			return rueidis.AuthCredentials{Username: u, Password: pw}, nil
		}
	}
	return nil
}

// Eval runs a script by its text.
func (s *Scripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, "eval", script, keys, args, redis.Scripter.Eval)
}

// EvalSha runs a loaded script by its SHA1; redis.Script.Run falls back to
// Eval on NOSCRIPT, which the pipeline reports as go-redis does.
func (s *Scripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, "evalsha", sha1, keys, args, redis.Scripter.EvalSha)
}

// EvalRO is Eval for a read-only script.
func (s *Scripter) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, "eval_ro", script, keys, args, redis.Scripter.EvalRO)
}

// EvalShaRO is EvalSha for a read-only script.
func (s *Scripter) EvalShaRO(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.run(ctx, "evalsha_ro", sha1, keys, args, redis.Scripter.EvalShaRO)
}

// ScriptExists asks the server directly.
func (s *Scripter) ScriptExists(ctx context.Context, hashes ...string) *redis.BoolSliceCmd {
	return s.direct.ScriptExists(ctx, hashes...)
}

// ScriptLoad loads a script directly (on every shard of a cluster).
func (s *Scripter) ScriptLoad(ctx context.Context, script string) *redis.StringCmd {
	return s.direct.ScriptLoad(ctx, script)
}

type directCall func(c redis.Scripter, ctx context.Context, scriptOrSha string, keys []string, args ...any) *redis.Cmd

// run makes one call: alone on the caller's client, else on the pipeline.
func (s *Scripter) run(ctx context.Context, name, scriptOrSha string, keys []string, args []any, direct directCall) *redis.Cmd {
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
	defer s.wg.Done()
	defer s.inFlight.Add(-1)
	var cmd *redis.Cmd
	if s.inFlight.Add(1) == 1 && s.alone {
		cmd = direct(s.direct, ctx, scriptOrSha, keys, args...) // the client honours a deadline itself (ContextTimeoutEnabled)
	} else {
		cmd = s.pipelinedCall(ctx, name, scriptOrSha, keys, args)
	}
	if cmd.Err() != nil {
		if err := expired(ctx); err != nil {
			return failed(ctx, name, err) // the caller's cause, not the socket's "i/o timeout"
		}
	}
	return cmd
}

// pipelinedCall makes a pipelined call. On a live connection rueidis
// queues it and ends its wait when ctx ends (AlwaysPipelining: never a
// synchronous write and read, which would honour a deadline but not a
// cancel). What it does not bound by the caller's context is making a
// connection: every caller that arrives meanwhile waits for the handshake,
// bounded only by the dialling caller's deadline and the dial timeout. So
// from a dial, or a call ended without an answer (a broken connection, a
// stalled Redis, a caller who left), until a call is answered, each call
// runs on a goroutine of its own, and its caller waits for it or for its
// context. A goroutine per call, always, costs 2–3 µs of CPU per decision
// (docs/performance.md), which is why it is not the rule. One window is
// left: the caller that finds a connection dropped while idle dials it
// itself, its wait bounded by its deadline and the dial timeout but not by
// a cancel.
func (s *Scripter) pipelinedCall(ctx context.Context, name, scriptOrSha string, keys []string, args []any) *redis.Cmd {
	e := s.epoch.Load()
	if s.answered.Load() == e {
		return s.pipelined(ctx, e, name, scriptOrSha, keys, args)
	}
	done := make(chan *redis.Cmd, 1) // buffered: an abandoned call's goroutine never blocks
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		done <- s.pipelined(ctx, e, name, scriptOrSha, keys, args)
	}()
	select {
	case cmd := <-done:
		return cmd
	case <-ctx.Done():
		return failed(ctx, name, ctx.Err())
	}
}

// pipelined sends one call through rueidis and reads its answer as
// go-redis would have; e is the epoch the call started in.
func (s *Scripter) pipelined(ctx context.Context, e uint64, name, scriptOrSha string, keys []string, args []any) *redis.Cmd {
	completed, err := s.build(name, scriptOrSha, keys, args)
	if err != nil {
		return failed(ctx, name, err)
	}
	cmd := redis.NewCmd(ctx, name)
	res := s.pipe.Do(ctx, completed)
	if err := res.NonRedisError(); isContextErr(err) && expired(ctx) == nil {
		// Not this caller's context: the connection this call waited for
		// failed its handshake on the context of the caller that dialled
		// (or on the dial timeout). Nothing was sent; once more.
		res = s.pipe.Do(ctx, completed)
	}
	if err := res.NonRedisError(); err != nil {
		s.epoch.Add(1)
		cmd.SetErr(err) // no answer: the connection, or the caller's context
		return cmd
	}
	// Answered: the pipeline answers, unless a dial or a failure came
	// since this call began (then a later call must say so). A store only
	// on a change: every call reads it.
	if s.answered.Load() != e && s.epoch.Load() == e {
		s.answered.Store(e)
	}
	msg, err := res.ToMessage()
	if err != nil {
		cmd.SetErr(replyErr(err))
		return cmd
	}
	v, err := msg.ToAny()
	if err != nil {
		cmd.SetErr(fmt.Errorf("redispipe: %s: %w", name, err))
		return cmd
	}
	cmd.SetVal(v)
	return cmd
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// build makes the rueidis command. Its cluster builder panics on keys in
// different slots, where go-redis would let Redis refuse them: that
// becomes the call's error.
func (s *Scripter) build(name, scriptOrSha string, keys []string, args []any) (c rueidis.Completed, err error) {
	args = flatten(args)
	strs := make([]string, len(args))
	for i, a := range args {
		if strs[i], err = argString(a); err != nil {
			return c, fmt.Errorf("redispipe: %s argument %d: %w", name, i+1, err)
		}
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("redispipe: %s: %v", name, r)
		}
	}()
	b, n := s.pipe.B(), int64(len(keys))
	switch name {
	case "eval":
		return b.Eval().Script(scriptOrSha).Numkeys(n).Key(keys...).Arg(strs...).Build(), nil
	case "evalsha":
		return b.Evalsha().Sha1(scriptOrSha).Numkeys(n).Key(keys...).Arg(strs...).Build(), nil
	case "eval_ro":
		return b.EvalRo().Script(scriptOrSha).Numkeys(n).Key(keys...).Arg(strs...).Build(), nil
	default:
		return b.EvalshaRo().Sha1(scriptOrSha).Numkeys(n).Key(keys...).Arg(strs...).Build(), nil
	}
}

// flatten spreads a lone slice or map argument into its elements, as
// go-redis does.
func flatten(args []any) []any {
	if len(args) != 1 {
		return args
	}
	switch v := args[0].(type) {
	case nil:
		return nil
	case []string:
		out := make([]any, len(v))
		for i, s := range v {
			out[i] = s
		}
		return out
	case []any:
		return v
	case map[string]any:
		return pairs(v)
	case map[string]string:
		return pairs(v)
	}
	return args
}

// pairs is m's keys and values, in turn.
func pairs[V any](m map[string]V) []any {
	out := make([]any, 0, 2*len(m))
	for k, x := range m {
		out = append(out, k, x)
	}
	return out
}

// argString writes one argument as go-redis does.
func argString(a any) (string, error) {
	switch v := a.(type) {
	case string:
		return v, nil
	case []byte:
		return string(v), nil
	case int:
		return strconv.Itoa(v), nil
	case int8:
		return strconv.FormatInt(int64(v), 10), nil
	case int16:
		return strconv.FormatInt(int64(v), 10), nil
	case int32:
		return strconv.FormatInt(int64(v), 10), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case uint:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint8:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint16:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint32:
		return strconv.FormatUint(uint64(v), 10), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case float32:
		return strconv.FormatFloat(float64(v), 'f', -1, 64), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case bool:
		if v {
			return "1", nil
		}
		return "0", nil
	case nil:
		return "", nil
	case time.Time:
		return v.Format(time.RFC3339Nano), nil
	case time.Duration:
		return strconv.FormatInt(v.Nanoseconds(), 10), nil
	case net.IP:
		return string(v), nil
	case encoding.BinaryMarshaler:
		b, err := v.MarshalBinary()
		return string(b), err
	}
	return "", fmt.Errorf("can't marshal %T (implement encoding.BinaryMarshaler)", a)
}

// replyErr is a null or error reply as go-redis reports it: a null reply
// is redis.Nil, and an error reply is a redis.Error, so that Script.Run
// sees NOSCRIPT and retries with EVAL. rueidis drops the "ERR " that opens
// Redis's generic errors, and offers no way back to the text as sent;
// every error Redis itself sends opens with an upper-case code (ERR,
// NOSCRIPT, WRONGTYPE, BUSY…), so a text that opens with none had "ERR "
// and gets it back. Only a script's own error text can tell: one that
// opens with no code ("no code" reads "ERR no code") or with "ERR ERR".
func replyErr(err error) error {
	if rueidis.IsRedisNil(err) {
		return redis.Nil
	}
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return err
	}
	text := re.Error()
	code, _, _ := strings.Cut(text, " ")
	switch {
	case code == "NOSCRIPT":
		return redis.ErrNoScript // as go-redis's Eval family reports it
	case code == "" || strings.ToUpper(code) != code:
		text = "ERR " + text
	}
	return replyError(text)
}

// replyError is an error reply from Redis.
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks it as Redis's, as go-redis's own error replies are.
func (replyError) RedisError() {}

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

// closeWait bounds how long Close waits for calls in progress.
const closeWait = 5 * time.Second

// ErrStillWaiting is returned by Close when calls were still in progress
// after closeWait.
var ErrStillWaiting = errors.New("redispipe: calls still waiting for Redis")

// Close stops new calls, closes the pipeline (the calls waiting on it end
// with an error, and the answers of those whose callers left are drained)
// and waits, up to 5 s, for the calls in progress on the caller's client.
// That client is not closed. Call Close before closing it.
func (s *Scripter) Close() error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()
	if first {
		s.pipe.Close()
	}
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	select {
	case <-waited:
		// A connection a call was making as the first Close ran is stored
		// after it: close it too.
		s.pipe.Close()
		return nil
	case <-time.After(closeWait):
		return ErrStillWaiting
	}
}
