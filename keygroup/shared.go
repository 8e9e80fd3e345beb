package keygroup

import (
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/signals"
)

// sharedClassifier is the collector Shared registers: the overflow counter
// of the registry's default classifier, carrying the classifier, so that
// the registry itself remembers it (no process-wide state, and it lives as
// long as the registry).
type sharedClassifier struct {
	*prometheus.CounterVec
	// c builds the classifier once, for whichever caller asks first: a
	// call that finds the registry's already registered builds none.
	c func() *Classifier
}

// Shared returns the default Classifier of reg (nil means
// prometheus.DefaultRegisterer): the same one on every call with the same
// registerer, built with the zero Options on first use, its overflow counted
// in cachewatch_keygroup_overflow_total, registered on reg (and exported
// from then on, at 0 until a key overflows).
//
// hooks.New, instrument.New and redlock.New use it when their KeyGroups is
// nil, so that a hook and a client on one registry share one cap of
// DefaultMaxGroups groups rather than each having its own. A registerer
// that wraps another (prometheus.WrapRegistererWith) has its own default
// classifier.
//
// If reg already holds an overflow counter registered by other means, the
// classifier returned counts into it but is not shared; if registering
// fails otherwise, its overflow is not exported.
func Shared(reg prometheus.Registerer) *Classifier {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	overflow := signals.KeyGroupOverflow.NewCounterVec()
	s := &sharedClassifier{CounterVec: overflow, c: sync.OnceValue(func() *Classifier {
		c, _ := New(Options{Overflow: overflow.WithLabelValues()})
		return c
	})}
	err := reg.Register(s)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return s.c()
	}
	switch existing := are.ExistingCollector.(type) {
	case *sharedClassifier:
		return existing.c()
	case *prometheus.CounterVec:
		c := s.c()
		c.overflow = existing.WithLabelValues()
		return c
	}
	return s.c()
}
