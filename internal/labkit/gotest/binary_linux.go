package gotest

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel makes cancelling cmd kill what it started as well (a
// test's own subprocesses), and labctl's own death kill cmd: a test binary
// must not run on, orphaned, after a SIGKILL or a crash.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
