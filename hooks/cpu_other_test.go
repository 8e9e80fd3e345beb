//go:build !linux

package hooks_test

import "time"

// threadCPU is not measured outside Linux.
func threadCPU() time.Duration { return 0 }
