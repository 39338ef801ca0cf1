package quotas

// Conformance vectors: a few hundred generated traces of Reserve, Settle
// and moves of Redis' clock, each with the answers the contract gives, are
// replayed against this package. The hand-written tests pin one rule each;
// the traces pin the rules together, in orders and at values nobody wrote
// a test for: a refusal just before the bucket refills, a settle a
// millisecond inside its window while the tenant is in debt, a lowered
// quota between a reserve and its settle, a clock that stepped back while
// a reservation was open.
//
// Every trace keeps to what the contract decides. It never reuses an id
// once what Redis remembers of it might be gone (a window after it was
// reserved or settled), never raises a tenant's quota (a bucket stored at
// the lower quota may expire before it would be full at the higher one),
// and settles near the window's edge only where the clock's steps back
// cannot make the age ambiguous. One rule the traces hold that no single
// test states: Remaining never falls without a charge — a clock that
// stepped back refills nothing, and takes back nothing the bucket has
// already shown.
//
// The answers were recorded from the reference (solutions/12-quotas):
//
//	cd solutions/12-quotas && go test -tags quotavectors -run TestWriteQuotaVectors .
//
// rewrites quota_vectors_data_test.go (the generator is
// quota_vectors_gen_test.go); copy it to labs/12-quotas.

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// vectorTrace is one trace: a configuration and its steps.
type vectorTrace struct {
	name  string
	cfg   Config
	steps []vectorStep
}

// vectorStep is one line of a trace: a move of the clock, or a call and
// the answer the contract gives.
type vectorStep struct {
	op         byte // '+' advance, '-' step back, 'R' Reserve, 'S' Settle
	ms         int64
	tenant, id string
	per, n     int
	want       string // the answer, as vectorAnswer writes it
}

func (s vectorStep) String() string {
	switch s.op {
	case '+':
		return fmt.Sprintf("advance Redis' clock %d ms", s.ms)
	case '-':
		return fmt.Sprintf("step Redis' clock back %d ms", s.ms)
	case 'R':
		return fmt.Sprintf("Reserve(%q, %q, perMinute %d, estimate %d)", s.tenant, s.id, s.per, s.n)
	}
	return fmt.Sprintf("Settle(%q, %q, perMinute %d, used %d)", s.tenant, s.id, s.per, s.n)
}

// vectorAnswer writes a call's answer: a Decision, Settle's bool, or the
// sentinel error it wraps.
func vectorAnswer(d Decision, applied bool, op byte, err error) string {
	if err != nil {
		for _, s := range []struct {
			name string
			err  error
		}{{"ErrInvalidArgument", ErrInvalidArgument}, {"ErrEstimateTooLarge", ErrEstimateTooLarge}} {
			if errors.Is(err, s.err) {
				return s.name
			}
		}
		return "error: " + err.Error()
	}
	if op == 'S' {
		return fmt.Sprintf("applied=%t", applied)
	}
	return fmt.Sprintf("allowed=%t remaining=%d retry=%dms", d.Allowed, d.Remaining, d.RetryAfter.Milliseconds())
}

// rig is a fixture whose keys expire as real Redis' do: at a time on its
// clock. A clock that steps back and catches up again expires nothing on
// the way (miniredis' FastForward counts every move forward).
type rig struct {
	*fixture
	behind int64 // ms the clock is behind the latest time it showed
}

func (r *rig) move(ms int64) {
	d := time.Duration(ms) * time.Millisecond
	r.clock = r.clock.Add(d)
	r.m.SetTime(r.clock)
	if ahead := ms - r.behind; ahead > 0 {
		r.m.FastForward(time.Duration(ahead) * time.Millisecond)
	}
	r.behind = max(0, r.behind-ms)
}

func (r *rig) back(ms int64) {
	r.stepBack(time.Duration(ms) * time.Millisecond)
	r.behind += ms
}

// run plays one step on r and returns its answer ("" for a clock move).
func (s vectorStep) run(r *rig) string {
	f, ctx := r.fixture, context.Background()
	switch s.op {
	case '+':
		r.move(s.ms)
	case '-':
		r.back(s.ms)
	case 'R':
		d, err := f.q.Reserve(ctx, s.tenant, s.id, s.per, s.n)
		return vectorAnswer(d, false, 'R', err)
	case 'S':
		ok, err := f.q.Settle(ctx, s.tenant, s.id, s.per, s.n)
		return vectorAnswer(Decision{}, ok, 'S', err)
	}
	return ""
}

