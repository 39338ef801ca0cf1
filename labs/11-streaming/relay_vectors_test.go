package streaming

// Conformance vectors: scenarios generated at random (relay_vectors_gen_test.go,
// behind the "vectors" build tag), run once on the reference, and recorded
// with what the contract says of their outcome (relay_vectors_data_test.go).
// TestRelayMatchesTheContractOnGeneratedScenarios replays each one, in fake
// time, against the Relay in this directory and compares.
//
// Only what the contract settles is recorded: the chunks the caller is
// given (their fields, their raw bytes or none, and the virtual time each
// arrives), the prefill of every Open in order, that every stream opened is
// closed exactly once before Relay returns (and before the next Open, as
// TestAReplacedStreamIsClosedBeforeTheNextOpens requires), the Result, and
// which sentinels the error matches. Left open, and not recorded: the exact
// moment a stream is closed, how many times Next is called, goroutines, error messages, whether a chunk
// that says nothing after the answer has started is passed on, and how text
// held back as a possible repeat is split across the chunks that carry it.
// The generator drops every scenario in which two events of different
// goroutines fall within 2 ms of each other (it moves each time by ±2 ms
// and keeps only scenarios whose outcome does not change) and every
// scenario whose outcome varies over 20 runs.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"
)

// vecStep is what a scripted stream does on one Next: wait After ms (from
// the call), then return an error or a chunk.
type vecStep struct {
	After int    `json:"a,omitempty"`
	Err   string `json:"e,omitempty"` // eof, malformed, reset, deadline (the upstream's own), canceled (the upstream's own), deadline-wrapped, canceled-wrapped (the same, wrapped as an HTTP client does)
	// Echo is a byte range [from, to) of the prefill the stream was opened
	// with (to -1: its end), put before Text: a continuation repeating it.
	Echo   []int  `json:"r,omitempty"`
	Lead   string `json:"l,omitempty"` // put before the echo
	Case   string `json:"k,omitempty"` // the echo recased: "upper", "lower" (a repeat that differs only in case)
	Text   string `json:"t,omitempty"`
	Other  bool   `json:"o,omitempty"`
	Finish string `json:"f,omitempty"`
	Usage  []int  `json:"u,omitempty"` // prompt, completion
	NoRaw  bool   `json:"n,omitempty"`
	// Late: the stream ignores its context for this step and hands the
	// chunk out after the whole wait, even when its context ended first.
	// A relay may stop waiting for it: chunk times are then not compared.
	Late bool `json:"z,omitempty"`
}

// vecTarget is a scripted upstream. Its stream plays Steps, then is silent
// until its context ends.
type vecTarget struct {
	Name     string    `json:"n"`
	Can      bool      `json:"c,omitempty"`  // CanContinue
	OpenMS   int       `json:"ow,omitempty"` // Open takes this long
	Refuse   bool      `json:"of,omitempty"` // then fails
	OpenErr  string    `json:"oe,omitempty"` // how it fails: "" connection refused, "timeout" (its own dial timeout, wrapping context.DeadlineExceeded), "canceled" (wrapping context.Canceled)
	Stubborn bool      `json:"os,omitempty"` // Open ignores its context
	OnEnd    string    `json:"x,omitempty"`  // what Next says when its context ends: "" its error, "canceled", "eof"
	CloseErr bool      `json:"ce,omitempty"` // Close fails
	CloseMS  int       `json:"cw,omitempty"` // Close takes this long
	Bound    bool      `json:"b,omitempty"`  // the stream also ends when the context Open was given ends (an HTTP body)
	Steps    []vecStep `json:"s,omitempty"`

	shape string // the generator's name for how it repeats a prefill
}

// vecScenario is one generated scenario. Times are virtual milliseconds
// (microseconds when Micro is set; the fields keep their names).
type vecScenario struct {
	Micro        bool        `json:"mu,omitempty"` // every time is in microseconds: limits under and around a millisecond
	FirstTokenMS int         `json:"ft"`
	IdleMS       int         `json:"id"`
	NoContinue   bool        `json:"nc,omitempty"`
	CancelMS     int         `json:"cx,omitempty"` // the caller cancels at this time (0: never)
	DeadlineMS   int         `json:"dl,omitempty"` // the caller's deadline (0: none)
	Cause        bool        `json:"ca,omitempty"` // the cancel or deadline carries a cause of its own
	GoneMS       int         `json:"g,omitempty"`  // emit refuses every chunk from GoneMS-1 ms on (0: never)
	GoneOnWords  bool        `json:"gw,omitempty"` // ... every chunk that says something: it takes those that say nothing
	SlowMS       int         `json:"sl,omitempty"` // emit takes this long (times are then not recorded)
	Targets      []vecTarget `json:"tg,omitempty"`
}

