// Package interview reads the interview material in docs/interview and runs
// a timed mock round from it (labctl interview, make interview).
//
// Each file there is one round, named by a comment line such as
// "<!-- round: design -->". Every level-3 heading ("### ") is a question:
// the text under it, up to its first <details> block, is what the reader
// sees; the <details> blocks after it (an answer, follow-ups, a rubric…) are
// held back, each with its <summary> naming the part. GitHub renders those
// blocks collapsed, so a reader can answer first.
//
// The package also holds what keeps the material honest: estimate blocks
// (```estimate, "name = expression" lines) that recompute, and code
// pointers (a repository path in a code span, optionally followed by a Go
// identifier declared in that file; a `go test -run` command) that resolve.
package interview
