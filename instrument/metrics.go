package instrument

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/signals"
)

// metrics holds the client's collectors, built from the signals catalog.
type metrics struct {
	// The key-group series, curried with the client's Name: call sites
	// pass the remaining labels only.
	lockAcquire        prometheus.ObserverVec
	lockAttempts       *prometheus.CounterVec
	lockHold           prometheus.ObserverVec
	locksLost          *prometheus.CounterVec
	lockRenewals       *prometheus.CounterVec
	lookups            *prometheus.CounterVec
	staleAge           prometheus.ObserverVec
	refreshFailures    *prometheus.CounterVec
	refreshConsecutive *prometheus.GaugeVec
	hardTTLExpired     *prometheus.CounterVec
	invalidated        *prometheus.CounterVec
	recompute          prometheus.ObserverVec
	sourceCalls        *prometheus.CounterVec
	writeSkew          *prometheus.CounterVec
	staleWritesRefused *prometheus.CounterVec
	duplicate          *prometheus.CounterVec
	idempotency        *prometheus.CounterVec
	missBursts         *prometheus.CounterVec
	retries            *prometheus.CounterVec
	backoff            prometheus.ObserverVec
	// Labelled by the Cache's name, not curried.
	breakerState   *prometheus.GaugeVec
	sourceInFlight *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer, client string) (*metrics, error) {
	r := registrar{reg: reg, client: prometheus.Labels{signals.ClientLabel: client}}
	m := &metrics{
		lockAcquire:        histogram(&r, signals.LockAcquireDuration),
		lockAttempts:       counter(&r, signals.LockAttempts),
		lockHold:           histogram(&r, signals.LockHoldDuration),
		locksLost:          counter(&r, signals.LocksLost),
		lockRenewals:       counter(&r, signals.LockRenewals),
		lookups:            counter(&r, signals.CacheLookups),
		staleAge:           histogram(&r, signals.StaleAge),
		refreshFailures:    counter(&r, signals.RefreshFailures),
		refreshConsecutive: gaugeByGroup(&r, signals.RefreshConsecutiveFailures),
		hardTTLExpired:     counter(&r, signals.HardTTLExpired),
		invalidated:        counter(&r, signals.InvalidatedKeys),
		recompute:          histogram(&r, signals.RecomputeDuration),
		sourceCalls:        counter(&r, signals.SourceCalls),
		writeSkew:          counter(&r, signals.WriteSkew),
		staleWritesRefused: counter(&r, signals.StaleWritesRefused),
		duplicate:          counter(&r, signals.DuplicateRecompute),
		idempotency:        counter(&r, signals.IdempotencyChecks),
		missBursts:         counter(&r, signals.MissBursts),
		retries:            counter(&r, signals.Retries),
		backoff:            histogram(&r, signals.BackoffDelay),
		breakerState:       gaugeByCache(&r, signals.CircuitBreakerState),
		sourceInFlight:     gaugeByCache(&r, signals.SourceInFlight),
	}
	return m, r.err
}

// registrar registers collectors and keeps the first error, so newMetrics
// reads as a list.
type registrar struct {
	reg    prometheus.Registerer
	client prometheus.Labels
	err    error
}

func register[C prometheus.Collector](r *registrar, c C) C {
	got, err := signals.Register(r.reg, c)
	if err != nil && r.err == nil {
		r.err = err
	}
	return got
}

// counter, gaugeByGroup and histogram register a key-group metric and curry
// it with the client's Name.
func counter(r *registrar, m signals.ID) *prometheus.CounterVec {
	return register(r, m.NewCounterVec()).MustCurryWith(r.client)
}

func gaugeByGroup(r *registrar, m signals.ID) *prometheus.GaugeVec {
	return register(r, m.NewGaugeVec()).MustCurryWith(r.client)
}

func histogram(r *registrar, m signals.ID) prometheus.ObserverVec {
	return register(r, m.NewHistogramVec()).MustCurryWith(r.client)
}

// gaugeByCache registers a gauge labelled by each Cache's own name.
func gaugeByCache(r *registrar, m signals.ID) *prometheus.GaugeVec {
	return register(r, m.NewGaugeVec())
}