// vecOutcome is what the contract says of a run.
type vecOutcome struct {
	Opens  []string `json:"op,omitempty"` // "t<i> <prefill>", in order
	Emits  []string `json:"em,omitempty"` // the caller's chunks, normalised
	Text   string   `json:"tx,omitempty"`
	Finish string   `json:"fr,omitempty"`
	Usage  [2]int   `json:"us"`
	Served []string `json:"sv,omitempty"`
	Notes  []string `json:"no,omitempty"` // broken promises: a stream not closed once, an emit after a refusal
	Err    []string `json:"er,omitempty"` // the sentinels the error matches; ["error"] if none; nil: no error
	// Allow is every sentinel some failure of the run could explain: what
	// the fakes returned, and the limit that cut an Open or a Next. Where
	// the contract leaves open which of several failures the error names,
	// the error may match any of them.
	Allow []string `json:"al,omitempty"`

	openAt  []time.Duration // when each Open was called (the generator's)
	end     time.Duration   // when Relay returned (the generator's)
	closing []vecClosing    // every Close, in the order they returned (the generator's)
	lastID  int             // the last stream opened (the generator's)
}

// vecClosing is when a stream's Close began and returned.
type vecClosing struct {
	id       int
	from, to time.Duration
}

// vecVector is a scenario and its recorded outcome.
type vecVector struct {
	Name string      `json:"name"`
	S    vecScenario `json:"s"`
	W    vecOutcome  `json:"w"`
}

var (
	errVecReset   = errors.New("vec: connection reset")
	errVecRefused = errors.New("vec: connection refused")
	errVecGone    = errors.New("vec: the caller hung up")
	errVecClose   = errors.New("vec: close failed")
	errVecCause   = errors.New("vec: the caller's own cause")
)

// vecSentinels are the errors an outcome is checked against, by name.
var vecSentinels = []struct {
	name string
	err  error
}{
	{"FirstToken", ErrFirstToken}, {"Idle", ErrIdle}, {"Malformed", ErrMalformed}, {"Truncated", ErrTruncated},
	{"Broken", ErrBroken}, {"NoTargets", ErrNoTargets}, {"InvalidConfig", ErrInvalidConfig},
	{"Canceled", context.Canceled}, {"DeadlineExceeded", context.DeadlineExceeded},
	{"reset", errVecReset}, {"refused", errVecRefused}, {"gone", errVecGone}, {"closefail", errVecClose}, {"cause", errVecCause},
}

func vecErrNames(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	for _, s := range vecSentinels {
		if errors.Is(err, s.err) {
			out = append(out, s.name)
		}
	}
	if len(out) == 0 {
		out = []string{"error"}
	}
	return out
}

// vecTimed says whether the chunks' times are the contract's: not when the
// caller is slow (a relay may read ahead while emit runs) nor when a stream
// hands a chunk out after its context ended (a relay may stop waiting).
func vecTimed(s vecScenario) bool {
	if s.SlowMS > 0 {
		return false
	}
	for _, t := range s.Targets {
		for _, st := range t.Steps {
			if st.Late {
				return false
			}
		}
	}
	return true
}

// unit is what one of s's times counts.
func (s vecScenario) unit() time.Duration {
	if s.Micro {
		return time.Microsecond
	}
	return time.Millisecond
}

// dur is n of s's time units.
func (s vecScenario) dur(n int) time.Duration { return time.Duration(n) * s.unit() }

