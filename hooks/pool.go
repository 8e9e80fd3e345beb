package hooks

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/signals"
)

// PoolStatser is a go-redis client with a connection pool: *redis.Client,
// *redis.ClusterClient (all nodes summed), *redis.Ring and failover clients.
type PoolStatser interface {
	PoolStats() *redis.PoolStats
}

type poolCollector struct {
	client string
	src    PoolStatser
}

var poolDescs = struct {
	hits, misses, timeouts, waits, waitSeconds, conns, stale *prometheus.Desc
}{
	signals.PoolHits.Desc(nil), signals.PoolMisses.Desc(nil), signals.PoolTimeouts.Desc(nil),
	signals.PoolWaits.Desc(nil), signals.PoolWaitDuration.Desc(nil), signals.PoolConnections.Desc(nil),
	signals.PoolStaleConnections.Desc(nil),
}

// NewPoolCollector returns a collector of src's go-redis pool statistics,
// labelled client=name: hits, misses, wait timeouts (connection
// starvation), waits and time waited, connections by state, stale
// connections removed. It reads PoolStats at scrape time only.
//
// The collector is unchecked (it describes no metrics up front), so that
// several clients can each register one on the same registry; give them
// distinct names, or the scrape fails with duplicate series.
func NewPoolCollector(name string, src PoolStatser) prometheus.Collector {
	if name == "" {
		name = "default"
	}
	return &poolCollector{client: name, src: src}
}

// Describe sends nothing: the collector is unchecked (see NewPoolCollector).
func (c *poolCollector) Describe(chan<- *prometheus.Desc) {}

// poolFigures are a pool's statistics, the pipeline pool's added in.
type poolFigures struct {
	hits, misses, timeouts, waits, stale, idle, inUse uint64
	waitSeconds                                       float64
}

func readPool(src PoolStatser) (poolFigures, bool) {
	s := src.PoolStats()
	if s == nil {
		return poolFigures{}, false
	}
	hits, misses, timeouts, waits, stale := uint64(s.Hits), uint64(s.Misses), uint64(s.Timeouts), uint64(s.WaitCount), uint64(s.StaleConns)
	waitNs, total, idle := s.WaitDurationNs, uint64(s.TotalConns), uint64(s.IdleConns)
	if p := s.PipelineStats; p != nil { // a separate pipeline pool, when configured
		hits, misses, timeouts, waits, stale = hits+uint64(p.Hits), misses+uint64(p.Misses), timeouts+uint64(p.Timeouts), waits+uint64(p.WaitCount), stale+uint64(p.StaleConns)
		waitNs, total, idle = waitNs+p.WaitDurationNs, total+uint64(p.TotalConns), idle+uint64(p.IdleConns)
	}
	inUse := uint64(0)
	if total > idle {
		inUse = total - idle
	}
	return poolFigures{hits: hits, misses: misses, timeouts: timeouts, waits: waits, stale: stale, idle: idle, inUse: inUse,
		waitSeconds: time.Duration(waitNs).Seconds()}, true
}

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	f, ok := readPool(c.src)
	if !ok {
		return
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, c.client)
	}
	counter(poolDescs.hits, float64(f.hits))
	counter(poolDescs.misses, float64(f.misses))
	counter(poolDescs.timeouts, float64(f.timeouts))
	counter(poolDescs.waits, float64(f.waits))
	counter(poolDescs.waitSeconds, f.waitSeconds)
	counter(poolDescs.stale, float64(f.stale))
	ch <- prometheus.MustNewConstMetric(poolDescs.conns, prometheus.GaugeValue, float64(f.idle), c.client, "idle")
	ch <- prometheus.MustNewConstMetric(poolDescs.conns, prometheus.GaugeValue, float64(f.inUse), c.client, "in_use")
}

// poolIDs are the pool metrics of the catalog.
var poolIDs = []signals.ID{signals.PoolHits, signals.PoolMisses, signals.PoolTimeouts, signals.PoolWaits,
	signals.PoolWaitDuration, signals.PoolStaleConnections, signals.PoolConnections}

// observePool exports opts.Pool's statistics on every sink: a collector on
// the Registerer, observable instruments on the meter (with the semantic
// conventions' db.client.connection.count and .timeouts unless skipped).
func (h *Hook) observePool(s emit.Sinks, name string, opts Options) error {
	if s.Registerer != nil {
		if err := s.Registerer.Register(NewPoolCollector(name, opts.Pool)); err != nil {
			return fmt.Errorf("hooks: register pool collector: %w", err)
		}
	}
	if s.Meter == nil {
		return nil
	}
	_, err := emit.Observe(s.Meter, poolIDs, func(_ context.Context, o emit.Observer) error {
		f, ok := readPool(opts.Pool)
		if !ok {
			return nil
		}
		o.Value(signals.PoolHits, float64(f.hits), name)
		o.Value(signals.PoolMisses, float64(f.misses), name)
		o.Value(signals.PoolTimeouts, float64(f.timeouts), name)
		o.Value(signals.PoolWaits, float64(f.waits), name)
		o.Value(signals.PoolWaitDuration, f.waitSeconds, name)
		o.Value(signals.PoolStaleConnections, float64(f.stale), name)
		o.Value(signals.PoolConnections, float64(f.idle), name, "idle")
		o.Value(signals.PoolConnections, float64(f.inUse), name, "in_use")
		return nil
	})
	if err != nil {
		return fmt.Errorf("hooks: %w", err)
	}
	if h.semconv != nil {
		return h.semconv.observePool(s.Meter, opts.Pool)
	}
	return nil
}
