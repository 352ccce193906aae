//go:build !unix

package chattest

import "time"

// cpuTime is not measured here: the benchmarks then report no CPU per message.
func cpuTime() time.Duration { return 0 }
