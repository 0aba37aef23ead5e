//go:build !linux

package fleettest

import "os/exec"

// dieWithTest: only Linux has a parent-death signal; elsewhere t.Cleanup is
// the only guard.
func dieWithTest(*exec.Cmd) {}
