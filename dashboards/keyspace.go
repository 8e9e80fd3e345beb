package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/units"

	s "github.com/cachewatch/cachewatch/signals"
)

// perInstance groups the sampler's own figures by exporter and node.
var perInstance = []string{"instance", targetLabel, "node"}

// Why the keyspace panels aggregate as they do, in their help.
const (
	haMax       = " Exporters sampling the same node (an HA pair) report the same figures, so each node's figure is the max over its exporters, as in the alerts: never doubled."
	perExporter = " Per exporter and node, as the alerts watch them: in an HA pair each exporter samples on its own."
)

// keyspace is the server-side view from the exporter: what the Redis
// nodes hold (locks, expiry shape, queues) and how they cope.
func keyspace() (*board, error) {
	x := &exprs{keyGroup: true}
	// The exporter exports both counters from the first sample on.
	hits := x.nodeRate(s.ServerKeyspaceHits, nil)
	misses := x.nodeRate(s.ServerKeyspaceMisses, nil)
	cmdCalls := x.nodeRate(s.ServerCommandCalls, []string{"command"})
	hitRatio := ratio(hits, "("+hits+" + "+misses+")")

	b := &board{
		uid:         KeyspaceUID,
		title:       "cachewatch / Keyspace & locks",
		description: "What the Redis nodes hold and how they cope, sampled by the cachewatch exporter: locks, expiry shape, server statistics, queues and the sampler's own health.",
		anchors:     []s.ID{s.ExporterUp},
		// Every sampled key's group; lock groups are a subset.
		keyGroupAnchors: []s.ID{s.KeysSampled},
		keyGroup:        true,
		rows: []row{{
			title:  "At a glance",
			panels: keyspaceGlance(x, hitRatio),
		}, {
			title: "Symptom: locks pile up or never expire",
			panels: []panel{{
				title: "Locks held",
				help: help{"Lock keys present at the lock figures' timestamp (Freshness row), per node and key group: exact then, never a pass in progress." + haMax,
					"about the number of workers doing locked work; a steady climb means locks are not released.", rbLocksLongHeld},
				unit:    units.Short,
				targets: []target{{x.nodeMax(s.LocksHeld, kg), "{{target}} {{node}} {{key_group}}"}},
			}, {
				title: "Locks without TTL",
				help: help{"Lock keys with no expiry: held forever if their owner crashed. The exact count at the lock figures' timestamp; *Keys sampled and keys without TTL* counts the same keys from a walk of the whole keyspace over minutes, so where the two differ this one is right." + haMax,
					"0: every lock needs a TTL.", rbLocksWithoutTTL},
				unit: units.Short, scale: alertValue,
				targets: []target{{x.nodeMax(s.LocksWithoutTTL, kg), "{{target}} {{node}} {{key_group}}"}},
			}, {
				title: "Long-held locks",
				help: help{"Locks whose owner token has been seen unchanged for longer than the long-held threshold." + haMax,
					"0; a long-held lock is a stuck holder or a lease renewed forever.", rbLocksLongHeld},
				unit: units.Short, scale: alertValue,
				targets: []target{{x.nodeMax(s.LocksLongHeld, kg), "{{target}} {{node}} {{key_group}}"}},
			}, {
				title: "Locks held by a dead holder",
				help: help{"Locks whose holder keeps a liveness key (instrument's live locks) that is gone: its process died, or stalled past its liveness. The next waiter takes such a lock over before its TTL; `cachewatch locks` shows which (column *alive?*). In a Cluster a node judges only the holders whose liveness key it holds." + haMax,
					"0, or brief blips after a process died; a count that stays is a dead holder's lock nobody waits for.", rbLocksLongHeld},
				unit:    units.Short,
				targets: []target{{x.nodeMax(s.LocksDeadHolder, kg), "{{node}} {{key_group}}"}},
			}, {
				kind:  tablePanel,
				title: "Lock holders (longest-held)",
				help: help{"Who holds the longest-held locks of each group now: the service and host the lock's value names (instrument's holder value, bsm/redislock's metadata; `opaque` for a bare token), and how long that holder has held its longest-held lock of the group. One row per node, group, service and host, for the holders of each group's N longest-held locks (`--locks.holders`). Keys, tokens and process ids are not labels: `cachewatch locks` lists every lock with its key, process and TTL." + haMax,
					"holders held for less than their lock's TTL; a holder held far longer, or one whose service is gone, is where the long-held and no-TTL runbooks start.", rbLocksLongHeld},
				unit:    units.Seconds,
				targets: []target{{x.nodeMax(s.LockHolderHeld, []string{keyGroupLabel, "service", "host"}), heldForColumn}},
			}, {
				title: "Locks by remaining TTL",
				help: help{"Lock keys whose remaining TTL is at most 1 s, 10 s, 1 min, and all locks with a TTL (cumulative; locks without expiry are counted separately)." + haMax,
					"most locks far from 0; many within 1 s means holders run out of lease.", rbLocksLost},
				unit: units.Short,
				targets: []target{{x.nodeTotal(s.LocksExpiring, []string{"within"}, x.is(s.LocksExpiring, "within", "1s", "10s", "1m", "inf")),
					"within {{within}}"}},
			}},
		}, {
			title: "Cause: keys expire together (coming stampede)",
			panels: []panel{{
				title: "Expiry synchronisation per key group",
				help: help{"Keys of the group expiring in its busiest second, divided by the count an even spread would give; the worst node's figure." + haMax,
					"close to 1; far above 1 means TTLs without jitter and a stampede when they expire (the alert ignores groups with few sampled keys).", rbExpirySync},
				unit: units.Short, scale: alertValue,
				targets: []target{{x.agg("max", s.ExpirySync, kg), "{{key_group}}"}},
			}, {
				title: "Keys expiring within 1 s / 10 s / 1 min",
				help: help{"Sampled keys of each group expiring within the horizon (cumulative), over all nodes." + haMax,
					"a small share of the group; a large share within 1 s is a wave of expiries.", rbExpirySync},
				unit: units.Short,
				targets: []target{{x.nodeTotal(s.KeysExpiring, []string{keyGroupLabel, "within"}, x.is(s.KeysExpiring, "within", "1s", "10s", "1m")),
					"{{key_group}} within {{within}}"}},
			}, {
				title: "Keys sampled and keys without TTL",
				help: help{"Keys of each group seen in the last complete whole-keyspace pass, and those that never expire, over all nodes: a walk over minutes or hours (1,000 keys/s per node by default), shown only once a pass has completed (coverage beside), not a moment. For lock groups, *Locks without TTL* is the exact answer." + haMax,
					"no keys without TTL in cache groups: they grow until eviction.", rbKeysWithoutTTL},
				unit: units.Short,
				targets: []target{
					{x.nodeTotal(s.KeysSampled, kg), "sampled {{key_group}}"},
					{x.nodeTotal(s.KeysWithoutTTL, kg), "without TTL {{key_group}}"},
				},
			}, {
				title: "Keyspace pass coverage",
				help: help{"Fraction of each node's keyspace the whole-keyspace pass has covered: the keys panels of this row show the last complete pass, nothing before the first one completes (below 1 from the start until then)." + perExporter,
					"1 once a pass has completed; the first pass takes the node's keys over the pace (about 17 minutes at 1,000,000 keys at the default 1,000 keys/s).", rbExporterCoverage},
				unit: units.PercentUnit, max: 1,
				targets: []target{{x.agg("min", s.ExporterKeyspaceCoverage, perInstance), "{{instance}} {{target}} {{node}}"}},
			}},
		}, {
			title: "Server: hits, misses, evictions",
			panels: []panel{{
				title: "Server hit ratio",
				help: help{"Keyspace hits divided by lookups, per node (the exporter's own lookups excluded)." + haMax,
					"steady; a sudden drop is a mass expiry or an eviction storm.", rbServerHitRatio},
				// No thresholds: the alert compares the fall of this ratio
				// against its last hour, not the ratio itself.
				unit: units.PercentUnit, max: 1,
				targets: []target{{hitRatio, "{{target}} {{node}}"}},
			}, {
				title: "Server miss bursts",
				help: help{"Samples in which a node's keyspace misses grew by at least the burst threshold." + haMax,
					"0.", rbMissBurst},
				unit: units.OpsPerSecond,
				// No thresholds: CachewatchMissBurst counts the services'
				// miss bursts, not the server's.
				targets: []target{{x.nodeRate(s.ServerMissBursts, nil), "{{target}} {{node}}"}},
			}, {
				title: "Expired and evicted keys",
				help: help{"Keys the server expired, and keys it evicted under maxmemory." + haMax,
					"evictions 0 for locks and sessions; expirations steady, not in waves.", rbServerResources},
				unit: units.OpsPerSecond,
				targets: []target{
					{x.nodeRate(s.ServerExpiredKeys, nil), "expired {{target}} {{node}}"},
					{x.nodeRate(s.ServerEvictedKeys, nil), "evicted {{target}} {{node}}"},
				},
			}, {
				title: "Memory used and limit",
				help: help{"Memory used by each node, and its maxmemory (0 means no limit)." + haMax,
					"used well below the limit; at the limit the server evicts or refuses writes (OOM).", rbServerResources},
				unit: units.BytesIEC,
				targets: []target{
					{x.nodeMax(s.ServerMemoryUsed, nil), "used {{target}} {{node}}"},
					{x.nodeMax(s.ServerMemoryMax, nil), "limit {{target}} {{node}}"},
				},
			}, {
				title: "Clients",
				help: help{"Client connections per node, connected and blocked (BLPOP, XREAD BLOCK…)." + haMax,
					"steady; a climb in connected clients is pools growing under lock contention.", rbServerResources},
				unit:    units.Short,
				targets: []target{{x.nodeMax(s.ServerClients, []string{"state"}), "{{target}} {{node}} {{state}}"}},
			}},
		}, {
			title: "Server: command latency",
			panels: []panel{{
				title: "Server command latency percentiles",
				help: help{"Server-side latency percentiles per command (INFO latencystats, Redis 7+), without the network; the worst node's." + haMax,
					"microseconds; a slow script here blocks every other client.", rbServerScriptsSlow},
				// No thresholds: the alert compares the mean time per call.
				unit:    units.Seconds,
				targets: []target{{x.agg("max", s.ServerCommandLatency, []string{"command", "percentile"}), "{{command}} {{percentile}}"}},
			}, {
				title: "Server time per call",
				help: help{"Average server time per call of each command (INFO commandstats)." + haMax,
					"microseconds for GET/SET; scripts as short as possible.", rbServerScriptsSlow},
				// No thresholds: the alert watches the script commands
				// only, and every other command shares the axis.
				unit:    units.Seconds,
				targets: []target{{ratio(x.nodeRate(s.ServerCommandSeconds, []string{"command"}), cmdCalls), "{{target}} {{node}} {{command}}"}},
			}, {
				title: "Server calls and failed calls",
				help: help{"Calls per second per command, and calls that failed or were rejected." + haMax,
					"failures 0.", rbServerCommandStats},
				unit: units.OpsPerSecond,
				targets: []target{
					{cmdCalls, "{{target}} {{node}} {{command}}"},
					{x.nodeRate(s.ServerCommandFailed, []string{"command"}), "failed {{target}} {{node}} {{command}}"},
				},
			}},
		}, {
			title: "Queues: backlog behind the locks",
			panels: []panel{{
				title: "Queue length",
				help: help{"Entries in each configured queue key: list or stream length, or delayed jobs in a sorted set." + haMax,
					"steady or draining; growth means consumers fall behind.", rbQueueBacklog},
				unit:    units.Short,
				targets: []target{{x.agg("max", s.QueueLength, []string{"queue", "type"}), "{{queue}} ({{type}})"}},
			}, {
				title: "Oldest entry age",
				help: help{"Age of each queue's oldest entry, or how overdue its earliest delayed job is." + haMax,
					"below the processing time you promise.", rbQueueBacklog},
				unit: units.Seconds, scale: alertValue,
				targets: []target{{x.agg("max", s.QueueOldestAge, []string{"queue"}), "{{queue}}"}},
			}, {
				title: "Stream lag and pending per consumer group",
				help: help{"Entries not yet delivered to each consumer group (lag) and delivered but not acknowledged (pending)." + haMax,
					"both near 0; pending that only grows is consumers crashing before XACK.", rbStreamLag},
				// No thresholds: the lag's would be read against the
				// pending count that shares the axis.
				unit: units.Short,
				targets: []target{
					{x.agg("max", s.StreamGroupLag, []string{"queue", "group"}), "lag {{queue}} {{group}}"},
					{x.agg("max", s.StreamGroupPending, []string{"queue", "group"}), "pending {{queue}} {{group}}"},
				},
			}, {
				title: "Oldest pending message age",
				help: help{"Age of each consumer group's oldest unacknowledged message." + haMax,
					"below the consumer's visibility timeout.", rbStreamPending},
				unit: units.Seconds, scale: alertValue,
				targets: []target{{x.agg("max", s.StreamGroupOldestPending, []string{"queue", "group"}), "{{queue}} {{group}}"}},
			}, {
				title: "Consumer groups not exported",
				help: help{"Consumer groups of a stream left out because the stream has more groups than the exporter's per-stream cap." + haMax,
					"0; raise the cap or the lag of the missing groups is invisible.", rbStreamLag},
				unit:    units.Short,
				targets: []target{{x.agg("max", s.StreamGroupsDropped, []string{"queue"}), "{{queue}}"}},
			}},
		}, {
			title: "Sampler health: can this board be trusted?",
			panels: []panel{{
				title: "Exporter up",
				help: help{"1 when the exporter's last sample of the node succeeded, 0 otherwise." + perExporter,
					"1 for every exporter and node.", rbExporterDown},
				unit: units.Short, max: 1, scale: alertValue,
				targets: []target{{x.agg("min", s.ExporterUp, perInstance), "{{instance}} {{target}} {{node}}"}},
			}, {
				title: "Keyspace coverage",
				help: help{"Fraction of each node's keyspace covered by the keyspace figures on this board; below 1 the view is partial." + perExporter,
					"1.", rbExporterCoverage},
				unit: units.PercentUnit, max: 1, scale: alertValue,
				targets: []target{{x.agg("min", s.ExporterKeyspaceCoverage, perInstance), "{{instance}} {{target}} {{node}}"}},
			}, {
				title: "Sample duration",
				help: help{"Duration of the last sample of each node." + perExporter,
					"well below the scrape interval.", rbExporterCoverage},
				unit:    units.Seconds,
				targets: []target{{x.agg("max", s.ExporterSampleDuration, perInstance), "{{instance}} {{target}} {{node}}"}},
			}, {
				title: "Scan cycles, truncated samples and keys scanned",
				help: help{"Complete SCAN passes, samples cut short by the key or time budget, and keys inspected, per second." + perExporter,
					"cycles steady; truncations mean a pass spans several samples (coverage tells how much is seen).", rbExporterCoverage},
				unit: units.OpsPerSecond,
				targets: []target{
					{x.rate(s.ExporterScanCycles, perInstance), "cycles {{instance}} {{target}} {{node}}"},
					{x.rate(s.ExporterTruncated, perInstance), "truncated {{instance}} {{target}} {{node}}"},
					{x.rate(s.ExporterKeysScanned, perInstance), "keys {{instance}} {{target}} {{node}}"},
				},
			}, {
				title: "Sampler errors by stage and class",
				help: help{"Sampler errors per second by stage (connect, info, scan, keys, locks, queues, latency) and class; the other stages are still sampled." + perExporter,
					"0; noperm means the exporter's ACL user lacks a command.", rbExporterFailing},
				unit: units.OpsPerSecond, scale: anyEvent,
				targets: []target{{x.rate(s.ExporterErrors, []string{"instance", targetLabel, "node", "stage", "class"}), "{{instance}} {{target}} {{node}} {{stage}} {{class}}"}},
			}, {
				title: "Time since last successful sample",
				help: help{"Seconds since each node was last sampled successfully." + perExporter,
					"about one scrape interval.", rbExporterDown},
				unit: units.Seconds,
				targets: []target{
					{"time() - " + x.agg("max", s.ExporterLastSuccess, perInstance), "{{instance}} {{target}} {{node}}"},
				},
			}},
		}},
	}
	b.rows = append(b.rows, freshnessRow(x), serverViewsRow(x))
	return b, x.err
}