// vecCut clips i to s and moves it back to the start of a rune.
func vecCut(s string, i int) int {
	if i < 0 || i > len(s) {
		i = len(s)
	}
	for i > 0 && i < len(s) && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

// vecRec is a chunk as the caller received it.
type vecRec struct {
	at     time.Duration
	c      Chunk
	usage  bool
	raw    string
	hasRaw bool
}

// vecRun runs s on Relay; it must be called in a synctest bubble.
func vecRun(s vecScenario) (out vecOutcome) {
	var (
		mu       sync.Mutex
		allow    = map[string]bool{}
		recs     []vecRec
		refused  int
		returned bool
		closes   []int // per stream opened
		streamOf []int // target of each stream opened
		prefills []string
	)
	base, stop := context.WithCancel(context.Background())
	defer stop()
	var cause error
	if s.Cause {
		cause = errVecCause
		allow["cause"] = true
	}
	start := time.Now()
	caller, cancel := context.WithCancelCause(base)
	defer cancel(nil)
	ctx := caller
	if s.DeadlineMS > 0 {
		var cancelDeadline context.CancelFunc
		ctx, cancelDeadline = context.WithDeadlineCause(caller, start.Add(s.dur(s.DeadlineMS)), cause)
		defer cancelDeadline()
	}
	if s.CancelMS > 0 {
		t := time.AfterFunc(s.dur(s.CancelMS), func() { cancel(cause) })
		defer t.Stop()
	}
	// ended says why a fake's context ended: a limit unless the caller left.
	ended := func(said bool) {
		if ctx.Err() != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if said {
			allow["Idle"] = true
		} else {
			allow["FirstToken"] = true
		}
	}
	note := func(name string) {
		mu.Lock()
		allow[name] = true
		mu.Unlock()
	}
	targets := make([]Target, len(s.Targets))
	for i, vt := range s.Targets {
		targets[i] = Target{Name: vt.Name, CanContinue: vt.Can, Open: func(octx context.Context, prefill string) (Stream, error) {
			mu.Lock()
			for id, n := range closes {
				if n == 0 {
					out.Notes = append(out.Notes, fmt.Sprintf("stream %d (of t%d) still open when t%d was opened", id, streamOf[id], i))
				}
			}
			out.Opens = append(out.Opens, fmt.Sprintf("t%d %q", i, prefill))
			out.openAt = append(out.openAt, time.Since(start))
			prefills = append(prefills, prefill)
			mu.Unlock()
			if vt.OpenMS > 0 {
				if vt.Stubborn {
					time.Sleep(s.dur(vt.OpenMS))
				} else {
					t := time.NewTimer(s.dur(vt.OpenMS))
					select {
					case <-t.C:
					case <-octx.Done():
						t.Stop()
						ended(false)
						return nil, octx.Err()
					}
				}
			}
			if vt.Refuse {
				switch vt.OpenErr {
				case "timeout":
					note("DeadlineExceeded")
					return nil, fmt.Errorf("dial tcp 10.0.0.2:443: i/o timeout: %w", context.DeadlineExceeded)
				case "canceled":
					note("Canceled")
					return nil, fmt.Errorf("net/http: request canceled while waiting for connection: %w", context.Canceled)
				}
				note("refused")
				return nil, errVecRefused
			}
			mu.Lock()
			id := len(closes)
			closes = append(closes, 0)
			streamOf = append(streamOf, i)
			out.lastID = id
			mu.Unlock()
			st := &vecStream{target: i, vt: vt, unit: s.unit(), prefill: prefill, ended: ended, note: note}
			if vt.Bound {
				st.open = octx
			}
			st.close = func() error {
				began := time.Since(start)
				if vt.CloseMS > 0 {
					time.Sleep(s.dur(vt.CloseMS))
				}
				mu.Lock()
				closes[id]++ // closed once Close has returned
				out.closing = append(out.closing, vecClosing{id, began, time.Since(start)})
				mu.Unlock()
				if vt.CloseErr {
					note("closefail")
					return errVecClose
				}
				return nil
			}
			return st, nil
		}}
	}
	emit := func(c Chunk) error {
		at := time.Since(start)
		mu.Lock()
		if returned {
			out.Notes = append(out.Notes, "emit called after Relay returned")
		}
		says := c.Text != "" || c.Other || c.FinishReason != ""
		if s.GoneMS > 0 && at >= s.dur(s.GoneMS-1) && (says || !s.GoneOnWords || refused > 0) {
			refused++
			if refused == 2 {
				out.Notes = append(out.Notes, "emit called again after it refused a chunk: the caller had gone")
			}
			mu.Unlock()
			return errVecGone
		}
		r := vecRec{at: at, c: c, usage: c.Usage != nil, hasRaw: c.Raw != nil, raw: string(c.Raw)}
		recs = append(recs, r)
		mu.Unlock()
		if s.SlowMS > 0 {
			time.Sleep(s.dur(s.SlowMS))
		}
		return nil
	}
	var res Result
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				mu.Lock()
				out.Notes = append(out.Notes, fmt.Sprintf("Relay panicked: %v", p))
				mu.Unlock()
			}
		}()
		res, err = Relay(ctx, Config{FirstToken: s.dur(s.FirstTokenMS), Idle: s.dur(s.IdleMS), NoContinue: s.NoContinue}, targets, emit)
	}()
	mu.Lock()
	defer mu.Unlock()
	returned = true
	out.end = time.Since(start)
	for id, n := range closes {
		if n != 1 {
			out.Notes = append(out.Notes, fmt.Sprintf("stream %d (of t%d) closed %d times by the time Relay returned", id, streamOf[id], n))
		}
	}
	out.Emits = vecNormalise(recs, prefills, vecTimed(s))
	out.Text, out.Finish, out.Served = res.Text, res.FinishReason, res.Served
	out.Usage = [2]int{res.Usage.PromptTokens, res.Usage.CompletionTokens}
	out.Err = vecErrNames(err)
	for _, sn := range vecSentinels {
		if allow[sn.name] {
			out.Allow = append(out.Allow, sn.name)
		}
	}
	return out
}

