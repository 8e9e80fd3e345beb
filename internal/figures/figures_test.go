package figures

import (
	"strings"
	"testing"
	"time"
)

func TestQuantile(t *testing.T) {
	var sorted []time.Duration
	for i := 1; i <= 100; i++ {
		sorted = append(sorted, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0, time.Millisecond}, {0.5, 51 * time.Millisecond}, {0.99, 100 * time.Millisecond}, {1, 100 * time.Millisecond}} {
		if got := Quantile(sorted, c.q); got != c.want {
			t.Errorf("Quantile(1..100 ms, %v) = %v, want %v", c.q, got, c.want)
		}
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %v, want 0", got)
	}
	if got := Quantile([]time.Duration{1234567}, 0.5); got != 1200*time.Microsecond {
		t.Errorf("Quantile rounds to 100 µs: got %v, want 1.2ms", got)
	}
}

func TestLoadAvg(t *testing.T) {
	if got := LoadAvg(); got != "?" && len(strings.Fields(got)) != 3 {
		t.Errorf("LoadAvg() = %q, want three figures or ?", got)
	}
}
