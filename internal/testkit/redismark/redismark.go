// Package redismark holds the lines the real-Redis test helper
// (internal/testkit/redistest) prints and labctl reads back. One definition
// on both sides, so the writer and the reader cannot drift apart.
package redismark

import "strings"

const (
	// Real starts the line a test logs when it really talks to a Redis
	// server. `labctl integration` requires it from every test it counts.
	Real = "redistest: real Redis"

	// Skipped starts the message of a test that skipped because it found no
	// Redis. labctl shows such a test as "needs Redis", not as a failure.
	Skipped = "redistest: skipped: "
)

// SkipMessage is the one-line skip message for reason (why no server was found).
func SkipMessage(reason, urlEnv, requiredEnv string) string {
	return Skipped + reason + " (install redis-server or set " + urlEnv + "; " +
		requiredEnv + "=1 turns this skip into a failure)"
}

// SkipReason finds the skip message in a test's output and returns the rest
// of its line: why the test skipped and what to do about it.
func SkipReason(output string) (string, bool) {
	_, rest, ok := strings.Cut(output, Skipped)
	if !ok {
		return "", false
	}
	line, _, _ := strings.Cut(rest, "\n")
	return strings.TrimSpace(line), true
}
