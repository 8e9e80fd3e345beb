package emit

import (
	"math"
	"strconv"
)

// FormatBound writes a bucket's upper bound as Prometheus's OTLP
// translation writes the le label of the histograms it receives ("0.5",
// "1", "+Inf"), so that a gauge histogram's buckets read like the others on
// the OpenTelemetry path.
func FormatBound(f float64) string {
	if math.IsInf(f, +1) {
		return "+Inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
