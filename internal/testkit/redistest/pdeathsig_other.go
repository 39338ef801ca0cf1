//go:build !linux

package redistest

import "os/exec"

// setParentDeathSignal has no portable equivalent outside Linux; the
// server is still stopped by StopOnExit on a normal exit.
func setParentDeathSignal(*exec.Cmd) {}
