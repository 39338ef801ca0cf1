package linear

import (
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/production-go/gateway-lab/internal/testkit/redistest"
)

// OwnRedisPhases are the three phases a check runs on a Redis of its own:
// quiet; srv stalled for 0.9 s (calls made meanwhile give up, their
// outcome unknown, and run when it wakes, after their callers have left);
// srv killed and started again with nothing (rec is told every key was
// forgotten at some instant between the kill and the start). client is
// the row the restart is drawn on: one past the callers'.
func OwnRedisPhases(srv *redistest.Server, rec *Recorder, client int, keys []string, quiet, stall, restart time.Duration) []Phase {
	return []Phase{
		{Name: "quiet", Length: quiet},
		{Name: "stall", Length: stall, Start: func() { srv.Stall(900 * time.Millisecond) }},
		{Name: "restart", Length: restart, Start: func() {
			start := time.Now()
			srv.Stop()
			srv.Start()
			rec.Span(client, keys, Restart{}, start, time.Now())
		}},
	}
}

// MiniredisPhases are the phases a check can run on miniredis, which
// cannot stall: quiet, then every key wiped, as a restart loses them.
func MiniredisPhases(m *miniredis.Miniredis, rec *Recorder, client int, keys []string, quiet, restart time.Duration) []Phase {
	return []Phase{
		{Name: "quiet", Length: quiet},
		{Name: "restart", Length: restart, Start: func() {
			start := time.Now()
			m.FlushAll()
			rec.Span(client, keys, Restart{}, start, time.Now())
		}},
	}
}
