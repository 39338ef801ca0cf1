//go:build unix

package labkit

import (
	"os/exec"
	"syscall"
)

// killGroupOnCancel makes cancelling cmd kill what it started as well:
// test2json's test binary would otherwise run on, orphaned.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
