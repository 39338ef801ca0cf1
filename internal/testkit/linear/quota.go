package linear

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Reserve is the input of one call to lab 12's Quota.Reserve: the test's
// own id for the reservation, and its estimate in tokens.
type Reserve struct{ ID, Estimate int }

// Settle is the input of one call to Quota.Settle. Late says the test
// never learnt whether the reservation's Reserve ran (its caller gave
// up): that Reserve may yet run after this Settle, and must take nothing.
type Settle struct {
	ID, Used int
	Late     bool
}

// Settled is the output of a Settle: whether it applied.
type SettledOut struct{ Applied bool }

// unit is one token in the quota's units (lab 12's UNIT).
const unit = 60000.0

// quota is what the model knows of one tenant's quota: its level (units)
// at a time T (ms, the recorder's clock) is min(cap, A + per·T) for some A
// in [Lo, Hi] (Lo = +Inf: full), the last call took effect no earlier than
// Tmin; the reservations open ("id:estimate", sorted) and the ids whose
// Settle came first and whose late Reserve must take nothing.
type quota struct {
	Lo, Hi, Tmin float64
	Open, Marked string
}

// Quota is the sequential contract of lab 12's token quota, with a
// settle window longer than the run: a tenant's bucket holds perMinute
// tokens, starts full and refills at perMinute a minute on Redis' clock;
// Reserve takes its estimate if the bucket holds it (Remaining: whole
// tokens left), else takes nothing and says in RetryAfter (rounded up to
// the millisecond) when it will fit; Settle of an open reservation moves
// the bucket by estimate − used, never above full nor below the debt
// allowed (debtMinutes of quota), and applies once; a Reserve whose Settle
// came first takes nothing. A restart loses everything.
func Quota(perMinute, debtMinutes int) porcupine.Model {
	q := quotaModel{per: float64(perMinute), cap: float64(perMinute) * unit, floor: -float64(perMinute) * unit * float64(debtMinutes)}
	return porcupine.Model{
		Partition: ByKey,
		Init:      func() any { return []quota{{Lo: math.Inf(1), Hi: math.Inf(1)}} },
		// The state is every configuration of reservations the calls so
		// far may have left, each with the hull of its possible levels:
		// a set that stays small however many calls' outcomes are unknown.
		Step: func(state, input, output any) (bool, any) {
			var next []any
			for _, s := range state.([]quota) {
				next = append(next, q.step(s, input, output)...)
			}
			if len(next) == 0 {
				return false, nil
			}
			return true, merge(next)
		},
		Equal: func(a, b any) bool { return slices.Equal(a.([]quota), b.([]quota)) },
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%v → %v", input.(Call).Input, output.(Reply))
		},
		DescribeState: func(state any) string {
			var parts []string
			for _, s := range state.([]quota) {
				parts = append(parts, fmt.Sprintf("A in [%.0f, %.0f] after %.1fms; open [%s]; marked [%s]", s.Lo, s.Hi, s.Tmin, s.Open, s.Marked))
			}
			return strings.Join(parts, " | ")
		},
	}
}

// merge keeps one state per configuration of open and marked
// reservations, the hull of their levels, in a stable order.
func merge(states []any) []quota {
	byKey := map[[2]string]quota{}
	for _, a := range states {
		s := a.(quota)
		k := [2]string{s.Open, s.Marked}
		if h, ok := byKey[k]; ok {
			s.Lo, s.Hi, s.Tmin = min(h.Lo, s.Lo), max(h.Hi, s.Hi), min(h.Tmin, s.Tmin)
		}
		byKey[k] = s
	}
	out := make([]quota, 0, len(byKey))
	for _, s := range byKey {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b quota) int {
		if c := strings.Compare(a.Open, b.Open); c != 0 {
			return c
		}
		return strings.Compare(a.Marked, b.Marked)
	})
	return out
}

type quotaModel struct{ per, cap, floor float64 }

func (q quotaModel) step(state, input, output any) []any {
	s, c, out := state.(quota), input.(Call), output.(Reply)
	switch in := c.Input.(type) {
	case Restart:
		return []any{quota{Lo: math.Inf(1), Hi: math.Inf(1), Tmin: s.Tmin}}
	case Settled:
		return []any{s}
	case Reserve:
		t0, t1 := max(c.Start*1000-Slack.Seconds()*1000, s.Tmin), c.End*1000+Slack.Seconds()*1000
		if t0 > t1 {
			return nil
		}
		return q.reserve(s, in, out, t0, t1)
	case Settle:
		t0, t1 := max(c.Start*1000-Slack.Seconds()*1000, s.Tmin), c.End*1000+Slack.Seconds()*1000
		if t0 > t1 {
			return nil
		}
		return q.settle(s, in, out, t0, t1)
	}
	return nil
}

