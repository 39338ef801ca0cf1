//go:build quotavectors

package quotas

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The traces' generator. It knows nothing of how a quota works: it picks
// calls and clock moves, biased toward the edges the answers so far point
// at (a RetryAfter, a tenant's last Remaining, a reservation's window),
// and books what the contract leaves open so that no trace goes there.

type genID struct {
	reserved, closed bool  // reserved: a Reserve of it was allowed; closed: a Settle of it ran
	estimate         int   // what its allowed Reserve took
	rRaw, rMax       int64 // the clock, and the latest time it had shown, at that Reserve
	anchor           int64 // the clock at its first allowed Reserve or Settle
	anchored         bool
}

type genTenant struct {
	name      string
	per       int
	remaining int
	retry     int64
	ids       map[string]*genID
	order     []string
}

type gen struct {
	t        *testing.T
	rng      *rand.Rand
	r        *rig
	window   int64
	raw, max int64 // ms since the start: the clock, and the latest time it showed
	tenants  []*genTenant
	tr       vectorTrace
	tags     map[string]bool
	next     int
}

var (
	genWindows = []int64{0, 1, 2, 7, 1000, 59_999, 60_000, 61_000, 3_600_000, 3_600_001, 7_200_000}
	genQuotas  = []int{1, 2, 3, 7, 59, 60, 61, 600, 1000, 7919, 1_000_000, MaxPerMinute}
)

// generateTrace makes one trace; a busy one is a tenant reserving and
// settling over many windows, whose state Redis must keep bounded.
func generateTrace(t *testing.T, rng *rand.Rand, busy bool) vectorTrace {
	cfg := Config{
		Prefix:      []string{"", "tq", "q-2"}[rng.IntN(3)],
		DebtMinutes: []int{0, 1, 2, 3, MaxDebtMinutes}[rng.IntN(5)],
	}
	window := genWindows[rng.IntN(len(genWindows))]
	if rng.IntN(4) == 0 {
		window = 1 + rng.Int64N(600_000)
	}
	if busy {
		window = []int64{1000, 2000, 5000}[rng.IntN(3)]
	}
	cfg.SettleWindow = time.Duration(window) * time.Millisecond
	g := &gen{t: t, rng: rng, r: &rig{fixture: newFixture(t, cfg)}, window: cmp.Or(window, DefaultSettleWindow.Milliseconds()),
		tr: vectorTrace{cfg: cfg}, tags: map[string]bool{}}
	names := []string{"acme", "Acme", "acme ", "acme:eu", "b"}
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	tenants, steps := 1+rng.IntN(3), 20+rng.IntN(26)
	if busy {
		tenants, steps = 1, 80
	}
	for _, name := range names[:tenants] {
		per := genQuotas[rng.IntN(len(genQuotas))]
		if busy {
			per = 1_000_000
		}
		g.tenants = append(g.tenants, &genTenant{name: name, per: per, remaining: per, ids: map[string]*genID{}})
	}
	for range steps {
		if busy {
			g.busyStep()
		} else {
			g.step()
		}
	}
	var tags []string
	for _, tag := range []string{"debt", "back", "lowered", "edge", "again", "bad"} {
		if g.tags[tag] {
			tags = append(tags, tag)
		}
	}
	if busy {
		tags = append([]string{"busy"}, tags...)
	}
	g.tr.name = fmt.Sprintf("w%d-d%d-%dtenants", window, cfg.DebtMinutes, len(g.tenants))
	if len(tags) > 0 {
		g.tr.name += "-" + strings.Join(tags, "-")
	}
	return g.tr
}

// busyStep adds a step of a busy tenant: mostly small reserves and
// settles, and the clock moving a little at a time.
func (g *gen) busyStep() {
	tn := g.tenants[0]
	switch n := g.rng.IntN(100); {
	case n < 40:
		g.reserve(tn, g.newID(tn), g.rng.IntN(100))
	case n < 65:
		g.settleOpen(tn)
	case n < 75:
		g.settleOther(tn)
	default:
		g.clock('+', 1+g.rng.Int64N(g.window))
	}
}

// step adds one step, picked by weight.
func (g *gen) step() {
	tn := g.tenants[g.rng.IntN(len(g.tenants))]
	switch n := g.rng.IntN(100); {
	case n < 30:
		g.reserve(tn, g.newID(tn), g.estimate(tn))
	case n < 38:
		g.reserveAgain(tn)
	case n < 62:
		g.settleOpen(tn)
	case n < 67:
		g.settleOther(tn)
	case n < 88:
		g.advance(tn)
	case n < 92:
		if g.raw > 0 {
			g.tags["back"] = true
			g.clock('-', []int64{1, 1 + g.rng.Int64N(3000), 60_000}[g.rng.IntN(3)])
		}
	case n < 95:
		g.lower(tn)
	default:
		g.invalid(tn)
	}
}

