package emit

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/cachewatch/cachewatch/keygroup"
	"github.com/cachewatch/cachewatch/signals"
)

// Observer records the values of observable metrics during a collection:
// the exporter's samples, pool statistics, key-group overflow.
type Observer struct {
	o     metric.Observer
	insts *Observables
}

// Observables are the observable instruments of some catalog metrics on one
// meter, with the callback that observes them.
type Observables struct {
	floats map[signals.ID]metric.Float64Observable
	ids    map[signals.ID]signals.Metric
	gh     map[signals.ID][3]metric.Float64Observable // bucket, sum, count
}

// Observe creates on m the observable instruments of ids and registers f to
// observe them at every collection. The returned function unregisters f.
func Observe(m metric.Meter, ids []signals.ID, f func(context.Context, Observer) error) (unregister func() error, err error) {
	obs := &Observables{floats: map[signals.ID]metric.Float64Observable{}, ids: map[signals.ID]signals.Metric{},
		gh: map[signals.ID][3]metric.Float64Observable{}}
	var all []metric.Observable
	for _, id := range ids {
		def := id.Metric()
		obs.ids[id] = def
		insts, err := observables(m, def)
		if err != nil {
			return nil, fmt.Errorf("signals: %s: %w", def.OTel.Name, err)
		}
		if def.OTel.Kind == signals.OTelGaugeHistogram {
			obs.gh[id] = [3]metric.Float64Observable{insts[0], insts[1], insts[2]}
		} else {
			obs.floats[id] = insts[0]
		}
		for _, in := range insts {
			all = append(all, in)
		}
	}
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return f(ctx, Observer{o: o, insts: obs})
	}, all...)
	if err != nil {
		return nil, fmt.Errorf("signals: register callback: %w", err)
	}
	return reg.Unregister, nil
}

// observables creates the instrument (or, for a gauge histogram, the three
// gauges) of def.
func observables(m metric.Meter, def signals.Metric) ([]metric.Float64Observable, error) {
	in := def.OTel
	desc, unit := metric.WithDescription(def.Help), metric.WithUnit(in.Unit)
	switch in.Kind {
	case signals.OTelObservableCounter:
		c, err := m.Float64ObservableCounter(in.Name, desc, unit)
		return []metric.Float64Observable{c}, err
	case signals.OTelObservableUpDownCounter:
		c, err := m.Float64ObservableUpDownCounter(in.Name, desc, unit)
		return []metric.Float64Observable{c}, err
	case signals.OTelObservableGauge:
		g, err := m.Float64ObservableGauge(in.Name, desc, unit)
		return []metric.Float64Observable{g}, err
	case signals.OTelGaugeHistogram:
		names := in.GaugeHistogramNames()
		countUnit := metric.WithUnit(signals.GaugeHistogramCountUnit)
		b, err1 := m.Float64ObservableGauge(names.Bucket, metric.WithDescription(def.Help+" (cumulative bucket counts)"), countUnit)
		s, err2 := m.Float64ObservableGauge(names.Sum, metric.WithDescription(def.Help+" (sum)"), unit)
		c, err3 := m.Float64ObservableGauge(names.Count, metric.WithDescription(def.Help+" (count)"), countUnit)
		for _, err := range []error{err1, err2, err3} {
			if err != nil {
				return nil, err
			}
		}
		return []metric.Float64Observable{b, s, c}, nil
	}
	return nil, fmt.Errorf("%s is not observable", in.Kind)
}

// Value observes v for id with the label values given in catalog order.
func (o Observer) Value(id signals.ID, v float64, values ...string) {
	in, ok := o.insts.floats[id]
	if !ok {
		return
	}
	o.o.ObserveFloat64(in, v, metric.WithAttributeSet(attrs(o.insts.ids[id], values)))
}

// GaugeHistogram observes a gauge histogram of id: cumulative counts per
// upper bound (the catalog's buckets, +Inf last as count), sum and count.
func (o Observer) GaugeHistogram(id signals.ID, cumulative []uint64, sum float64, count uint64, values ...string) {
	in, ok := o.insts.gh[id]
	if !ok {
		return
	}
	def := o.insts.ids[id]
	base := attrs(def, values)
	o.o.ObserveFloat64(in[1], sum, metric.WithAttributeSet(base))
	o.o.ObserveFloat64(in[2], float64(count), metric.WithAttributeSet(base))
	kvs := base.ToSlice()
	for i, ub := range def.Buckets {
		var n uint64
		if i < len(cumulative) {
			n = cumulative[i]
		}
		o.o.ObserveFloat64(in[0], float64(n), metric.WithAttributes(append(kvs, attribute.String("le", FormatBound(ub)))...))
	}
	o.o.ObserveFloat64(in[0], float64(count), metric.WithAttributes(append(kvs, attribute.String("le", "+Inf"))...))
}

func attrs(def signals.Metric, values []string) attribute.Set {
	kvs := make([]attribute.KeyValue, 0, len(values))
	for i, v := range values {
		if i < len(def.Labels) {
			kvs = append(kvs, attribute.String(def.Labels[i].Name, v))
		}
	}
	return attribute.NewSet(kvs...)
}

// sharedByMeter holds the default classifier of emitters that have a meter
// but no Registerer, per meter, as keygroup.Shared does per registry.
var sharedByMeter sync.Map // metric.Meter → *keygroup.Classifier

// overflowObserved remembers the (meter, classifier) pairs whose overflow is
// observed already, so that a hook and a client sharing both observe it once.
var overflowObserved sync.Map // overflowKey → struct{}

type overflowKey struct {
	m metric.Meter
	c *keygroup.Classifier
}

// SharedClassifier returns the default key-group classifier of an emitter
// on s: the registry's shared one (keygroup.Shared) when s has a
// Registerer, else one shared by every emitter on s's meter. Its overflow is
// exported on every sink of s.
func SharedClassifier(s Sinks) *keygroup.Classifier {
	var c *keygroup.Classifier
	if s.Registerer != nil {
		c = keygroup.Shared(s.Registerer)
	} else {
		fresh, _ := keygroup.New(keygroup.Options{})
		got, _ := sharedByMeter.LoadOrStore(s.Meter, fresh)
		c = got.(*keygroup.Classifier)
	}
	if s.Meter != nil {
		ObserveOverflow(s.Meter, c)
	}
	return c
}

// ObserveOverflow exports c's overflow count on m (once per meter and
// classifier).
func ObserveOverflow(m metric.Meter, c *keygroup.Classifier) {
	if _, dup := overflowObserved.LoadOrStore(overflowKey{m, c}, struct{}{}); dup {
		return
	}
	_, err := Observe(m, []signals.ID{signals.KeyGroupOverflow}, func(_ context.Context, o Observer) error {
		o.Value(signals.KeyGroupOverflow, float64(c.Overflows()))
		return nil
	})
	if err != nil {
		overflowObserved.Delete(overflowKey{m, c})
	}
}
