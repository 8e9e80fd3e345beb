package hooks_test

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time of the calling OS thread (the goroutine
// must be locked to it), which background load on the machine does not
// inflate the way it inflates wall time.
func threadCPU() time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