func (g *gen) newID(tn *genTenant) string {
	g.next++
	id := fmt.Sprintf("r%d", g.next)
	last := id
	if len(tn.order) > 0 {
		last = tn.order[len(tn.order)-1]
	}
	switch g.rng.IntN(12) { // ids are the caller's: any string but ""
	case 0:
		id = "{" + id + "}"
	case 1:
		id = "settled:" + last // what a marker of the last id might be called
	case 2:
		id = "open:" + last
	case 3:
		id = last + ":" + strings.Repeat("x", 300)
	case 4:
		id = strings.ToUpper(last)
	case 5:
		id = last + " "
	}
	if _, dup := tn.ids[id]; dup {
		id = fmt.Sprintf("r%d", g.next)
	}
	tn.ids[id] = &genID{}
	tn.order = append(tn.order, id)
	return id
}

func (g *gen) estimate(tn *genTenant) int {
	pick := []int{0, 0, 1, tn.per, tn.remaining, tn.remaining + 1, tn.remaining - 1, g.rng.IntN(tn.per + 1), g.rng.IntN(tn.per/10 + 1)}
	return min(tn.per, max(0, pick[g.rng.IntN(len(pick))]))
}

func (g *gen) call(s vectorStep) string {
	s.want = s.run(g.r)
	g.tr.steps = append(g.tr.steps, s)
	return s.want
}

func (g *gen) clock(op byte, ms int64) {
	if ms <= 0 {
		return
	}
	vectorStep{op: op, ms: ms}.run(g.r)
	g.tr.steps = append(g.tr.steps, vectorStep{op: op, ms: ms})
	if op == '+' {
		g.raw += ms
	} else {
		g.raw -= ms
	}
	g.max = max(g.max, g.raw)
}

func (g *gen) reserve(tn *genTenant, id string, estimate int) {
	want := g.call(vectorStep{op: 'R', tenant: tn.name, id: id, per: tn.per, n: estimate})
	var allowed bool
	var remaining int
	var retry int64
	if _, err := fmt.Sscanf(want, "allowed=%t remaining=%d retry=%dms", &allowed, &remaining, &retry); err != nil {
		g.t.Fatalf("reserve answered %q: %v", want, err)
	}
	tn.remaining, tn.retry = remaining, retry
	st := tn.ids[id]
	if !allowed || st.reserved || st.closed {
		return // refused, resent, or late: nothing new to book
	}
	st.reserved, st.estimate, st.rRaw, st.rMax = true, estimate, g.raw, g.max
	if !st.anchored {
		st.anchor, st.anchored = g.raw, true
	}
}

// reserveAgain resends a Reserve of an id Redis must still remember: one
// reserved or settled less than a window ago on every reading of the
// clock, or one only ever refused.
func (g *gen) reserveAgain(tn *genTenant) {
	var ok []string
	for _, id := range tn.order {
		st := tn.ids[id]
		if !st.anchored || g.max-st.anchor < g.window {
			ok = append(ok, id)
		}
	}
	if len(ok) == 0 {
		return
	}
	g.tags["again"] = true
	g.reserve(tn, ok[g.rng.IntN(len(ok))], g.estimate(tn))
}

// settleable says whether a Settle of st now has one answer on every
// reading of the clock: its age from the Reserve is below the window on
// the longest reading, or at least the window on the shortest.
func (g *gen) settleable(st *genID) bool {
	return g.max-st.rRaw < g.window || g.raw-st.rMax >= g.window
}

func (g *gen) settleOpen(tn *genTenant) {
	var ok []string
	for _, id := range tn.order {
		if st := tn.ids[id]; st.reserved && !st.closed && g.settleable(st) {
			ok = append(ok, id)
		}
	}
	if len(ok) == 0 {
		return
	}
	id := ok[g.rng.IntN(len(ok))]
	st := tn.ids[id]
	e := st.estimate
	used := []int{0, e, e, max(0, e-1), e + 1, g.rng.IntN(2*tn.per + 1), 3 * tn.per, g.rng.IntN(e + 1)}[g.rng.IntN(8)]
	if g.rng.IntN(40) == 0 {
		used = MaxPerMinute
	}
	used = min(used, MaxPerMinute)
	if used > e {
		g.tags["debt"] = true
	}
	g.settle(tn, id, used)
}

