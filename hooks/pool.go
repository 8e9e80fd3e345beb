package hooks

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

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

// Collect implements prometheus.Collector.
func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.PoolStats()
	if s == nil {
		return
	}
	hits, misses, timeouts, waits, stale := uint64(s.Hits), uint64(s.Misses), uint64(s.Timeouts), uint64(s.WaitCount), uint64(s.StaleConns)
	waitNs, total, idle := s.WaitDurationNs, uint64(s.TotalConns), uint64(s.IdleConns)
	if p := s.PipelineStats; p != nil { // a separate pipeline pool, when configured
		hits, misses, timeouts, waits, stale = hits+uint64(p.Hits), misses+uint64(p.Misses), timeouts+uint64(p.Timeouts), waits+uint64(p.WaitCount), stale+uint64(p.StaleConns)
		waitNs, total, idle = waitNs+p.WaitDurationNs, total+uint64(p.TotalConns), idle+uint64(p.IdleConns)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, c.client)
	}
	counter(poolDescs.hits, float64(hits))
	counter(poolDescs.misses, float64(misses))
	counter(poolDescs.timeouts, float64(timeouts))
	counter(poolDescs.waits, float64(waits))
	counter(poolDescs.waitSeconds, time.Duration(waitNs).Seconds())
	counter(poolDescs.stale, float64(stale))
	inUse := uint64(0)
	if total > idle {
		inUse = total - idle
	}
	ch <- prometheus.MustNewConstMetric(poolDescs.conns, prometheus.GaugeValue, float64(idle), c.client, "idle")
	ch <- prometheus.MustNewConstMetric(poolDescs.conns, prometheus.GaugeValue, float64(inUse), c.client, "in_use")
}
