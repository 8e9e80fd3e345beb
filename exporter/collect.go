package exporter

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/metric"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/emit"
	"github.com/cachewatch/cachewatch/signals"
)

// targetLabel is the label naming an exporter's target (Options.Name) on
// every series it exports to Prometheus, when it has a name.
const targetLabel = "target"

// newDescs returns one descriptor per exporter metric of the catalog, and
// the key-group overflow counter shared with the other emitters unless its
// classifier counts the overflow itself (overflow false), with a target
// label when name is set.
func newDescs(name string, overflow bool) map[signals.ID]*prometheus.Desc {
	var constLabels prometheus.Labels
	if name != "" {
		constLabels = prometheus.Labels{targetLabel: name}
	}
	out := map[signals.ID]*prometheus.Desc{}
	for _, m := range signals.All() {
		if m.HasEmitter(signals.Exporter) && (len(m.Emitters) == 1 || overflow && m.ID() == signals.KeyGroupOverflow) {
			out[m.ID()] = m.Desc(constLabels)
		}
	}
	return out
}

// Describe sends the descriptors of every exporter metric.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range e.descs {
		ch <- d
	}
}

// Collect sends the last published sample of every node, and how many keys
// the key-group classifier folded into "other". It never talks to Redis. A
// node whose last sample failed sends only up 0 and the self-metrics.
// Label values taken from Redis (consumer group, key group, node names) are
// made valid UTF-8 first, so what Redis holds never fails a scrape.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.collect(emitter{ch: ch, descs: e.descs})
	if d, ok := e.descs[signals.KeyGroupOverflow]; ok {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(e.overflows()))
	}
}

// collect sends every node's last published sample through m.
func (e *Exporter) collect(m emitter) {
	for _, s := range e.Snapshots() {
		m.node = s.Node
		collectNode(m, s)
		if s.Up {
			m.gauge(signals.ExporterSampleInterval, e.interval.Seconds())
			collectAges(m, s)
		}
	}
}

// overflows counts the classifications folded into "other", lock groups'
// included.
func (e *Exporter) overflows() uint64 {
	n := e.groups.Overflows()
	if e.lockGroups != e.groups {
		n += e.lockGroups.Overflows()
	}
	return n
}

// observe registers a callback on m that observes the last published
// sample of every node, as Collect sends it.
func (e *Exporter) observe(m metric.Meter) (func() error, error) {
	ids := make([]signals.ID, 0, len(e.descs))
	for id := range e.descs {
		ids = append(ids, id)
	}
	return emit.Observe(m, ids, func(_ context.Context, o emit.Observer) error {
		e.collect(emitter{otel: &o})
		if _, ok := e.descs[signals.KeyGroupOverflow]; ok {
			o.Value(signals.KeyGroupOverflow, float64(e.overflows()))
		}
		return nil
	})
}

// emitter sends the metrics of one node: const metrics to ch, or
// observations to otel.
type emitter struct {
	ch    chan<- prometheus.Metric
	descs map[signals.ID]*prometheus.Desc
	otel  *emit.Observer
	node  string
}

func (m emitter) gauge(def signals.ID, v float64, labels ...string) {
	m.send(def, prometheus.GaugeValue, v, labels)
}

func (m emitter) counter(def signals.ID, v float64, labels ...string) {
	m.send(def, prometheus.CounterValue, v, labels)
}

func (m emitter) send(def signals.ID, typ prometheus.ValueType, v float64, labels []string) {
	values := labelValues(m.node, labels)
	if m.otel != nil {
		m.otel.Value(def, v, values...)
		return
	}
	if metric, err := prometheus.NewConstMetric(m.descs[def], typ, v, values...); err == nil {
		m.ch <- metric
	}
}

// labelValues prepends the node and makes every value valid UTF-8: Redis
// keys, group names and hostnames are binary-safe, label values are not.
func labelValues(node string, labels []string) []string {
	out := make([]string, 0, len(labels)+1)
	out = append(out, validUTF8(node))
	for _, l := range labels {
		out = append(out, validUTF8(l))
	}
	return out
}

