//go:build !linux

package bench

import "os/exec"

// detach leaves the server in the bench's process group where Setpgid and Pdeathsig are
// not both available: a Ctrl-C then reaches it too.
func detach(*exec.Cmd) {}