// vecNormalise writes the caller's chunks as lines. Two things the contract
// leaves open are made equal: a chunk that says nothing (no text, nothing
// else, no finish, no usage) after the answer has started is left out, and
// text held back as a possible repeat and passed on as a chunk of its own
// (no raw bytes, a start of a prefill) is joined to the chunk that follows it
// at the same instant, which then has no raw bytes either.
func vecNormalise(recs []vecRec, prefills []string, timed bool) []string {
	var kept []vecRec
	started := false
	for _, r := range recs {
		says := r.c.Text != "" || r.c.Other || r.c.FinishReason != ""
		if !says && started && !r.usage {
			continue
		}
		started = started || says
		kept = append(kept, r)
	}
	isHeld := func(r vecRec) bool {
		if r.hasRaw || r.usage || r.c.Other || r.c.FinishReason != "" || r.c.Text == "" {
			return false
		}
		for _, p := range prefills {
			if p != "" && strings.HasPrefix(p, r.c.Text) {
				return true
			}
		}
		return false
	}
	var lines []string
	for i := 0; i < len(kept); i++ {
		r := kept[i]
		for isHeld(r) && i+1 < len(kept) && kept[i+1].at == r.at {
			next := kept[i+1]
			next.c.Text = r.c.Text + next.c.Text
			next.hasRaw, next.raw = false, ""
			r = next
			i++
		}
		var b strings.Builder
		if timed {
			fmt.Fprintf(&b, "@%v", r.at)
		} else {
			b.WriteString("@-")
		}
		fmt.Fprintf(&b, " text=%q", r.c.Text)
		if r.c.Other {
			b.WriteString(" other")
		}
		if r.c.FinishReason != "" {
			fmt.Fprintf(&b, " finish=%q", r.c.FinishReason)
		}
		if r.usage {
			b.WriteString(" usage-passed-on")
		}
		if r.hasRaw {
			fmt.Fprintf(&b, " raw=%q", r.raw)
		} else {
			b.WriteString(" raw=nil")
		}
		lines = append(lines, b.String())
	}
	return lines
}

// vecStream plays a vecTarget's steps.
type vecStream struct {
	target  int
	vt      vecTarget
	unit    time.Duration
	prefill string
	i       int
	said    bool            // it sent a chunk that says something: a limit now is the idle limit
	open    context.Context // the context Open was given, for a stream bound to it
	ended   func(said bool)
	note    func(string)
	close   func() error
}