// validUTF8 replaces each invalid byte sequence with U+FFFD.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// collectAges sends when each series family's figures were taken, kept
// while the family's series are left out (a failing stage).
func collectAges(m emitter, s *snapshot.Node) {
	for _, a := range []struct {
		family string
		at     time.Time
	}{{"locks", s.LocksAsOf}, {"keys", s.KeysAsOf}, {"server", s.ServerAsOf}, {"queues", s.QueuesAsOf}} {
		if !a.at.IsZero() {
			m.gauge(signals.ExporterDataTimestamp, float64(a.at.UnixNano())/1e9, a.family)
		}
	}
	notified := 0.0
	if s.LockNotifications {
		notified = 1
	}
	m.gauge(signals.LockNotifications, notified)
	refused := 0.0
	if s.LockNotificationsRefused {
		refused = 1
	}
	m.gauge(signals.LockNotificationsRefused, refused)
	m.counter(signals.LockIndexRepairs, float64(s.LockRepairs))
}

func collectNode(m emitter, s *snapshot.Node) {
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
		m.counter(signals.ExporterErrors, float64(v), string(k.Stage), string(k.Class))
	}
	if !s.Up {
		return
	}
	m.gauge(signals.ExporterKeyspaceCoverage, s.Coverage)
	if s.Server != nil {
		collectServer(m, s)
	}
	if s.Pass != nil {
		collectPass(m, s.Pass)
	}
	collectQueues(m, s.Queues)
	for k, v := range s.QueueReadsSkipped {
		m.counter(signals.QueueReadsSkipped, float64(v), k.Queue, k.Read)
	}
}

func collectServer(m emitter, s *snapshot.Node) {
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
	for cmd, h := range st.Histograms {
		m.histogram(signals.ServerCommandDuration, h.Cumulative(), h.Count, st.Commands[cmd].Seconds, cmd)
	}
}

// collectPass sends the key figures of a complete whole-keyspace pass (none
// of a pass in progress) and the lock figures shown.
func collectPass(m emitter, p *snapshot.Pass) {
	for group, g := range p.Groups {
		if g.Keys > 0 && p.Complete {
			m.gauge(signals.KeysSampled, float64(g.Keys), group)
			m.gauge(signals.KeysWithoutTTL, float64(g.NoTTL), group)
			for _, x := range g.Expiring {
				m.gauge(signals.KeysExpiring, float64(x.Keys), group, x.Label)
			}
			if g.MemorySampled > 0 {
				m.gauge(signals.KeysMemory, g.MemoryBytes, group)
			}
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
			m.gauge(signals.LocksDeadHolder, float64(g.LocksDeadHolder), group)
		}
		for _, x := range g.LocksExpiring {
			m.gauge(signals.LocksExpiring, float64(x.Keys), group, x.Label)
		}
		collectHolders(m, group, g.Holders, p.LocksAsOf)
	}
}

// histogram sends a histogram from cumulative counts per catalog bucket of
// def: a const histogram to Prometheus, a gauge histogram to OpenTelemetry
// (which has no observable histogram).
func (m emitter) histogram(def signals.ID, cumulative []uint64, count uint64, sum float64, labels ...string) {
	values := labelValues(m.node, labels)
	if m.otel != nil {
		m.otel.GaugeHistogram(def, cumulative, sum, count, values...)
		return
	}
	bounds := def.Metric().Buckets
	buckets := make(map[float64]uint64, len(bounds))
	for i, ub := range bounds {
		buckets[ub] = cumulative[i]
	}
	if h, err := prometheus.NewConstHistogram(m.descs[def], count, sum, buckets, values...); err == nil {
		m.ch <- h
	}
}

func collectQueues(m emitter, qs []snapshot.QueueStats) {
	for _, q := range qs {
		m.gauge(signals.QueueLength, float64(q.Length), q.Queue, q.Type)
		if q.HasOldest {
			m.gauge(signals.QueueOldestAge, q.OldestAge.Seconds(), q.Queue)
		}
		if q.Type == "stream" {
			m.gauge(signals.StreamGroupsDropped, float64(q.GroupsDropped), q.Queue)
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
