package hooks

import (
	"context"
	"sync/atomic"

	"github.com/cachewatch/cachewatch/internal/emit"
)

// States of a lazy child.
const (
	childUnset uint32 = iota
	childSetting
	childReady
)

// lazyCounter is one label set of a counter, created on first use so that
// series appear only for what actually happened, and reached without
// allocating or looking anything up afterwards (WithLabelValues hashes the
// label values).
//
// The child is held inline, published by state: a reader that sees
// childReady sees c. Only the creator that wins the CAS writes c; racing
// creators use the child they got, which the vec returns to all of them.
// Holding it inline rather than behind an atomic pointer saves the hot path
// a dependent load, which misses the cache when the client has run in
// between.
type lazyCounter struct {
	state atomic.Uint32
	c     *emit.Counter
	vec   *emit.CounterVec
	lvs   []string
}

func newLazyCounter(vec *emit.CounterVec, lvs ...string) lazyCounter {
	return lazyCounter{vec: vec, lvs: lvs}
}

// Inc increments the child, creating it on first use.
func (l *lazyCounter) Inc() { l.get().Inc() }

// Add adds v to the child, creating it on first use.
func (l *lazyCounter) Add(v float64) { l.get().Add(v) }

func (l *lazyCounter) get() *emit.Counter {
	if l.state.Load() == childReady {
		return l.c
	}
	c := l.vec.WithLabelValues(l.lvs...)
	if l.state.CompareAndSwap(childUnset, childSetting) {
		l.c = c
		l.state.Store(childReady)
	}
	return c
}

// lazyObserver is lazyCounter for a histogram.
type lazyObserver struct {
	state atomic.Uint32
	o     *emit.Histogram
	vec   *emit.HistogramVec
	lvs   []string
}

func newLazyObserver(vec *emit.HistogramVec, lvs ...string) lazyObserver {
	return lazyObserver{vec: vec, lvs: lvs}
}

// Observe records v in the child, creating it on first use.
func (l *lazyObserver) Observe(v float64) { l.get().Observe(v) }

// ObserveContext records v in the child, with ctx's sampled span as an
// exemplar.
func (l *lazyObserver) ObserveContext(ctx context.Context, v float64) { l.get().ObserveContext(ctx, v) }

func (l *lazyObserver) get() *emit.Histogram {
	if l.state.Load() == childReady {
		return l.o
	}
	o := l.vec.WithLabelValues(l.lvs...)
	if l.state.CompareAndSwap(childUnset, childSetting) {
		l.o = o
		l.state.Store(childReady)
	}
	return o
}
