//go:build !unix

package bench

import "time"

// cpuNow is not available here: client CPU is reported as zero.
func cpuNow() (time.Duration, int64) { return 0, 0 }
