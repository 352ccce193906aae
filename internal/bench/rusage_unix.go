//go:build unix

package bench

import (
	"runtime"
	"syscall"
	"time"
)

// cpuNow returns this process's CPU time (user + system) and its peak resident memory.
func cpuNow() (time.Duration, int64) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	rss := int64(ru.Maxrss)
	if runtime.GOOS != "darwin" {
		rss *= 1024 // kilobytes everywhere but macOS
	}
	return cpu, rss
}
