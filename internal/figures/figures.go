// Package figures holds what the measuring tests share to report their
// figures: quantiles of measured durations and the machine's load at the
// time, to log beside them.
package figures

import (
	"os"
	"strings"
	"time"
)

// Quantile is the q-quantile (0 to 1) of sorted, ascending durations: the
// value at rank q×len, the last for q = 1, rounded to 100 µs. It is 0 for
// no durations.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[max(0, min(len(sorted)-1, int(q*float64(len(sorted)))))].Round(100 * time.Microsecond)
}

// LoadAvg is the machine's load average over 1, 5 and 15 minutes, as
// uptime prints it ("?" where /proc/loadavg cannot be read).
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
