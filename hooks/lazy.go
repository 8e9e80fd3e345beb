package hooks

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// lazyCounter is one label child of a CounterVec, created on first use so
// that series appear only for what actually happened, and looked up without
// allocating afterwards (WithLabelValues allocates its variadic slice).
type lazyCounter struct {
	vec *prometheus.CounterVec
	lvs []string
	c   atomic.Pointer[prometheus.Counter]
}

func newLazyCounter(vec *prometheus.CounterVec, lvs ...string) lazyCounter {
	return lazyCounter{vec: vec, lvs: lvs}
}

// Inc increments the child, creating it on first use.
func (l *lazyCounter) Inc() { l.get().Inc() }

// Add adds v to the child, creating it on first use.
func (l *lazyCounter) Add(v float64) { l.get().Add(v) }

func (l *lazyCounter) get() prometheus.Counter {
	if p := l.c.Load(); p != nil {
		return *p
	}
	c := l.vec.WithLabelValues(l.lvs...)
	l.c.Store(&c) // racing creators store the same child
	return c
}

// lazyObserver is lazyCounter for a HistogramVec.
type lazyObserver struct {
	vec *prometheus.HistogramVec
	lvs []string
	o   atomic.Pointer[prometheus.Observer]
}

func newLazyObserver(vec *prometheus.HistogramVec, lvs ...string) lazyObserver {
	return lazyObserver{vec: vec, lvs: lvs}
}

// Observe records v in the child, creating it on first use.
func (l *lazyObserver) Observe(v float64) {
	if p := l.o.Load(); p != nil {
		(*p).Observe(v)
		return
	}
	o := l.vec.WithLabelValues(l.lvs...)
	l.o.Store(&o)
	o.Observe(v)
}