func TestQuotaAgreesWithItsContractOnGeneratedTraces(t *testing.T) {
	traces := parseVectors(t, quotaVectors)
	require.NotEmpty(t, traces)
	for i, tr := range traces {
		t.Run(fmt.Sprintf("%03d-%s", i, tr.name), func(t *testing.T) {
			r := &rig{fixture: newFixture(t, tr.cfg)}
			f := r.fixture
			tenants := map[string]bool{}
			window := cmp.Or(tr.cfg.SettleWindow, DefaultSettleWindow)
			var behind int64
			var held held
			for j, s := range tr.steps {
				got := s.run(r)
				if s.op == 'R' || s.op == 'S' {
					tenants[s.tenant] = true
				}
				if s.op == '-' {
					behind += s.ms
				}
				if got != s.want {
					t.Fatalf("%s\nstep %d: %s\n  got  %s\n  want %s", replay(tr, j), j, s, got, s.want)
				}
				msg := keysKept(f, tenants)
				if n, most := f.entries(t), held.step(s, window.Milliseconds(), len(tenants)); msg == "" && n > most {
					msg = fmt.Sprintf("Redis holds %d entries, more than %d: a busy tenant's state must stay bounded by the reservations the window still holds", n, most)
				}
				if msg != "" {
					t.Fatalf("%s\nafter step %d (%s): %s", replay(tr, j), j, s, msg)
				}
			}
			idle := window + time.Duration(max(tr.cfg.DebtMinutes, 1)+1)*time.Minute + time.Duration(behind)*time.Millisecond
			r.move(r.behind + idle.Milliseconds()) // catch up first: keys expire only on time the clock has not shown
			if keys := f.m.Keys(); len(keys) > 0 {
				t.Fatalf("%s\nthen idle for %s (a settle window, the time to refill from the deepest debt, and every step back): still %q; an idle tenant's keys all expire",
					replay(tr, len(tr.steps)-1), idle, keys)
			}
		})
	}
}

// held bounds what Redis may hold, whatever the design: a few entries a
// tenant (its bucket), and a few for each id written in the last two
// windows — one reserved or settled may be kept a window, and a key
// expires a window after its newest entry, so nothing written earlier can
// still be there (give or take the clock's steps back).
type held struct {
	now, latest, back int64   // the clock (ms from the start), the latest time it showed, its steps back
	writes            []int64 // the latest time shown at each Reserve allowed and each Settle
}

func (h *held) step(s vectorStep, window int64, tenants int) int {
	switch {
	case s.op == '+':
		h.now += s.ms
	case s.op == '-':
		h.now -= s.ms
		h.back += s.ms
	case s.op == 'S' && !strings.HasPrefix(s.want, "Err"), strings.HasPrefix(s.want, "allowed=true"):
		h.writes = append(h.writes, h.latest)
	}
	h.latest = max(h.latest, h.now)
	recent := 0
	for _, w := range h.writes {
		if w > h.latest-2*window-h.back {
			recent++
		}
	}
	return 4*tenants + 4*recent + 4
}

// keysKept says what is wrong with what Redis holds: a key no tenant's Keys
// names, or one that never expires.
func keysKept(f *fixture, tenants map[string]bool) string {
	var named []string
	for tenant := range tenants {
		named = append(named, f.q.Keys(tenant)...)
	}
	for _, k := range f.m.Keys() {
		if !slices.Contains(named, k) {
			return fmt.Sprintf("Redis holds %q, which no tenant's Keys names", k)
		}
		if f.m.TTL(k) <= 0 {
			return fmt.Sprintf("%q has no TTL: every key must expire once its tenant is idle", k)
		}
	}
	return ""
}

// replay writes a trace up to step last, for a failure message.
func replay(tr vectorTrace, last int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: New(rdb, Config{Prefix: %q, SettleWindow: %s, DebtMinutes: %d}), a fresh Redis at 12:00:00.000\n",
		tr.name, tr.cfg.Prefix, tr.cfg.SettleWindow, tr.cfg.DebtMinutes)
	for j, s := range tr.steps[:last+1] {
		if s.want == "" {
			fmt.Fprintf(&b, "  %3d  %s\n", j, s)
		} else {
			fmt.Fprintf(&b, "  %3d  %s = %s\n", j, s, s.want)
		}
	}
	return b.String()
}

// parseVectors reads the traces' text: a "trace" line per trace, then a
// line per step ("+ ms", "- ms", "R tenant id per n = answer", "S …").
func parseVectors(t *testing.T, text string) []vectorTrace {
	t.Helper()
	var out []vectorTrace
	sc := bufio.NewScanner(strings.NewReader(text))
	for line := 1; sc.Scan(); line++ {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		fail := func(err error) { t.Fatalf("quota vectors, line %d %q: %v", line, sc.Text(), err) }
		switch f[0] {
		case "trace":
			var tr vectorTrace
			var window int64
			_, err := fmt.Sscanf(sc.Text(), "trace %s %q %d %d", &tr.name, &tr.cfg.Prefix, &window, &tr.cfg.DebtMinutes)
			if err != nil {
				fail(err)
			}
			tr.cfg.SettleWindow = time.Duration(window) * time.Millisecond
			out = append(out, tr)
		case "+", "-":
			ms, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil || len(out) == 0 {
				fail(fmt.Errorf("a clock move outside a trace, or %v", err))
			}
			out[len(out)-1].steps = append(out[len(out)-1].steps, vectorStep{op: f[0][0], ms: ms})
		case "R", "S":
			s, err := parseCall(sc.Text())
			if err != nil || len(out) == 0 {
				fail(fmt.Errorf("a call outside a trace, or %v", err))
			}
			out[len(out)-1].steps = append(out[len(out)-1].steps, s)
		default:
			fail(errors.New("unknown step"))
		}
	}
	return out
}

func parseCall(line string) (vectorStep, error) {
	call, want, ok := strings.Cut(line, " = ")
	if !ok {
		return vectorStep{}, errors.New("no answer")
	}
	s := vectorStep{op: call[0], want: want}
	_, err := fmt.Sscanf(call[2:], "%q %q %d %d", &s.tenant, &s.id, &s.per, &s.n)
	return s, err
}
