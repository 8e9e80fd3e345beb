package exporter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cachewatch/cachewatch/signals"
)

// descs holds one descriptor per exporter metric of the catalog.
var descs = func() map[signals.ID]*prometheus.Desc {
	out := map[signals.ID]*prometheus.Desc{}
	for _, m := range signals.All() {
		if m.HasSource(signals.Exporter) && len(m.Sources) == 1 {
			out[m.ID()] = m.Desc(nil)
		}
	}
	return out
}()

// Describe sends the descriptors of every exporter metric.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range descs {
		ch <- d
	}
}

// Collect sends the last published sample of every node. It never talks to
// Redis. A node whose last sample failed sends only up 0 and the
// self-metrics.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	for _, s := range e.Snapshots() {
		collectNode(ch, s)
	}
}

// emitter sends const metrics for one node.
type emitter struct {
	ch   chan<- prometheus.Metric
	node string
}

func (m emitter) gauge(def signals.ID, v float64, labels ...string) {
	m.ch <- prometheus.MustNewConstMetric(descs[def], prometheus.GaugeValue, v, append([]string{m.node}, labels...)...)
}

func (m emitter) counter(def signals.ID, v float64, labels ...string) {
	m.ch <- prometheus.MustNewConstMetric(descs[def], prometheus.CounterValue, v, append([]string{m.node}, labels...)...)
}

func collectNode(ch chan<- prometheus.Metric, s *NodeSnapshot) {
	m := emitter{ch: ch, node: s.Node}
	up := 0.0
	if s.Up {
		up = 1
	}
	m.gauge(signals.ExporterUp, up)
	m.gauge(signals.ExporterSampleDuration, s.Duration.Seconds())
	if !s.LastSuccess.IsZero() {
		m.gauge(signals.ExporterLastSuccess, float64(s.LastSuccess.UnixNano())/1e9)
	}
	m.counter(signals.ExporterKeysScanned, float64(s.KeysScanned))
	m.counter(signals.ExporterScanCycles, float64(s.ScanCycles))
	m.counter(signals.ExporterTruncated, float64(s.Truncated))
	for k, v := range s.ErrorCounts {
		m.counter(signals.ExporterErrors, float64(v), k.Stage, k.Class)
	}
	if !s.Up {
		return
	}
	if s.Server != nil {
		collectServer(m, s)
	}
	if s.Pass != nil {
		collectPass(m, s.Pass)
	}
	collectQueues(m, s.Queues)
}

func collectServer(m emitter, s *NodeSnapshot) {
	st := s.Server
	m.counter(signals.ServerKeyspaceHits, float64(s.Hits))
	m.counter(signals.ServerKeyspaceMisses, float64(s.Misses))
	m.counter(signals.ServerExpiredKeys, float64(st.ExpiredKeys))
	m.counter(signals.ServerEvictedKeys, float64(st.EvictedKeys))
	m.counter(signals.ServerMissBursts, float64(s.MissBursts))
	m.gauge(signals.ServerClients, float64(st.ConnectedClients), "connected")
	m.gauge(signals.ServerClients, float64(st.BlockedClients), "blocked")
	m.gauge(signals.ServerMemoryUsed, float64(st.MemoryUsed))
	m.gauge(signals.ServerMemoryMax, float64(st.MemoryMax))
	for cmd, cs := range st.Commands {
		m.counter(signals.ServerCommandCalls, float64(cs.Calls), cmd)
		m.counter(signals.ServerCommandSeconds, cs.Seconds, cmd)
		m.counter(signals.ServerCommandFailed, float64(cs.Failed), cmd)
	}
	for cmd, ps := range st.Latency {
		for p, v := range ps {
			m.gauge(signals.ServerCommandLatency, v, cmd, p)
		}
	}
}

func collectPass(m emitter, p *Pass) {
	for group, g := range p.Groups {
		m.gauge(signals.KeysSampled, float64(g.Keys), group)
		m.gauge(signals.KeysWithoutTTL, float64(g.NoTTL), group)
		for i, h := range horizons {
			m.gauge(signals.KeysExpiring, float64(g.Expiring[i]), group, h.label)
		}
		if g.SyncScore > 0 {
			m.gauge(signals.ExpirySync, g.SyncScore, group)
		}
		if g.Locks == 0 {
			continue
		}
		m.gauge(signals.LocksHeld, float64(g.Locks), group)
		m.gauge(signals.LocksWithoutTTL, float64(g.LocksNoTTL), group)
		if p.TokensRead {
			m.gauge(signals.LocksLongHeld, float64(g.LocksLongHeld), group)
		}
		buckets := make(map[float64]uint64, len(lockTTLBuckets))
		var cum uint64
		for i, ub := range lockTTLBuckets {
			if g.LockTTL != nil {
				cum += g.LockTTL[i]
			}
			buckets[ub] = cum
		}
		m.ch <- prometheus.MustNewConstHistogram(descs[signals.LockRemainingTTL], g.LockTTLCount, g.LockTTLSum, buckets, m.node, group)
	}
}

func collectQueues(m emitter, qs []QueueStats) {
	for _, q := range qs {
		m.gauge(signals.QueueLength, float64(q.Length), q.Queue, q.Type)
		if q.HasOldest {
			m.gauge(signals.QueueOldestAge, q.OldestAge.Seconds(), q.Queue)
		}
		for _, g := range q.Groups {
			m.gauge(signals.StreamGroupPending, float64(g.Pending), q.Queue, g.Name)
			if g.LagKnown {
				m.gauge(signals.StreamGroupLag, float64(g.Lag), q.Queue, g.Name)
			}
			m.gauge(signals.StreamGroupOldestPending, g.OldestPending.Seconds(), q.Queue, g.Name)
		}
	}
}