func (q quotaModel) reserve(s quota, in Reserve, out Reply, t0, t1 float64) []any {
	open := entries(s.Open)
	if _, ok := open[in.ID]; ok || slices.Contains(ids(s.Marked), in.ID) {
		if out.Unknown {
			return []any{s}
		}
		d := out.Output.(Decision)
		if !d.Allowed {
			return nil
		}
		return wrap(q.move(s, t0, t1, 0, inf(-1), inf(1), remainingRange(d.Remaining)), s)
	}
	e := float64(in.Estimate) * unit
	took := func(post [2]float64) []any {
		moved := q.move(s, t0, t1, -e, e, inf(1), post)
		if moved == nil {
			return nil
		}
		open[in.ID] = in.Estimate
		moved.Open = joinEntries(open)
		delete(open, in.ID)
		return []any{*moved}
	}
	if out.Unknown {
		next := []any{s}
		next = append(next, took([2]float64{inf(-1), inf(1)})...)
		return append(next, wrap(q.move(s, t0, t1, 0, inf(-1), e, [2]float64{inf(-1), inf(1)}), s)...)
	}
	d := out.Output.(Decision)
	switch {
	case d.Allowed && d.OnlyAllowed:
		return took([2]float64{inf(-1), inf(1)})
	case d.Allowed:
		return took(remainingRange(d.Remaining))
	case d.OnlyAllowed:
		return wrap(q.move(s, t0, t1, 0, inf(-1), e, [2]float64{inf(-1), inf(1)}), s)
	}
	ra := float64(d.RetryAfter.Milliseconds())
	pre := [2]float64{max(e-ra*q.per, inf(-1)), e - (ra-1)*q.per}
	return wrap(q.move(s, t0, t1, 0, pre[0], min(pre[1], e), remainingRange(d.Remaining)), s)
}

func (q quotaModel) settle(s quota, in Settle, out Reply, t0, t1 float64) []any {
	open := entries(s.Open)
	marked := s.Marked
	if in.Late {
		marked = join(append(ids(s.Marked), in.ID))
	}
	e, isOpen := open[in.ID]
	delete(open, in.ID)
	unchanged := quota{Lo: s.Lo, Hi: s.Hi, Tmin: max(s.Tmin, t0), Open: s.Open, Marked: marked}
	applied := func() []any {
		moved := q.move(s, t0, t1, float64(e-in.Used)*unit, inf(-1), inf(1), [2]float64{inf(-1), inf(1)})
		if moved == nil {
			return nil
		}
		moved.Open, moved.Marked = joinEntries(open), marked
		return []any{*moved}
	}
	switch {
	case out.Unknown && isOpen:
		return append([]any{s}, applied()...)
	case out.Unknown:
		return []any{s, unchanged}
	case out.Output.(SettledOut).Applied != isOpen:
		return nil
	case isOpen:
		return applied()
	}
	return []any{unchanged}
}

// move is the state after a call at an instant in [t0, t1] that found
// the level in [preLo, preHi) and moved it by delta, clamped to
// [floor, cap], to a level in post: nil when no instant and no A fit.
func (q quotaModel) move(s quota, t0, t1, delta, preLo, preHi float64, post [2]float64) *quota {
	var los, his, tmins []float64
	add := func(lo, hi, tmin float64) {
		if lo <= hi {
			los, his, tmins = append(los, lo), append(his, hi), append(tmins, tmin)
		}
	}
	clamp := func(v float64) float64 { return max(q.floor, min(q.cap, v)) }
	// Full at the call: the level was cap, whenever the call was.
	if s.Hi+q.per*t1 >= q.cap-eps && preLo <= q.cap+eps && q.cap < preHi+eps {
		if p := clamp(q.cap + delta); p >= post[0]-eps && p < post[1]+eps {
			from := max(t0, (q.cap-s.Hi)/q.per)
			add(p-q.per*t1, p-q.per*from, from)
		}
	}
	// Below full: the level was u = A + per·t.
	uLo, uHi := max(preLo-eps, s.Lo+q.per*t0), min(preHi+eps, q.cap, s.Hi+q.per*t1)
	if post[0] > q.floor+eps || post[1] < q.cap-eps { // the level after, unclamped
		uLo, uHi = max(uLo, post[0]-delta-eps), min(uHi, post[1]-delta+eps)
	}
	if uLo <= uHi {
		aLo, aHi := max(s.Lo, uLo-q.per*t1), min(s.Hi, uHi-q.per*t0)
		tmin := max(t0, (uLo-s.Hi)/q.per)
		switch {
		case uLo+delta >= q.cap: // refunded to full
			add(q.cap-q.per*t1, q.cap-q.per*tmin, tmin)
		case uHi+delta <= q.floor: // charged to the floor
			add(q.floor-q.per*t1, q.floor-q.per*tmin, tmin)
		default:
			add(aLo+delta, aHi+delta, tmin)
			if uHi+delta > q.cap {
				add(q.cap-q.per*t1, q.cap-q.per*tmin, tmin)
			}
			if uLo+delta < q.floor {
				add(q.floor-q.per*t1, q.floor-q.per*tmin, tmin)
			}
		}
	}
	if len(los) == 0 {
		return nil
	}
	return &quota{Lo: slices.Min(los), Hi: slices.Max(his), Tmin: slices.Min(tmins), Open: s.Open, Marked: s.Marked}
}

// remainingRange is the levels (units) whose whole tokens, never below
// zero, are r.
func remainingRange(r int) [2]float64 {
	if r == 0 {
		return [2]float64{inf(-1), unit}
	}
	return [2]float64{float64(r) * unit, float64(r+1) * unit}
}

func wrap(q *quota, _ quota) []any {
	if q == nil {
		return nil
	}
	return []any{*q}
}

func inf(sign int) float64 { return math.Inf(sign) }

func entries(s string) map[int]int {
	out := map[int]int{}
	if s == "" {
		return out
	}
	for f := range strings.SplitSeq(s, ",") {
		id, e, _ := strings.Cut(f, ":")
		i, _ := strconv.Atoi(id)
		n, _ := strconv.Atoi(e)
		out[i] = n
	}
	return out
}

func joinEntries(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = strconv.Itoa(k) + ":" + strconv.Itoa(m[k])
	}
	return strings.Join(parts, ",")
}
