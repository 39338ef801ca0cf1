// Package proofs holds no code: its tests check the course's atomicity
// claims — lab 07's rate limiter, lab 12's token quota and the gateway's
// concurrency leases are linearizable on a real Redis — with the
// linearizability checker in internal/testkit/linear, in three phases:
// quiet, a Redis stalled for about a second while its callers give up,
// and a Redis restarted with its data lost. Each also runs the lab's naive
// reference and shows the checker catching it. `make integration` runs
// them; docs/scaling.md says what they prove and what they do not.
package proofs
