package linear

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Hold is the input of one call to take an in-flight slot; ID is the
// test's own name for the lease it may get.
type Hold struct{ ID int }

// Release is the input of one call to give lease ID's slot back.
type Release struct{ ID int }

// Settled is the input the recorder adds on every key at each Settle
// mark: the faults before it are over.
type Settled struct{}

// leases is what the model knows of one tenant's in-flight slots: the
// leases the test knows are held (sorted ids, joined), and ghosts — slots
// held by calls whose callers gave up (a Hold that failed and is being
// cancelled, a Release being retried), each of which goes away at some
// moment before the next Settle mark.
type leases struct {
	Held   string
	Ghosts int
}

// Leases is the sequential contract of the gateway's concurrency leases
// (gateway/quota.Leases) with no lease outliving its TTL during the run:
// a Hold is allowed while fewer than max leases are live, and says how
// many slots are left after it; a refused one takes nothing; a Release
// frees its slot (a second one, or one for a lease lost in a restart,
// does nothing); a restart loses every lease.
func Leases(max int) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: ByKey,
		Init:      func() []any { return []any{leases{}} },
		Step: func(state, input, output any) []any {
			s, c, out := state.(leases), input.(Call), output.(Reply)
			switch c.Input.(type) {
			case Restart:
				return []any{leases{}}
			case Settled:
				return []any{leases{Held: s.Held}}
			}
			var next []any
			for g := s.Ghosts; g >= 0; g-- { // any of the ghosts may be gone by now
				next = append(next, leaseStep(leases{Held: s.Held, Ghosts: g}, max, c.Input, out)...)
			}
			return next
		},
		Equal:             func(a, b any) bool { return a.(leases) == b.(leases) },
		DescribeOperation: describeLease,
		DescribeState: func(state any) string {
			s := state.(leases)
			return fmt.Sprintf("held [%s], %d given up on", s.Held, s.Ghosts)
		},
	}
	return nm.ToModel()
}

func leaseStep(s leases, max int, in any, out Reply) []any {
	held := ids(s.Held)
	live := len(held) + s.Ghosts
	switch in := in.(type) {
	case Hold:
		if out.Unknown { // it never took a slot, or took one that is being given back
			next := []any{s}
			if live < max {
				next = append(next, leases{Held: s.Held, Ghosts: s.Ghosts + 1})
			}
			return next
		}
		d := out.Output.(Decision)
		switch {
		case d.Allowed && live < max && d.Remaining == max-live-1:
			return []any{leases{Held: join(append(held, in.ID)), Ghosts: s.Ghosts}}
		case !d.Allowed && live >= max && d.Remaining == 0:
			return []any{s}
		}
		return nil
	case Release:
		i := slices.Index(held, in.ID)
		if i < 0 {
			return []any{s}
		}
		rest := join(slices.Delete(slices.Clone(held), i, i+1))
		if out.Unknown { // being retried: gone by the next mark
			return []any{leases{Held: rest, Ghosts: s.Ghosts + 1}}
		}
		return []any{leases{Held: rest, Ghosts: s.Ghosts}}
	}
	return nil
}

func ids(s string) []int {
	if s == "" {
		return nil
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, _ := strconv.Atoi(f)
		out = append(out, n)
	}
	return out
}

func join(ids []int) string {
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id)
	}
	return strings.Join(parts, ",")
}

func describeLease(input, output any) string {
	c, out := input.(Call), output.(Reply)
	switch in := c.Input.(type) {
	case Restart:
		return "restart: data lost"
	case Settled:
		return "faults over"
	case Hold:
		if out.Unknown {
			return fmt.Sprintf("hold #%d → ? (the caller gave up)", in.ID)
		}
		d := out.Output.(Decision)
		if d.Allowed {
			return fmt.Sprintf("hold #%d → yes, %d left", in.ID, d.Remaining)
		}
		return fmt.Sprintf("hold #%d → no", in.ID)
	case Release:
		if out.Unknown {
			return fmt.Sprintf("release #%d → ? (retried in the background)", in.ID)
		}
		return fmt.Sprintf("release #%d", in.ID)
	}
	return fmt.Sprint(c.Input)
}