func (s *vecStream) Next(ctx context.Context) (Chunk, error) {
	var bound <-chan struct{}
	if s.open != nil {
		bound = s.open.Done()
	}
	if s.i >= len(s.vt.Steps) {
		select {
		case <-ctx.Done():
			return Chunk{}, s.end(ctx)
		case <-bound:
			return Chunk{}, s.end(s.open)
		}
	}
	st := s.vt.Steps[s.i]
	s.i++
	if st.Late {
		time.Sleep(time.Duration(st.After) * s.unit)
		if ctx.Err() != nil {
			s.ended(s.said) // a limit (or the caller) ended it while it was not listening
		}
	} else {
		t := time.NewTimer(time.Duration(st.After) * s.unit)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return Chunk{}, s.end(ctx)
		case <-bound:
			return Chunk{}, s.end(s.open)
		}
	}
	switch st.Err {
	case "":
	case "eof":
		s.note("Truncated")
		return Chunk{}, io.EOF
	case "malformed":
		s.note("Malformed")
		return Chunk{}, ErrMalformed
	case "reset":
		s.note("reset")
		return Chunk{}, errVecReset
	case "deadline":
		s.note("DeadlineExceeded")
		return Chunk{}, context.DeadlineExceeded
	case "canceled":
		s.note("Canceled")
		return Chunk{}, context.Canceled
	case "deadline-wrapped":
		s.note("DeadlineExceeded")
		return Chunk{}, fmt.Errorf("net/http: timeout awaiting response body: %w", context.DeadlineExceeded)
	case "canceled-wrapped":
		s.note("Canceled")
		return Chunk{}, fmt.Errorf("read body: %w", context.Canceled)
	default:
		panic("vec: unknown step error " + st.Err)
	}
	c := Chunk{Text: st.Text, Other: st.Other, FinishReason: st.Finish}
	if len(st.Echo) == 2 {
		from := vecCut(s.prefill, st.Echo[0])
		to := max(from, vecCut(s.prefill, st.Echo[1]))
		echo := s.prefill[from:to]
		switch st.Case {
		case "upper":
			echo = strings.ToUpper(echo)
		case "lower":
			echo = strings.ToLower(echo)
		}
		c.Text = st.Lead + echo + c.Text
	}
	if len(st.Usage) == 2 {
		c.Usage = &Usage{PromptTokens: st.Usage[0], CompletionTokens: st.Usage[1]}
	}
	if !st.NoRaw {
		c.Raw = fmt.Appendf(nil, "raw:t%d.%d", s.target, s.i-1)
	}
	s.said = s.said || c.Text != "" || c.Other || c.FinishReason != ""
	return c, nil
}

func (s *vecStream) end(ctx context.Context) error {
	s.ended(s.said)
	switch s.vt.OnEnd {
	case "canceled":
		s.note("Canceled")
		return fmt.Errorf("read body: %w", context.Canceled)
	case "eof":
		s.note("Truncated")
		return io.EOF
	}
	return ctx.Err()
}

func (s *vecStream) Close() error { return s.close() }

// vecLines is an outcome as the lines compared in order.
func vecLines(o vecOutcome) []string {
	var l []string
	for i, x := range o.Opens {
		l = append(l, fmt.Sprintf("open #%d: %s", i+1, x))
	}
	l = append(l, fmt.Sprintf("opened %d", len(o.Opens)))
	for i, x := range o.Emits {
		l = append(l, fmt.Sprintf("chunk #%d to the caller: %s", i+1, x))
	}
	l = append(l, fmt.Sprintf("chunks to the caller: %d", len(o.Emits)))
	l = append(l, fmt.Sprintf("Result.Text %q", o.Text), fmt.Sprintf("Result.FinishReason %q", o.Finish),
		fmt.Sprintf("Result.Usage %d prompt, %d completion", o.Usage[0], o.Usage[1]), fmt.Sprintf("Result.Served %q", o.Served))
	for _, n := range o.Notes {
		l = append(l, "broken promise: "+n)
	}
	return append(l, "(end)")
}

