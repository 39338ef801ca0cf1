package redistest

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal kills the redis-server if the test binary dies
// without running its cleanup (a timeout panic, a kill -9).
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
