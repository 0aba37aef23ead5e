package fleettest

import (
	"os/exec"
	"syscall"
)

// dieWithTest has the kernel SIGKILL the worker when the test process dies
// without running its cleanups (a -timeout panic, a kill): no orphan keeps
// reading the stream.
func dieWithTest(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
