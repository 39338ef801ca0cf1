package linear

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// Allow is the input of one call to a rate limiter's Allow.
type Allow struct{}

// Restart is the input of a restart that lost Redis' data: every bucket
// is forgotten, and a forgotten bucket reads as full.
type Restart struct{}

// Decision is the output of one Allow call. A limiter that says only
// whether it allowed (lab 07's naive one) sets OnlyAllowed, and the model
// reads nothing else.
type Decision struct {
	Allowed     bool
	Remaining   int
	RetryAfter  time.Duration
	OnlyAllowed bool
}

// eps absorbs floating-point rounding in the script's arithmetic, in
// tokens.
const eps = 1e-6

// bucket is what the model knows of one key's token bucket after the
// calls so far: its level at a time T (after the last call) is
// min(Burst, A + Rate·T) for some A in [Lo, Hi] — Hi = +Inf is a bucket
// that may be full (Lo = +Inf: full for sure) — and the last call took
// effect no earlier than Tmin. The exact instant of each call is unknown
// (somewhere in its interval), so A is too: the model keeps an interval of
// what is possible, the smallest one that holds every branch. It never
// rejects a history the contract allows, and may let a subtle one through.
type bucket struct {
	Lo, Hi float64
	Tmin   float64
}

var full = bucket{Lo: math.Inf(1), Hi: math.Inf(1)}

// Bucket is the sequential contract of lab 07's limiter — and of lab 02's
// bucket, shared: a key's bucket holds up to burst tokens, starts full,
// refills at rate tokens a second on Redis' clock; Allow takes one token
// if there is one (Remaining: the whole tokens left), else takes nothing
// and says when one will be back (RetryAfter: rounded up to the
// microsecond, so that a call then succeeds). A bucket Redis no longer
// holds (expired, or lost in a restart) is full.
func Bucket(rate float64, burst int) porcupine.Model {
	b := float64(burst)
	return porcupine.Model{
		Partition: ByKey,
		Init:      func() any { return full },
		Step: func(state, input, output any) (bool, any) {
			s, c, out := state.(bucket), input.(Call), output.(Reply)
			switch c.Input.(type) {
			case Restart:
				next := full
				next.Tmin = s.Tmin
				return true, next
			case Settled:
				return true, s
			}
			t0, t1 := max(c.Start-Slack.Seconds(), s.Tmin), c.End+Slack.Seconds()
			if t0 > t1 {
				return false, nil
			}
			var next []bucket
			switch {
			case out.Unknown: // it may never have run, or have run either way
				next = append(next, s)
				next = append(next, allowed(s, rate, b, t0, t1, Decision{Allowed: true, OnlyAllowed: true})...)
				next = append(next, refused(s, rate, t0, t1, Decision{OnlyAllowed: true})...)
			case out.Output.(Decision).Allowed:
				next = allowed(s, rate, b, t0, t1, out.Output.(Decision))
			default:
				next = refused(s, rate, t0, t1, out.Output.(Decision))
			}
			if len(next) == 0 {
				return false, nil
			}
			return true, hull(next)
		},
		Equal:             func(a, b any) bool { return a.(bucket) == b.(bucket) },
		DescribeOperation: describeDecision,
		DescribeState: func(state any) string {
			s := state.(bucket)
			if s.Lo == math.Inf(1) {
				return "full"
			}
			return fmt.Sprintf("level(T) = min(%d, A + %g·T), A in [%.4f, %.4f], after %.6fs", burst, rate, s.Lo, s.Hi, s.Tmin)
		},
	}
}

// hull is the smallest state that holds every one of states.
func hull(states []bucket) bucket {
	h := states[0]
	for _, s := range states[1:] {
		h.Lo, h.Hi, h.Tmin = min(h.Lo, s.Lo), max(h.Hi, s.Hi), min(h.Tmin, s.Tmin)
	}
	return h
}

// allowed is every state after an Allow that took a token, at an instant
// in [t0, t1], and said d.
func allowed(s bucket, rate, b, t0, t1 float64, d Decision) []bucket {
	// The level before the call, in [lo, hi): at least a token, and
	// Remaining whole tokens after it.
	lo, hi := 1.0, b+1
	if !d.OnlyAllowed {
		lo, hi = float64(d.Remaining)+1, float64(d.Remaining)+2
	}
	var next []bucket
	if lo <= b+eps && b < hi-eps && s.Hi+rate*t1 >= b-eps { // it may have been full: its new A depends on when
		from := max(t0, (b-eps-s.Hi)/rate)
		if from <= t1 {
			next = append(next, bucket{Lo: b - 1 - rate*t1, Hi: b - 1 - rate*from, Tmin: from})
		}
	}
	// Not full: the level was A + rate·t, and the call leaves A − 1.
	uLo, uHi := max(lo-eps, s.Lo+rate*t0), min(hi+eps, b, s.Hi+rate*t1)
	aLo, aHi := max(s.Lo, uLo-rate*t1), min(s.Hi, uHi-rate*t0)
	if uLo <= uHi && aLo <= aHi {
		next = append(next, bucket{Lo: aLo - 1, Hi: aHi - 1, Tmin: max(t0, (uLo-s.Hi)/rate)})
	}
	return next
}

// refused is every state after an Allow that took nothing, at an instant
// in [t0, t1], and said d: the level was below one token, and RetryAfter
// the time until it is one, rounded up to the microsecond.
func refused(s bucket, rate, t0, t1 float64, d Decision) []bucket {
	if !d.OnlyAllowed && d.Remaining != 0 {
		return nil
	}
	lo, hi := math.Inf(-1), 1.0
	if !d.OnlyAllowed {
		us := float64(d.RetryAfter.Microseconds())
		lo, hi = 1-us*rate/1e6, 1-(us-1)*rate/1e6
	}
	uLo, uHi := max(lo-eps, s.Lo+rate*t0), min(hi+eps, s.Hi+rate*t1)
	aLo, aHi := max(s.Lo, uLo-rate*t1), min(s.Hi, uHi-rate*t0)
	if uLo > uHi || aLo > aHi {
		return nil
	}
	return []bucket{{Lo: aLo, Hi: aHi, Tmin: max(t0, (uLo-s.Hi)/rate)}}
}

func describeDecision(input, output any) string {
	c, out := input.(Call), output.(Reply)
	switch c.Input.(type) {
	case Restart:
		return "restart: data lost"
	case Settled:
		return "faults over"
	}
	if out.Unknown {
		return "allow → ? (the caller gave up)"
	}
	d := out.Output.(Decision)
	switch {
	case d.OnlyAllowed:
		return fmt.Sprintf("allow → %t", d.Allowed)
	case d.Allowed:
		return fmt.Sprintf("allow → yes, %d left", d.Remaining)
	default:
		return fmt.Sprintf("allow → no, retry after %s", d.RetryAfter)
	}
}
