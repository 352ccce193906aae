package bench

import (
	"os/exec"
	"syscall"
)

// detach puts the server the bench starts in a process group of its own, so that a Ctrl-C
// at the terminal stops the load (the bench then drains and reports) without also stopping
// the server under it; and it has the kernel terminate the server if the bench dies.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
