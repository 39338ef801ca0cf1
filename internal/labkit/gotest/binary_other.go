//go:build !unix

package gotest

import "os/exec"

// killGroupOnCancel leaves cmd as it is: where there are no process
// groups, a test binary test2json started stops at its own -test.timeout.
func killGroupOnCancel(*exec.Cmd) {}