// vecCheckErr compares the error got with the one recorded, as far as the
// contract decides it; it returns what is wrong, or "".
func vecCheckErr(s vecScenario, want, got vecOutcome) string {
	has := func(list []string, x string) bool {
		for _, y := range list {
			if y == x {
				return true
			}
		}
		return false
	}
	switch {
	case want.Err == nil && got.Err == nil:
		return ""
	case want.Err == nil:
		return fmt.Sprintf("want no error, got one matching %v", got.Err)
	case got.Err == nil:
		return fmt.Sprintf("want an error matching %v, got none", want.Err)
	}
	allowed := map[string]bool{}
	for _, x := range append(append([]string{}, want.Err...), want.Allow...) {
		allowed[x] = true
	}
	// Exact: what the caller did, and the kinds of error that are no failure's.
	caller := map[string]bool{"Canceled": s.CancelMS > 0, "DeadlineExceeded": s.DeadlineMS > 0, "gone": s.GoneMS > 0}
	callerLeft := false
	for _, x := range want.Err {
		if caller[x] {
			callerLeft = true
		}
	}
	for _, x := range []string{"Broken", "NoTargets", "InvalidConfig", "Canceled", "DeadlineExceeded", "gone"} {
		w, g := has(want.Err, x), has(got.Err, x)
		switch {
		case w && !g && (caller[x] || !has(want.Allow, x)):
			return fmt.Sprintf("want an error matching %s (errors.Is), got one matching %v", x, got.Err)
		case g && !w && !has(want.Allow, x):
			return fmt.Sprintf("want an error that does not match %s, got one matching %v (want %v)", x, got.Err, want.Err)
		}
	}
	var causes []string
	for _, x := range got.Err {
		switch x {
		case "Broken", "NoTargets", "InvalidConfig":
			continue
		}
		if !allowed[x] {
			return fmt.Sprintf("the error matches %s, which nothing in this run explains (want %v)", x, want.Err)
		}
		causes = append(causes, x)
	}
	if callerLeft || has(want.Err, "NoTargets") || has(want.Err, "InvalidConfig") {
		return ""
	}
	if has(want.Err, "Broken") {
		// The break wraps the last failure (the hand-written tests pin it).
		for _, x := range want.Err {
			if x != "Broken" && !has(got.Err, x) {
				return fmt.Sprintf("want the broken answer's error to match %s too (the last failure), got %v", x, got.Err)
			}
		}
		return ""
	}
	if len(causes) == 0 {
		return fmt.Sprintf("want an error that says which failure ended the relay (%v), got one matching %v", want.Err, got.Err)
	}
	return ""
}

// vecCompare returns the first way got differs from want, or "".
func vecCompare(s vecScenario, want, got vecOutcome) string {
	w, g := vecLines(want), vecLines(got)
	for i := range max(len(w), len(g)) {
		wl, gl := "(nothing)", "(nothing)"
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("first divergence at step %d:\n  want: %s\n  got:  %s\n\nwant, in full:\n  %s\ngot, in full:\n  %s",
				i+1, wl, gl, strings.Join(w, "\n  "), strings.Join(g, "\n  "))
		}
	}
	if msg := vecCheckErr(s, want, got); msg != "" {
		return "the error: " + msg
	}
	return ""
}

