package alerts

import (
	"fmt"
	"maps"
	"time"
)

// The dashboards the runbooks point at (package dashboards builds them).
const (
	boardContention = "cachewatch / Service contention"
	boardRedis      = "cachewatch / Redis commands & pool"
	boardKeyspace   = "cachewatch / Keyspace & locks"
)

// The rule groups, one per SLO (named by sloGroup) and one per area the
// cause alerts watch.
const (
	groupLocks    = "cachewatch-locks"
	groupCache    = "cachewatch-cache"
	groupRedis    = "cachewatch-redis"
	groupKeyspace = "cachewatch-keyspace"
	groupExporter = "cachewatch-exporter"
)

// groupOrder is the rule file's order of the groups.
var groupOrder = func() []string {
	var out []string
	for _, s := range slos() {
		out = append(out, sloGroup(s))
	}
	return append(out, groupLocks, groupCache, groupRedis, groupKeyspace, groupExporter)
}()

// sloGroup is the rule group of an SLO: its recording rules and its
// burn-rate alerts.
func sloGroup(s SLO) string { return "cachewatch-slo-" + s.Name }

// upMetric is Prometheus's own per-target series, the one series the rules
// read that is not in the signals catalog.
const upMetric = "up"

// alertsMetric is the series Prometheus writes for every pending or firing
// alert (labels alertname, alertstate and the alert's own); the rules read
// it to keep an alert firing while its data is missing, and to page an
// incident once.
const alertsMetric = "ALERTS"

// Labels of the fixtures' series.
const (
	svc = `job="api", key_group="lock:report:*"`
	cli = `job="api", instance="api-0:8080", client="orders"`
	exp = `job="cachewatch-exporter", instance="exporter:9121", node="redis:6379"`
)

var (
	svcLabels = map[string]string{"job": "api", "key_group": "lock:report:*"}
	expNode   = map[string]string{"job": "cachewatch-exporter", "node": "redis:6379"}
)

func with(base map[string]string, kv ...string) map[string]string {
	out := make(map[string]string, len(base)+len(kv)/2)
	maps.Copy(out, base)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func d(x interface{ String() string }) string { return x.String() }

// lvl is a level that compares the value with threshold, shown as text.
func lvl(severity string, threshold float64, text string) level {
	return level{severity: severity, threshold: threshold, text: text}
}

// recording is one recording rule's template. seen, when set, is a
// metric of the service whose presence the rule requires (see
// recordingRules).
type recording struct {
	record, expr, seen string
}

// recordingRules returns the recording rules, each in the group of the
// alerts that read it, so that Prometheus, which evaluates a group's rules
// in order, gives the alerts the value of the same evaluation. Each keeps
// job besides the labels its level names. None reads another, except an
// SLO's 30-day ratio, which averages its 5m one.
//
// A rule over a service's metrics records only while the job's seen
// metric is scraped: a rate keeps computing, decaying, from the last
// samples for a whole window after a target stops answering, and the alert
// that keeps firing while its source is blind must quote the value last
// seen while it was seen, not the decayed one.
func recordingRules(cfg Config) map[string][]RecordingRule {
	out := map[string][]RecordingRule{}
	templates := map[string][]recording{
		groupLocks: locksRecording, groupCache: cacheRecording, groupRedis: redisRecording, groupKeyspace: keyspaceRecording,
	}
	for _, s := range slos() {
		templates[sloGroup(s)] = s.recording()
	}
	for group, recs := range templates {
		for _, r := range recs {
			e := r.expr
			if r.seen != "" {
				e = fmt.Sprintf("%s\nand on (job)\ngroup by (job) (%s{${service_selector}})", paren(expand(cfg, e)), r.seen)
			}
			out[group] = append(out[group], RecordingRule{Record: expand(cfg, r.record), Expr: expand(cfg, e)})
		}
	}
	return out
}

// definitions returns every alert condition, their PromQL filled in from
// cfg.
func definitions(cfg Config) []definition {
	var defs []definition
	for _, part := range [][]definition{sloDefinitions(cfg), lockDefinitions(cfg), cacheDefinitions(cfg),
		redisDefinitions(cfg), keyspaceDefinitions(cfg), exporterDefinitions(cfg), freshnessDefinitions(cfg)} {
		defs = append(defs, part...)
	}
	for i := range defs {
		defs[i].fill(cfg)
	}
	return defs
}

// fill expands the placeholders of the definition's PromQL.
func (d *definition) fill(cfg Config) {
	for _, s := range []*string{&d.query, &d.guard, &d.worse, &d.impact, &d.summary, &d.description} {
		*s = expand(cfg, *s)
	}
	for i := range d.levels {
		l := &d.levels[i]
		for _, s := range []*string{&l.query, &l.also, &l.unless, &l.description} {
			*s = expand(cfg, *s)
		}
	}
	if d.seen != nil {
		s := *d.seen
		s.healthy, s.exists = expand(cfg, s.healthy), expand(cfg, s.exists)
		d.seen = &s
	}
}

// serviceSight: the service's data are seen while any series of live (a
// metric its emitters export from their start) of the job is there, and
// the job exists while Prometheus has targets of it (up). A service that
// pushes OTLP has no up: its alerts resolve when its data stop, as a gone
// job's do.
func serviceSight(live, healthyValues string) *sight {
	return &sight{
		who:     "the service not scraped",
		on:      "job",
		healthy: "group by (job) (" + live + "{${service_selector}})",
		exists:  "group by (job) (" + upMetric + "{${service_selector}})",
		fixture: []series{
			{live + `{job="api", instance="api-1:8080"}`, healthyValues},
			{upMetric + `{job="api", instance="api-1:8080"}`, "1x59"},
		},
	}
}

// exporterSight: a node's data of family (locks, keys, server, queues)
// are seen while an exporter scrapes and samples the node and has
// refreshed that family within the stale-state bound (a lock pass that has
// not finished after a restart, or a failing stage, is no sight); the
// exporter exists while Prometheus has targets of its job.
func exporterSight(family string) *sight {
	fam := `family="` + family + `"`
	return &sight{
		who: "no exporter scraped, sampling the node and refreshing these figures",
		on:  "job, target, node",
		healthy: `max by (job, target, node) (cachewatch_exporter_up{${exporter_selector}}) == 1
and on (job, target, node)
(time() - max by (job, target, node) (cachewatch_exporter_data_timestamp_seconds{${exporter_selector}, ` + fam + `}))
<= ${lock_state_stale_intervals:num} * max by (job, target, node) (cachewatch_exporter_sample_interval_seconds{${exporter_selector}})`,
		exists: "group by (job) (" + upMetric + "{${exporter_selector}})",
		fixture: []series{
			{`cachewatch_exporter_up{` + exp + `}`, "1x59"},
			{`cachewatch_exporter_data_timestamp_seconds{` + exp + `, ` + fam + `}`, "0+60x59"},
			{`cachewatch_exporter_sample_interval_seconds{` + exp + `}`, "15x59"},
			{upMetric + `{job="cachewatch-exporter", instance="exporter:9121"}`, "1x59"},
		},
	}
}

func minutesOf(n int) time.Duration { return time.Duration(n) * time.Minute }
