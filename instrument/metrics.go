package instrument

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/signals"
)

// metrics holds the client's collectors, built from the signals catalog.
type metrics struct {
	lockAcquire        *prometheus.HistogramVec
	lockAttempts       *prometheus.CounterVec
	lockHold           *prometheus.HistogramVec
	locksLost          *prometheus.CounterVec
	lockRenewals       *prometheus.CounterVec
	lookups            *prometheus.CounterVec
	staleAge           *prometheus.HistogramVec
	refreshFailures    *prometheus.CounterVec
	refreshConsecutive *prometheus.GaugeVec
	hardTTLExpired     *prometheus.CounterVec
	invalidated        *prometheus.CounterVec
	recompute          *prometheus.HistogramVec
	sourceCalls        *prometheus.CounterVec
	writeSkew          *prometheus.CounterVec
	staleWritesRefused *prometheus.CounterVec
	duplicate          *prometheus.CounterVec
	idempotency        *prometheus.CounterVec
	missBursts         *prometheus.CounterVec
	retries            *prometheus.CounterVec
	backoff            *prometheus.HistogramVec
	breakerState       *prometheus.GaugeVec
	sourceInFlight     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	r := registrar{reg: reg}
	m := &metrics{
		lockAcquire:        histogram(&r, signals.LockAcquireDuration),
		lockAttempts:       counter(&r, signals.LockAttempts),
		lockHold:           histogram(&r, signals.LockHoldDuration),
		locksLost:          counter(&r, signals.LocksLost),
		lockRenewals:       counter(&r, signals.LockRenewals),
		lookups:            counter(&r, signals.CacheLookups),
		staleAge:           histogram(&r, signals.StaleAge),
		refreshFailures:    counter(&r, signals.RefreshFailures),
		refreshConsecutive: gauge(&r, signals.RefreshConsecutiveFailures),
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
		breakerState:       gauge(&r, signals.CircuitBreakerState),
		sourceInFlight:     gauge(&r, signals.SourceInFlight),
	}
	return m, r.err
}

// registrar registers collectors and keeps the first error, so newMetrics
// reads as a list.
type registrar struct {
	reg prometheus.Registerer
	err error
}

func register[C prometheus.Collector](r *registrar, c C) C {
	got, err := signals.Register(r.reg, c)
	if err != nil && r.err == nil {
		r.err = err
	}
	return got
}

func counter(r *registrar, m signals.ID) *prometheus.CounterVec {
	return register(r, m.NewCounterVec())
}

func gauge(r *registrar, m signals.ID) *prometheus.GaugeVec {
	return register(r, m.NewGaugeVec())
}

func histogram(r *registrar, m signals.ID) *prometheus.HistogramVec {
	return register(r, m.NewHistogramVec())
}