func (g *gen) settle(tn *genTenant, id string, used int) {
	g.call(vectorStep{op: 'S', tenant: tn.name, id: id, per: tn.per, n: used})
	st := tn.ids[id]
	st.closed = true
	if !st.anchored {
		st.anchor, st.anchored = g.raw, true
	}
}

// settleOther settles an id never reserved, or one settled already.
func (g *gen) settleOther(tn *genTenant) {
	id := ""
	for _, cand := range tn.order {
		if st := tn.ids[cand]; st.closed && g.rng.IntN(2) == 0 {
			id = cand
		}
	}
	if id == "" {
		id = g.newID(tn)
	}
	g.tags["again"] = true
	g.settle(tn, id, g.rng.IntN(tn.per+1))
}

// advance moves the clock, most often to an edge: when the last refusal
// said the estimate fits, or a reservation's window ends.
func (g *gen) advance(tn *genTenant) {
	var edges []int64
	if g.raw == g.max {
		for _, id := range tn.order {
			if st := tn.ids[id]; st.reserved && !st.closed && st.rRaw == st.rMax {
				if edge := st.rRaw + g.window - g.raw; edge > 0 {
					edges = append(edges, edge, edge-1)
				}
			}
		}
	}
	ms := int64(1)
	switch n := g.rng.IntN(100); {
	case n < 35 && tn.retry > 0:
		ms = tn.retry + []int64{0, 0, -1, 1}[g.rng.IntN(4)]
	case n < 55 && len(edges) > 0:
		g.tags["edge"] = true
		ms = edges[g.rng.IntN(len(edges))]
	case n < 65:
		ms = 1
	case n < 82:
		ms = 1 + g.rng.Int64N(5000)
	case n < 95:
		ms = 1 + g.rng.Int64N(120_000)
	case n < 98:
		ms = g.window
	default:
		ms = 3_600_000
	}
	g.clock('+', ms)
}

func (g *gen) lower(tn *genTenant) {
	var lower []int
	for _, q := range genQuotas {
		if q < tn.per {
			lower = append(lower, q)
		}
	}
	if len(lower) == 0 {
		return
	}
	g.tags["lowered"] = true
	tn.per = lower[g.rng.IntN(len(lower))]
	tn.remaining = min(tn.remaining, tn.per)
}

// invalid makes a call with one bad argument, which must change nothing.
func (g *gen) invalid(tn *genTenant) {
	g.tags["bad"] = true
	s := vectorStep{op: 'R', tenant: tn.name, id: "bad", per: tn.per, n: 1}
	switch g.rng.IntN(9) {
	case 0:
		s.tenant = ""
	case 1:
		s.tenant = tn.name + "{x}"
	case 2:
		s.id = ""
	case 3:
		s.per, s.n = 0, 0
	case 4:
		s.per = MaxPerMinute + 1
	case 5:
		s.n = -1
	case 6:
		s.n = tn.per + 1
	case 7:
		s.op, s.n = 'S', -1
	case 8:
		s.op, s.n = 'S', MaxPerMinute+1
	}
	g.call(s)
}

func formatVectors(traces []vectorTrace) string {
	var b strings.Builder
	for _, tr := range traces {
		fmt.Fprintf(&b, "trace %s %q %d %d\n", tr.name, tr.cfg.Prefix, tr.cfg.SettleWindow.Milliseconds(), tr.cfg.DebtMinutes)
		for _, s := range tr.steps {
			switch s.op {
			case '+', '-':
				fmt.Fprintf(&b, "%c %d\n", s.op, s.ms)
			default:
				fmt.Fprintf(&b, "%c %q %q %d %d = %s\n", s.op, s.tenant, s.id, s.per, s.n, s.want)
			}
		}
	}
	return b.String()
}

// TestWriteQuotaVectors records the traces' answers from the reference.
func TestWriteQuotaVectors(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	if filepath.Base(filepath.Dir(wd)) != "solutions" {
		t.Fatalf("the vectors are the reference's answers: write them in solutions/12-quotas, not in %s", wd)
	}
	rng := rand.New(rand.NewPCG(12, 2026))
	var traces []vectorTrace
	for i := range 176 {
		traces = append(traces, generateTrace(t, rng, i%11 == 10))
	}
	text := formatVectors(traces)
	src := "// Code generated by TestWriteQuotaVectors (go test -tags quotavectors); DO NOT EDIT.\n\npackage quotas\n\n" +
		"// quotaVectors are the conformance traces quota_vectors_test.go replays.\nconst quotaVectors = `" + text + "`\n"
	require.NoError(t, os.WriteFile("quota_vectors_data_test.go", []byte(src), 0o644))
}
