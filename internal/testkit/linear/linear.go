// Package linear checks that the course's shared limits are linearizable:
// that every history of concurrent calls a test records could have come
// from the limit's sequential contract, applied one call at a time at some
// instant between the call's start and its return.
//
// Example tests count what got through N goroutines; they catch a lost
// update, and little else. A linearizability checker also catches a reply
// that is wrong only in its order (two callers told "3 left"), a
// Retry-After that promises what the next call does not keep, and what a
// call whose caller gave up did after it left. It is the field's standard
// (MIT 6.5840 grades its key/value labs with porcupine, Jepsen checks
// databases so); this package records histories and checks them with
// github.com/anishathalye/porcupine against a model of each limit, written
// once, as the lessons state it (see Bucket).
//
// Times are the wall clock in microseconds: the tests run on the machine
// that runs Redis, and the limits read Redis' clock (TIME), so a call's
// instant on Redis' clock lies between the two readings of ours, give or
// take Slack.
package linear

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Slack widens every call's interval on both sides, for the difference
// between the test's clock readings and Redis' (the same clock, read a
// moment apart).
const Slack = time.Millisecond

// OutDirEnv names the directory a failed check writes its visualization
// to; unset, a directory under the system's temporary one.
const OutDirEnv = "LINEAR_OUT"

// Recorder records a history of calls from many goroutines. Safe for
// concurrent use.
type Recorder struct {
	base    int64 // the wall clock when it was made, µs: calls' times are read from here
	mu      sync.Mutex
	ops     []porcupine.Operation
	settled []int64 // see Settle, µs
	clients int     // one more than the highest client id recorded
}

// NewRecorder returns an empty recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{base: time.Now().UnixMicro()} }

// Settle marks the moment by which every call of unknown outcome made
// so far has taken effect or never will: a fault is over (a stalled Redis
// woke and ran what it had been sent; a restarted one lost it). The check
// then lets such a call take effect from its start until this mark —
// without one, until the history's end, which is always sound but can
// leave a long history too open to decide. The mark is also a call on
// every key seen so far (Settled), for models whose state holds what such
// calls left behind.
func (r *Recorder) Settle() {
	now := time.Now()
	r.mu.Lock()
	r.settled = append(r.settled, now.UnixMicro())
	seen := map[string]bool{}
	var keys []string
	for _, op := range r.ops {
		if k := op.Input.(Call).Key; !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	client := r.clients
	r.mu.Unlock()
	r.Span(client, keys, Settled{}, now, now) // a row of its own in the drawing
}

// Call is one recorded call, what the model reads of it: its key, its
// interval on the wall clock (seconds since the recorder was made), and
// its input.
type Call struct {
	Key          string
	Start, End   float64
	Input        any
	UnknownAfter bool // the caller gave up: the call may have taken effect at any time until End, or never
}

// Reply is a call's outcome as the model reads it; Unknown when the caller
// gave up or the connection failed.
type Reply struct {
	Unknown bool
	Output  any
}

// NotRun is the output of a call that certainly did nothing (its
// connection was never made): Record leaves it out of the history.
var NotRun = notRun{}

type notRun struct{}

// Record runs f as client's call on key and records it. f returns the
// call's output, and false when its outcome is unknown (a timeout, a
// lost connection: the call may have run, or not), or NotRun.
func (r *Recorder) Record(client int, key string, input any, f func() (output any, known bool)) {
	start := time.Now()
	out, known := f()
	end := time.Now()
	if out == NotRun {
		return
	}
	op := porcupine.Operation{ClientId: client, Call: start.UnixMicro(), Return: end.UnixMicro(),
		Input:  Call{Key: key, Start: r.seconds(start), End: r.seconds(end), Input: input},
		Output: Reply{Unknown: !known, Output: out}}
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.clients = max(r.clients, client+1)
	r.mu.Unlock()
}

// Span records an event that is nobody's call but changes the limit —
// a restart that loses Redis' data — as having happened at some instant
// between start and end, on every key in keys.
func (r *Recorder) Span(client int, keys []string, input any, start, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		r.ops = append(r.ops, porcupine.Operation{ClientId: client, Call: start.UnixMicro(), Return: end.UnixMicro(),
			Input:  Call{Key: k, Start: r.seconds(start), End: r.seconds(end), Input: input},
			Output: Reply{Output: input}})
	}
}

// History returns the calls recorded so far. A call whose outcome is
// unknown is given, as its return, the first Settle mark after its start,
// or else the end of the history: porcupine then lets it take effect at
// any time in between, or not at all.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	for _, op := range r.ops {
		last = max(last, op.Return)
	}
	out := make([]porcupine.Operation, len(r.ops))
	for i, op := range r.ops {
		if op.Output.(Reply).Unknown {
			until := last
			for _, s := range r.settled {
				if s > op.Call {
					until = min(max(s, op.Return), last)
					break
				}
			}
			c := op.Input.(Call)
			c.End, c.UnknownAfter = float64(until-r.base)/1e6, true
			op.Input, op.Return = c, until
		}
		out[i] = op
	}
	return out
}

// Counts says how many calls the history holds, and how many of them
// have an unknown outcome.
func Counts(history []porcupine.Operation) (calls, unknown int) {
	for _, op := range history {
		calls++
		if op.Output.(Reply).Unknown {
			unknown++
		}
	}
	return calls, unknown
}

// ByKey partitions a history by key: each key's limit is its own object,
// so the history is linearizable when each key's is, and porcupine decides
// many small histories much faster than one large one.
func ByKey(history []porcupine.Operation) [][]porcupine.Operation {
	parts := map[string][]porcupine.Operation{}
	var order []string
	for _, op := range history {
		k := op.Input.(Call).Key
		if _, ok := parts[k]; !ok {
			order = append(order, k)
		}
		parts[k] = append(parts[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(order))
	for _, k := range order {
		out = append(out, parts[k])
	}
	return out
}

// Check checks history against model within timeout. On a history that is
// not linearizable it writes porcupine's visualization (an HTML page that
// shows, for the longest prefix that could be ordered, where the order
// breaks) and logs its path. It returns porcupine's verdict: Ok, Illegal,
// or Unknown when the check did not finish in time.
func Check(tb testing.TB, name string, model porcupine.Model, history []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	tb.Helper()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	calls, unknown := Counts(history)
	tb.Logf("linear: %s: %d calls (%d of unknown outcome) over %d keys: %s in %s",
		name, calls, unknown, len(ByKey(history)), verdict(res), time.Since(start).Round(time.Millisecond))
	if res == porcupine.Illegal {
		if path, err := visualize(name, model, info); err != nil {
			tb.Logf("linear: %s: could not write the visualization: %v", name, err)
		} else {
			tb.Logf("linear: %s: not linearizable; the history is drawn in %s (open it in a browser)", name, path)
		}
	}
	return res
}

func verdict(r porcupine.CheckResult) string {
	switch r {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "NOT linearizable"
	default:
		return "undecided within the time allowed"
	}
}

func visualize(name string, model porcupine.Model, info porcupine.LinearizationInfo) (string, error) {
	dir := os.Getenv(OutDirEnv)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "linear")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	file := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '-'
		}
		return r
	}, name)
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.html", file, time.Now().UnixNano()))
	return path, porcupine.VisualizePath(model, info, path)
}

// seconds reads t on the recorder's clock: small numbers, so that the
// model's arithmetic keeps its microseconds.
func (r *Recorder) seconds(t time.Time) float64 { return float64(t.UnixMicro()-r.base) / 1e6 }
