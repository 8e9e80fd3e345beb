package instrument

import (
	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/signals"
)

// metrics holds the client's series, built from the signals catalog, on
// every pipeline the client was given (Registerer, MeterProvider).
type metrics struct {
	// The key-group series, curried with the client's Name: call sites
	// pass the remaining labels only.
	lockAcquire           *emit.HistogramVec
	lockAttempts          *emit.CounterVec
	lockHold              *emit.HistogramVec
	locksLost             *emit.CounterVec
	leaseEnds             *emit.CounterVec
	lockRenewals          *emit.CounterVec
	lookups               *emit.CounterVec
	staleAge              *emit.HistogramVec
	loaderRefreshFailures *emit.CounterVec
	loaderConsecutive     *emit.GaugeVec
	hardTTLExpired        *emit.CounterVec
	invalidated           *emit.CounterVec
	recompute             *emit.HistogramVec
	loaderCalls           *emit.CounterVec
	writeSkew             *emit.CounterVec
	staleWritesRefused    *emit.CounterVec
	duplicate             *emit.CounterVec
	idempotency           *emit.CounterVec
	missBursts            *emit.CounterVec
	retries               *emit.CounterVec
	backoff               *emit.HistogramVec
	// Labelled by the Cache's name, not curried.
	breakerState   *emit.GaugeVec
	loaderInFlight *emit.GaugeVec
	fallbacks      *emit.CounterVec
}

func newMetrics(s emit.Sinks, client string) (*metrics, error) {
	r := registrar{sinks: s, client: client}
	m := &metrics{
		lockAcquire:           histogram(&r, signals.LockAcquireDuration),
		lockAttempts:          counter(&r, signals.LockAttempts),
		lockHold:              histogram(&r, signals.LockHoldDuration),
		locksLost:             counter(&r, signals.LocksLost),
		leaseEnds:             counter(&r, signals.LockLeaseEnds),
		lockRenewals:          counter(&r, signals.LockRenewals),
		lookups:               counter(&r, signals.CacheLookups),
		staleAge:              histogram(&r, signals.StaleAge),
		loaderRefreshFailures: counter(&r, signals.LoaderRefreshFailures),
		loaderConsecutive:     gaugeByGroup(&r, signals.LoaderConsecutiveFailures),
		hardTTLExpired:        counter(&r, signals.HardTTLExpired),
		invalidated:           counter(&r, signals.InvalidatedKeys),
		recompute:             histogram(&r, signals.LoaderDuration),
		loaderCalls:           counter(&r, signals.LoaderCalls),
		writeSkew:             counter(&r, signals.WriteSkew),
		staleWritesRefused:    counter(&r, signals.StaleWritesRefused),
		duplicate:             counter(&r, signals.DuplicateVersionWrites),
		idempotency:           counter(&r, signals.IdempotencyChecks),
		missBursts:            counter(&r, signals.MissBursts),
		retries:               counter(&r, signals.Retries),
		backoff:               histogram(&r, signals.BackoffDelay),
		breakerState:          gaugeByCache(&r, signals.CircuitBreakerState),
		loaderInFlight:        gaugeByCache(&r, signals.LoaderInFlight),
		fallbacks:             counterByCache(&r, signals.CacheFallbacks),
	}
	return m, r.err
}

// registrar builds series on the client's sinks and keeps the first error,
// so newMetrics reads as a list.
type registrar struct {
	sinks  emit.Sinks
	client string
	err    error
}

func keep[V any](r *registrar, v *V, err error) *V {
	if err != nil && r.err == nil {
		r.err = err
	}
	if v == nil {
		v = new(V) // only returned with r.err set: the client is not built
	}
	return v
}

// counter, gaugeByGroup and histogram build a key-group metric and curry
// it with the client's Name.
func counter(r *registrar, m signals.ID) *emit.CounterVec {
	v, err := r.sinks.Counter(m)
	if err != nil {
		return keep[emit.CounterVec](r, nil, err)
	}
	return v.CurryWith(r.client)
}

func gaugeByGroup(r *registrar, m signals.ID) *emit.GaugeVec {
	v, err := r.sinks.Gauge(m)
	if err != nil {
		return keep[emit.GaugeVec](r, nil, err)
	}
	return v.CurryWith(r.client)
}

func histogram(r *registrar, m signals.ID) *emit.HistogramVec {
	v, err := r.sinks.Histogram(m)
	if err != nil {
		return keep[emit.HistogramVec](r, nil, err)
	}
	return v.CurryWith(r.client)
}

// gaugeByCache builds a gauge labelled by each Cache's own name.
func gaugeByCache(r *registrar, m signals.ID) *emit.GaugeVec {
	v, err := r.sinks.Gauge(m)
	return keep(r, v, err)
}

// counterByCache builds a counter labelled by each Cache's own name.
func counterByCache(r *registrar, m signals.ID) *emit.CounterVec {
	v, err := r.sinks.Counter(m)
	return keep(r, v, err)
}
