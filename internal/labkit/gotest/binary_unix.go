//go:build unix && !linux

package gotest

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel makes cancelling cmd kill what it started as well (a
// test's own subprocesses).
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