// vecDescribe writes a scenario out for a person.
func vecDescribe(s vecScenario) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Config{FirstToken: %v, Idle: %v, NoContinue: %v}\n", s.dur(s.FirstTokenMS), s.dur(s.IdleMS), s.NoContinue)
	cause := ""
	if s.Cause {
		cause = " (with a cause of its own)"
	}
	if s.CancelMS > 0 {
		fmt.Fprintf(&b, "the caller cancels at %v%s\n", s.dur(s.CancelMS), cause)
	}
	if s.DeadlineMS > 0 {
		fmt.Fprintf(&b, "the caller's deadline is at %v%s\n", s.dur(s.DeadlineMS), cause)
	}
	if s.GoneMS > 0 && s.GoneOnWords {
		fmt.Fprintf(&b, "the caller hangs up at %v: emit refuses every chunk that says something from then on (and all after a refusal)\n", s.dur(s.GoneMS-1))
	} else if s.GoneMS > 0 {
		fmt.Fprintf(&b, "the caller hangs up at %v: emit refuses every chunk from then on\n", s.dur(s.GoneMS-1))
	}
	if s.SlowMS > 0 {
		fmt.Fprintf(&b, "the caller is slow: each emit takes %v (chunk times not compared)\n", s.dur(s.SlowMS))
	}
	if len(s.Targets) == 0 {
		b.WriteString("no targets\n")
	}
	for i, t := range s.Targets {
		fmt.Fprintf(&b, "target t%d %q", i, t.Name)
		if t.Can {
			b.WriteString(", CanContinue")
		}
		b.WriteString(": Open")
		if t.OpenMS > 0 {
			fmt.Fprintf(&b, " takes %v", s.dur(t.OpenMS))
			if t.Stubborn {
				b.WriteString(" (ignoring its context)")
			}
		}
		if t.Refuse {
			switch t.OpenErr {
			case "timeout":
				b.WriteString(" then fails with its own dial timeout (wrapping context.DeadlineExceeded)\n")
			case "canceled":
				b.WriteString(" then fails with its own cancel (wrapping context.Canceled)\n")
			default:
				b.WriteString(" then fails (connection refused)\n")
			}
			continue
		}
		b.WriteString(" then returns a stream")
		switch t.OnEnd {
		case "canceled":
			b.WriteString("; when its context ends, Next says \"read body: context canceled\"")
		case "eof":
			b.WriteString("; when its context ends, Next says io.EOF")
		}
		if t.CloseMS > 0 {
			fmt.Fprintf(&b, "; Close takes %v", s.dur(t.CloseMS))
		}
		if t.CloseErr {
			b.WriteString("; Close fails")
		}
		if t.Bound {
			b.WriteString("; the stream ends when Open's context ends")
		}
		b.WriteString("\n")
		at := t.OpenMS
		for j, st := range t.Steps {
			at += st.After
			fmt.Fprintf(&b, "    Next #%d: after %v (%v from Open if nothing waits on the caller): ", j+1, s.dur(st.After), s.dur(at))
			if st.Late {
				b.WriteString("(ignoring its context) ")
			}
			switch st.Err {
			case "eof":
				b.WriteString("io.EOF")
			case "malformed":
				b.WriteString("ErrMalformed")
			case "reset":
				b.WriteString("error \"connection reset\"")
			case "deadline":
				b.WriteString("the upstream's own context.DeadlineExceeded")
			case "canceled":
				b.WriteString("the upstream's own context.Canceled")
			case "deadline-wrapped":
				b.WriteString("the upstream's own timeout, wrapping context.DeadlineExceeded")
			case "canceled-wrapped":
				b.WriteString("the upstream's own cancel, wrapping context.Canceled")
			default:
				b.WriteString("Chunk{")
				var parts []string
				if len(st.Echo) == 2 {
					to := "end"
					if st.Echo[1] >= 0 {
						to = fmt.Sprint(st.Echo[1])
					}
					recase := ""
					if st.Case != "" {
						recase = " in " + st.Case + " case"
					}
					parts = append(parts, fmt.Sprintf("Text: %q+prefill[%d:%s]%s+%q", st.Lead, st.Echo[0], to, recase, st.Text))
				} else if st.Text != "" {
					parts = append(parts, fmt.Sprintf("Text: %q", st.Text))
				}
				if st.Other {
					parts = append(parts, "Other: true")
				}
				if st.Finish != "" {
					parts = append(parts, fmt.Sprintf("FinishReason: %q", st.Finish))
				}
				if len(st.Usage) == 2 {
					parts = append(parts, fmt.Sprintf("Usage: {%d, %d}", st.Usage[0], st.Usage[1]))
				}
				if st.NoRaw {
					parts = append(parts, "Raw: nil")
				} else {
					parts = append(parts, fmt.Sprintf("Raw: \"raw:t%d.%d\"", i, j))
				}
				b.WriteString(strings.Join(parts, ", ") + "}")
			}
			b.WriteString("\n")
		}
		b.WriteString("    then silence until its context ends\n")
	}
	return b.String()
}

func vecLoad(t *testing.T) []vecVector {
	t.Helper()
	var vs []vecVector
	for i, line := range strings.Split(strings.TrimSpace(relayVectors), "\n") {
		if line == "" {
			continue
		}
		var v vecVector
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("relay_vectors_data_test.go, vector %d: %v", i+1, err)
		}
		vs = append(vs, v)
	}
	return vs
}

// TestRelayMatchesTheContractOnGeneratedScenarios replays a few hundred
// generated scenarios, recorded from the reference, and compares what the
// contract determines of each outcome: the chunks the caller gets and when,
// each Open's prefill, every stream closed once, the Result, the error.
func TestRelayMatchesTheContractOnGeneratedScenarios(t *testing.T) {
	vs := vecLoad(t)
	failed := 0
	for _, v := range vs {
		t.Run(v.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				got := vecRun(v.S)
				msg := vecCompare(v.S, v.W, got)
				if msg == "" {
					return
				}
				failed++
				if failed > 5 {
					t.Errorf("differs from the reference: %s (the first five failures print the scenario)", strings.Join(strings.Fields(strings.Join(strings.SplitN(msg, "\n", 4)[:min(3, strings.Count(msg, "\n")+1)], " ")), " "))
					return
				}
				t.Errorf("this generated scenario ends otherwise than the contract says.\n\nThe scenario:\n%s\nWhat differs:\n%s\n\nThe error: want %v, got %v",
					vecDescribe(v.S), msg, v.W.Err, got.Err)
			})
		})
	}
}
