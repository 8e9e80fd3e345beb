// Package doctor runs a one-shot analysis of a live Redis (standalone or
// Cluster) and turns what the exporter samples into findings: each with a
// severity, the evidence, and the fix. It samples the whole keyspace twice,
// Interval apart, so that locks whose owner token did not change in between
// can be called long-held.
//
// Doctor bounds its own load: it retries a sample that made no progress only
// a few times, with growing pauses, and never retries a command the ACL
// refused. What it could not sample is listed in Report.Incomplete beside
// the findings it could make.
package doctor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/ctxsleep"
	"github.com/cachewatch/cachewatch/keygroup"
)

// DefaultKeysPerSecond paces doctor's whole-keyspace passes: ten times
// the exporter's default, for a run that lasts a minute (a 100,000-key node
// is covered twice in it), not one that runs for good.
const DefaultKeysPerSecond = 10_000

// Severity ranks a finding. A critical finding makes the report fail a
// deploy gate (Report.Critical).
type Severity string

// Severities, most severe first.
const (
	Critical Severity = "critical"
	Warning  Severity = "warning"
	Info     Severity = "info"
)

// Checks, the Check field of a Finding.
const (
	CheckNodeDown         = "node_unreachable"
	CheckLocksWithoutTTL  = "locks_without_ttl"
	CheckLongHeldLocks    = "long_held_locks"
	CheckSyncExpiry       = "synchronised_expiry"
	CheckHotKeysNoTTL     = "hot_keys_without_ttl"
	CheckSlowScripts      = "slow_scripts"
	CheckQueueBacklog     = "queue_backlog"
	CheckHighMissRatio    = "high_miss_ratio"
	CheckPartialCoverage  = "partial_coverage"
	CheckSamplerForbidden = "sampler_forbidden"
	CheckQueueNotFound    = "queue_not_found"
)

// ErrNoNode is returned by Run when no node could be sampled at all.
var ErrNoNode = errors.New("doctor: no Redis node could be sampled")

// Thresholds decide when a sampled value becomes a finding. Zero fields take
// the defaults of DefaultThresholds.
type Thresholds struct {
	// SyncScore and SyncMinKeys: a group whose busiest expiry second holds
	// at least SyncMinKeys keys and SyncScore times an even spread.
	SyncScore   float64
	SyncMinKeys uint64
	// SlowScript is the mean (or p99, when the server reports it) time per
	// EVAL/EVALSHA/FCALL call above which scripts are slow.
	SlowScript time.Duration
	// QueuePending, QueueAge and QueueLength: a consumer group with this
	// many pending or undelivered entries, or whose oldest pending message
	// (or overdue delayed job) is this old, or a list this long.
	QueuePending uint64
	QueueAge     time.Duration
	QueueLength  uint64
	// MissRatio over at least MissMinLookups lookups since the server started.
	MissRatio      float64
	MissMinLookups uint64
}

// DefaultThresholds are used for zero fields of Thresholds. Those an alert
// also judges are the alert's (alerts.DefaultConfig), so that a finding and
// an alert agree: expiry synchronisation (ExpirySync, ExpirySyncMinKeys),
// slow scripts (ServerScriptMean), stream backlog (StreamLag) and queue age
// (QueueOldestAge).
var DefaultThresholds = defaultThresholds(alerts.DefaultConfig())

func defaultThresholds(c alerts.Config) Thresholds {
	return Thresholds{
		SyncScore: c.ExpirySync, SyncMinKeys: uint64(c.ExpirySyncMinKeys), SlowScript: time.Duration(c.ServerScriptMean),
		QueuePending: uint64(c.StreamLag), QueueAge: time.Duration(c.QueueOldestAge), QueueLength: 10000,
		MissRatio: 0.5, MissMinLookups: 1000,
	}
}

func (t Thresholds) withDefaults() Thresholds {
	d := DefaultThresholds
	override(&d.SyncScore, t.SyncScore)
	override(&d.SyncMinKeys, t.SyncMinKeys)
	override(&d.SlowScript, t.SlowScript)
	override(&d.QueuePending, t.QueuePending)
	override(&d.QueueAge, t.QueueAge)
	override(&d.QueueLength, t.QueueLength)
	override(&d.MissRatio, t.MissRatio)
	override(&d.MissMinLookups, t.MissMinLookups)
	return d
}

// override sets *dst to v when v is set (positive).
func override[T float64 | uint64 | time.Duration](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// Options configures Run.
type Options struct {
	// Exporter configures the sampler (target, lock patterns, queues, key
	// groups, per-sample budgets). Its LongHeld and HotKeys are set by Run.
	// Its Sample.KeysPerSecond, when 0, is DefaultKeysPerSecond.
	// Its KeyGroups, when nil, keep every name at once
	// (keygroup.Options.MinKeys 1): the report is read by the operator (it
	// lists hot keys by name), not stored as labels, and a small keyspace
	// would not teach the groups in two samples.
	Exporter exporter.Options
	// Interval separates the two samples; default 2s.
	Interval time.Duration
	// LongHeld is how long a token must stay unchanged to be long-held;
	// default Interval (any lock still held by the same owner one interval later).
	LongHeld time.Duration
	// MaxDuration bounds the whole run, both samples and the interval
	// between them; default 1m. A pass cut short is reported as partial
	// coverage, a run cut short in Report.Incomplete.
	MaxDuration time.Duration
	// HotKeys is the top-K of keys by OBJECT FREQ under an LFU policy; default 10.
	HotKeys    int
	Thresholds Thresholds
}

// Finding is one problem found, with its evidence and fix.
type Finding struct {
	Check         string   `json:"check"`
	Severity      Severity `json:"severity"`
	KeyGroup      string   `json:"key_group,omitempty"`
	Queue         string   `json:"queue,omitempty"`
	ConsumerGroup string   `json:"consumer_group,omitempty"`
	Command       string   `json:"command,omitempty"`
	// KeyType is the type Redis holds a --queue key under when it is not a
	// queue (queue_not_found); empty when the key does not exist.
	KeyType string   `json:"key_type,omitempty"`
	Nodes   []string `json:"nodes"`
	// Count is how many things are affected (locks, keys, calls, entries);
	// Total what it is out of, when meaningful.
	Count uint64 `json:"count"`
	Total uint64 `json:"total,omitempty"`
	// Value is the check's measure: seconds for ages and script times, the
	// score or ratio otherwise.
	Value    float64 `json:"value,omitempty"`
	Evidence string  `json:"evidence"`
	Fix      string  `json:"fix"`
	// Locks names the locks a lock check flags and their holders,
	// longest-held first per node (at most 10,000 per group and node).
	Locks []NamedLock `json:"locks,omitempty"`
}

// NodeSummary says what was sampled on one node.
type NodeSummary struct {
	Node     string `json:"node"`
	Up       bool   `json:"up"`
	Error    string `json:"error,omitempty"`
	Keys     uint64 `json:"keys"`
	Complete bool   `json:"complete_pass"`
	Version  string `json:"redis_version,omitempty"`
	Policy   string `json:"maxmemory_policy,omitempty"`
}

// Report is the outcome of Run.
type Report struct {
	Nodes    []NodeSummary `json:"nodes"`
	Findings []Finding     `json:"findings"`
	// HotKeys are the hottest keys by OBJECT FREQ (LFU policy only). Key
	// names appear here, in the operator's report, never in metrics.
	HotKeys []snapshot.HotKey `json:"hot_keys,omitempty"`
	// IntervalSeconds separated the two samples.
	IntervalSeconds float64 `json:"interval_seconds"`
	// Incomplete lists what could not be sampled and why (a node down, a
	// stage refused or failing, a keyspace not covered). The findings then
	// describe only what was sampled.
	Incomplete []string `json:"incomplete,omitempty"`
}

// Complete reports whether everything was sampled.
func (r *Report) Complete() bool { return len(r.Incomplete) == 0 }

// Critical reports whether any finding is critical.
func (r *Report) Critical() bool { return r.Count(Critical) > 0 }

// Count returns the number of findings of severity s.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// Run samples the target twice, Interval apart, each time until every
// reachable node's keyspace has been covered once (or its half of
// MaxDuration passed, or sampling stalled), and analyses the second sample.
// The whole run takes at most MaxDuration: a read still in flight then is
// cut, and the report tells what was sampled until then.
//
// A run that could not sample everything still returns its report, with
// the reasons in Report.Incomplete. When no node could be sampled at all
// Run returns that report (if any) and an error wrapping ErrNoNode.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts = opts.withDefaults()
	end := time.Now().Add(opts.MaxDuration)
	half := max((opts.MaxDuration-opts.Interval)/2, opts.MaxDuration/10)
	e, err := exporter.New(opts.exporterOptions(half))
	if err != nil {
		return nil, err
	}
	defer e.Close()
	rctx, cancel := context.WithDeadlineCause(ctx, end, errOutOfTime)
	defer cancel()
	first, err := coverKeyspace(rctx, e, time.Now().Add(half))
	snaps := first
	if err == nil {
		if err = ctxsleep.Sleep(rctx, min(opts.Interval, time.Until(end)/2)); err == nil {
			snaps, err = coverKeyspace(rctx, e, end)
		}
	}
	outOfTime := ctx.Err() == nil && errors.Is(context.Cause(rctx), errOutOfTime)
	if outOfTime {
		err = nil
		if snaps == nil {
			snaps = first
		}
	}
	if snaps == nil {
		if outOfTime {
			err = fmt.Errorf("%w: nothing was sampled within %s", ErrNoNode, opts.MaxDuration)
		}
		return nil, err
	}
	r := analyze(snaps, opts.Thresholds, opts.Exporter.Queues)
	r.IntervalSeconds = opts.Interval.Seconds()
	if outOfTime {
		r.Incomplete = append(r.Incomplete, fmt.Sprintf("the run stopped at its time limit (%s): the rest was not sampled", opts.MaxDuration))
	}
	return r, err
}

// errOutOfTime ends a run that reached its MaxDuration.
var errOutOfTime = errors.New("doctor: the run reached its time limit")

func (o Options) withDefaults() Options {
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	if o.LongHeld <= 0 {
		o.LongHeld = o.Interval
	}
	if o.MaxDuration <= 0 {
		o.MaxDuration = time.Minute
	}
	if o.HotKeys <= 0 {
		o.HotKeys = 10
	}
	return o
}

// exporterOptions are the sampler's options: each sample's passes take at
// most perSample (and the exporter's own budget).
func (o Options) exporterOptions(perSample time.Duration) exporter.Options {
	eo := o.Exporter
	eo.Locks.LongHeld, eo.HotKeys, eo.Locks.Holders = o.LongHeld, o.HotKeys, namedPerGroup
	eo.Sample.MaxDuration = min(cmp.Or(eo.Sample.MaxDuration, sampler.DefaultMaxDuration), perSample)
	eo.Sample.KeysPerSecond = cmp.Or(eo.Sample.KeysPerSecond, DefaultKeysPerSecond)
	if eo.KeyGroups == nil {
		eo.KeyGroups, _ = keygroup.New(keygroup.Options{MinKeys: 1}) // valid options: no error
	}
	// Two samples a few seconds apart: a subscription to keyspace events
	// would add nothing but a sync pass.
	eo.Locks.Notifications = exporter.NotifyOff
	return eo
}

// Bounds of the retry of a sample that made no progress: a stage that fails
// while the node answers (CLUSTERDOWN, a timeout) is retried after a pause
// that doubles, at most maxStalls times in a row; a refused command (NOPERM)
// is not retried at all. Doctor never loops on a failing node.
const (
	maxStalls    = 3
	firstBackoff = 250 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

// coverKeyspace samples until every node that is up has completed one more
// SCAN pass, deadline has passed, or sampling stalled. It returns the last
// snapshots, with an error wrapping ErrNoNode when no node was up. When ctx
// ends during a sample, it returns the snapshots of the sample before, if
// any, and ctx's error.
func coverKeyspace(ctx context.Context, e *exporter.Exporter, deadline time.Time) ([]*snapshot.Node, error) {
	before := map[string]uint64{} // passes completed before this call; 0 for new nodes
	for _, s := range e.Snapshots() {
		before[s.Node] = s.ScanCycles
	}
	last := progressOf(e.Snapshots())
	backoff := firstBackoff
	var ended []*snapshot.Node // the last sample that ended before ctx
	for stalls := 0; ; {
		snaps := e.Sample(ctx)
		if err := endedErr(ctx); err != nil {
			return ended, err
		}
		ended = snaps
		if err := noNodeUp(snaps); err != nil {
			return snaps, err
		}
		// Only the nodes still to cover count: healthy nodes completing
		// pass after pass must not hide one that makes no progress.
		done, moved := true, false
		for _, s := range snaps {
			if s.Up && s.ScanCycles <= before[s.Node] {
				done = false
				moved = moved || progressOf([]*snapshot.Node{s})[s.Node] > last[s.Node]
			}
		}
		last = progressOf(snaps)
		if done || time.Now().After(deadline) {
			return snaps, nil
		}
		if moved {
			stalls, backoff = 0, firstBackoff
			continue
		}
		if stalls++; stalls >= maxStalls || onlyRefused(snaps) {
			return snaps, nil
		}
		if err := ctxsleep.Sleep(ctx, min(backoff, time.Until(deadline))); err != nil {
			return ended, err
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// endedErr returns ctx's error once it has ended, and waits for it when
// its deadline has passed: a read cut by the connection deadline (which
// go-redis sets from ctx's) returns before ctx's own timer has fired, and
// that read's failure is the run's time limit, not the node's.
func endedErr(ctx context.Context) error {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		<-ctx.Done()
	}
	return ctx.Err()
}

// progressOf returns the keys scanned plus passes completed of each node.
func progressOf(snaps []*snapshot.Node) map[string]uint64 {
	p := make(map[string]uint64, len(snaps))
	for _, s := range snaps {
		p[s.Node] = s.KeysScanned + s.ScanCycles
	}
	return p
}

// onlyRefused reports whether every failed stage of an up node was refused
// by the server's ACL: retrying cannot help.
func onlyRefused(snaps []*snapshot.Node) bool {
	refused := false
	for _, s := range snaps {
		for _, se := range s.Errors {
			if s.Up && se.Class != snapshot.ClassNoPerm {
				return false
			}
			refused = refused || s.Up
		}
	}
	return refused
}

// noNodeUp returns an error wrapping ErrNoNode and every node's error when
// no node could be sampled.
func noNodeUp(snaps []*snapshot.Node) error {
	var errs []error
	for _, s := range snaps {
		if s.Up {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", s.Node, s.Err))
	}
	return fmt.Errorf("%w: %w", ErrNoNode, errors.Join(errs...))
}

// Analyze turns snapshots into a report. Findings of the same check and
// subject on several Cluster masters are merged into one.
func Analyze(snaps []*snapshot.Node, th Thresholds) *Report {
	return analyze(snaps, th, nil)
}

// analyze is Analyze knowing the configured queues, so that one found on
// no node is reported.
func analyze(snaps []*snapshot.Node, th Thresholds, queues []string) *Report {
	th = th.withDefaults()
	a := &analysis{th: th, merged: map[string]*Finding{}}
	r := &Report{}
	for _, s := range snaps {
		sum := NodeSummary{Node: s.Node, Up: s.Up}
		if s.Err != nil {
			sum.Error = s.Err.Error()
		}
		if s.Server != nil {
			sum.Version, sum.Policy = s.Server.Version, s.Server.MaxmemoryPolicy
		}
		if s.Pass != nil {
			sum.Keys, sum.Complete = s.Pass.Keys, s.Pass.Complete
			r.HotKeys = append(r.HotKeys, s.Pass.HotKeys...)
		}
		r.Nodes = append(r.Nodes, sum)
		r.Incomplete = append(r.Incomplete, incomplete(s)...)
		a.node(s)
	}
	a.missingQueues(snaps, queues)
	sort.Slice(r.HotKeys, func(i, j int) bool { return r.HotKeys[i].Freq > r.HotKeys[j].Freq })
	if len(r.HotKeys) > 10 {
		r.HotKeys = r.HotKeys[:10]
	}
	r.Findings = a.findings()
	return r
}

// incomplete says what could not be sampled on one node, and why.
func incomplete(s *snapshot.Node) []string {
	if !s.Up {
		return []string{fmt.Sprintf("%s: not sampled: %v", s.Node, s.Err)}
	}
	var out []string
	seen := map[snapshot.Stage]bool{}
	for _, se := range s.Errors {
		if !seen[se.Stage] {
			seen[se.Stage] = true
			out = append(out, fmt.Sprintf("%s: stage %s failed (%s): %v", s.Node, se.Stage, se.Class, se.Err))
		}
	}
	if s.Pass == nil || !s.Pass.Complete {
		out = append(out, fmt.Sprintf("%s: keyspace not covered (%d keys scanned, no complete pass)", s.Node, s.KeysScanned))
	}
	return out
}

type analysis struct {
	th     Thresholds
	merged map[string]*Finding
}

// add merges f into the finding with the same check and subject.
func (a *analysis) add(node string, f Finding) {
	key := strings.Join([]string{f.Check, f.KeyGroup, f.Queue, f.ConsumerGroup, f.Command}, "\x00")
	m := a.merged[key]
	if m == nil {
		f.Nodes = []string{node}
		a.merged[key] = &f
		return
	}
	m.Nodes = append(m.Nodes, node)
	m.Count += f.Count
	m.Total += f.Total
	m.Value = max(m.Value, f.Value)
	m.Locks = append(m.Locks, f.Locks...)
}

func (a *analysis) node(s *snapshot.Node) {
	if !s.Up {
		a.add(s.Node, Finding{Check: CheckNodeDown, Severity: Critical, Count: 1})
		return
	}
	for _, se := range s.Errors {
		if se.Class == snapshot.ClassNoPerm {
			a.add(s.Node, Finding{Check: CheckSamplerForbidden, Severity: Warning, Command: string(se.Stage), Count: 1})
		}
	}
	if s.Pass == nil || !s.Pass.Complete {
		a.add(s.Node, Finding{Check: CheckPartialCoverage, Severity: Warning, Count: 1})
	}
	if s.Pass != nil { // lock figures are exact even before the keyspace is covered
		a.keyspace(s.Node, s.Pass, queueNames(s.Queues))
	}
	if s.Server != nil {
		a.server(s)
	}
	a.queues(s.Node, s.Queues)
}

func queueNames(qs []snapshot.QueueStats) map[string]bool {
	m := make(map[string]bool, len(qs))
	for _, q := range qs {
		m[q.Queue] = true
	}
	return m
}

// keyspace judges the lock and expiry state of one pass. Lock groups are
// left out of the synchronised-expiry check (locks taken together expire
// together by design, and are not recomputed) and locks and queues out of
// hot keys without TTL (locks without TTL have their own check; queues do
// not expire).
func (a *analysis) keyspace(node string, p *snapshot.Pass, queues map[string]bool) {
	for name, g := range p.Groups {
		if g.LocksNoTTL > 0 {
			a.add(node, Finding{Check: CheckLocksWithoutTTL, Severity: Critical, KeyGroup: name, Count: g.LocksNoTTL, Total: g.Locks,
				Locks: flagged(node, g.Holders, p.LocksAsOf, noTTL)})
		}
		if n := g.LocksLongHeldPastTTL; p.TokensRead && n > 0 {
			a.add(node, Finding{Check: CheckLongHeldLocks, Severity: Warning, KeyGroup: name, Count: n, Total: g.Locks,
				Locks: flagged(node, g.Holders, p.LocksAsOf, pastTTL)})
		}
		if g.Locks == 0 && g.BusiestSecond >= a.th.SyncMinKeys && g.SyncScore >= a.th.SyncScore {
			a.add(node, Finding{Check: CheckSyncExpiry, Severity: Warning, KeyGroup: name, Count: g.BusiestSecond,
				Total: g.Keys, Value: g.SyncScore})
		}
	}
	hot := map[string]uint64{}
	for _, hk := range p.HotKeys {
		if g := p.Groups[hk.Group]; hk.NoTTL && !queues[hk.Key] && (g == nil || g.Locks == 0) {
			hot[hk.Group]++
		}
	}
	for group, n := range hot {
		a.add(node, Finding{Check: CheckHotKeysNoTTL, Severity: Warning, KeyGroup: group, Count: n, Total: uint64(len(p.HotKeys))})
	}
}

// missingQueues reports each configured queue that no node reported as a
// queue: it is held under another type, or does not exist. A queue is only
// called missing when every node was sampled without a queue-stage error,
// so that the node owning it cannot be the one that failed.
func (a *analysis) missingQueues(snaps []*snapshot.Node, queues []string) {
	found := map[string]bool{}
	for _, s := range snaps {
		if !s.Up {
			return
		}
		for _, se := range s.Errors {
			if se.Stage == "queues" || se.Stage == "connect" {
				return
			}
		}
		for _, q := range s.Queues {
			found[q.Queue] = true
		}
	}
	for _, q := range queues {
		if found[q] {
			continue
		}
		typ, node := "none", ""
		for _, s := range snaps {
			if t, ok := s.NotQueues[q]; ok && (node == "" || t != "none") {
				typ, node = t, s.Node
			}
		}
		if node == "" {
			continue // on no node: the sampler did not see it (should not happen)
		}
		sev := Warning
		if typ == "none" {
			sev = Info // an emptied list or sorted set no longer exists
		}
		if typ == "none" {
			typ = ""
		}
		a.add(node, Finding{Check: CheckQueueNotFound, Severity: sev, Queue: q, KeyType: typ, Count: 1})
	}
}

var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

func (a *analysis) server(s *snapshot.Node) {
	st := s.Server
	for _, c := range scriptCommands {
		cs, ok := st.Commands[c]
		if !ok || cs.Calls == 0 {
			continue
		}
		per := cs.Seconds / float64(cs.Calls)
		if p99, ok := st.Latency[c]["p99"]; ok {
			per = max(per, p99)
		}
		if per >= a.th.SlowScript.Seconds() {
			a.add(s.Node, Finding{Check: CheckSlowScripts, Severity: Warning, Command: c, Count: cs.Calls, Value: per})
		}
	}
	if total := s.Hits + s.Misses; total >= a.th.MissMinLookups {
		if ratio := float64(s.Misses) / float64(total); ratio >= a.th.MissRatio {
			a.add(s.Node, Finding{Check: CheckHighMissRatio, Severity: Warning, Count: s.Misses, Total: total, Value: ratio})
		}
	}
}

func (a *analysis) queues(node string, qs []snapshot.QueueStats) {
	for _, q := range qs {
		switch q.Type {
		case "list":
			if q.Length >= a.th.QueueLength {
				a.add(node, Finding{Check: CheckQueueBacklog, Severity: Warning, Queue: q.Queue, Count: q.Length})
			}
		case "zset":
			if q.OldestAge >= a.th.QueueAge {
				a.add(node, Finding{Check: CheckQueueBacklog, Severity: Warning, Queue: q.Queue, Count: q.Length, Value: q.OldestAge.Seconds()})
			}
		case "stream":
			for _, g := range q.Groups {
				if g.Pending >= a.th.QueuePending || g.Lag >= a.th.QueuePending || (g.Pending > 0 && g.OldestPending >= a.th.QueueAge) {
					a.add(node, Finding{Check: CheckQueueBacklog, Severity: Warning, Queue: q.Queue, ConsumerGroup: g.Name,
						Count: g.Pending, Total: g.Pending + g.Lag, Value: g.OldestPending.Seconds()})
				}
			}
		}
	}
}

var severityRank = map[Severity]int{Critical: 0, Warning: 1, Info: 2}

// findings returns the merged findings with evidence and fix, most severe first.
func (a *analysis) findings() []Finding {
	out := make([]Finding, 0, len(a.merged))
	for _, f := range a.merged {
		sort.Strings(f.Nodes)
		f.Evidence, f.Fix = explain(f)
		out = append(out, *f)
	}
	sort.Slice(out, func(i, j int) bool {
		x, y := out[i], out[j]
		if severityRank[x.Severity] != severityRank[y.Severity] {
			return severityRank[x.Severity] < severityRank[y.Severity]
		}
		if x.Check != y.Check {
			return x.Check < y.Check
		}
		return x.KeyGroup+x.Queue+x.ConsumerGroup+x.Command < y.KeyGroup+y.Queue+y.ConsumerGroup+y.Command
	})
	return out
}

// explain writes the evidence and the fix of a merged finding.
func explain(f *Finding) (evidence, fix string) {
	on := "on " + strings.Join(f.Nodes, ", ")
	switch f.Check {
	case CheckNodeDown:
		return fmt.Sprintf("the node could not be sampled (%s)", on),
			"check that Redis runs and that the address, user, password and TLS settings are right"
	case CheckLocksWithoutTTL:
		return fmt.Sprintf("%d of %d lock keys in %s have no expiry %s: if their owner crashed they are held forever", f.Count, f.Total, f.KeyGroup, on),
			"acquire locks with SET key token NX PX <ttl> (never without PX); remove these keys once their owners are known to be gone"
	case CheckLongHeldLocks:
		return fmt.Sprintf("%d of %d lock keys in %s kept the same owner token across both samples and longer than the TTL they had when first seen: their owners keep extending them %s",
				f.Count, f.Total, f.KeyGroup, on),
			"check that the owners are alive and the critical section is short; for long work renew the lease (heartbeat) and give up when renewal fails"
	case CheckSyncExpiry:
		return fmt.Sprintf("%d of %d keys in %s expire in the same second, %.1f× an even spread %s: they will be recomputed together (stampede)",
				f.Count, f.Total, f.KeyGroup, f.Value, on),
			"add random jitter to the TTL of every write of this group (e.g. ttl ± 10%), and coalesce recomputes behind a lock"
	case CheckHotKeysNoTTL:
		return fmt.Sprintf("%d of the %d hottest keys (OBJECT FREQ) belong to %s and never expire %s", f.Count, f.Total, f.KeyGroup, on),
			"give the group a TTL with jitter, or make sure it is invalidated on change; hot keys without TTL serve stale data forever"
	case CheckSlowScripts:
		return fmt.Sprintf("%s: %d calls, %.2f ms per call %s; the server runs nothing else meanwhile", f.Command, f.Count, f.Value*1e3, on),
			"keep scripts to a few key operations (owner-checked release/extend); move loops and large reads out of Lua"
	case CheckQueueBacklog:
		if f.ConsumerGroup != "" {
			return fmt.Sprintf("stream %s, group %s: %d pending, %d not yet delivered, oldest pending %s old %s",
					f.Queue, f.ConsumerGroup, f.Count, f.Total-f.Count, seconds(f.Value), on),
				"add consumers or find the ones that stopped acknowledging; reclaim stuck messages with XAUTOCLAIM"
		}
		return fmt.Sprintf("queue %s: %d entries, oldest overdue by %s %s", f.Queue, f.Count, seconds(f.Value), on),
			"add workers or find why they stopped; check for workers blocked on locks"
	case CheckHighMissRatio:
		return fmt.Sprintf("%d of %d keyspace lookups missed (%.0f%%) since the server started %s (the sampler's own lookups excluded)",
				f.Count, f.Total, f.Value*100, on),
			"check TTLs are not too short and that invalidation is not too broad; protect the source from the misses with request coalescing"
	case CheckPartialCoverage:
		return fmt.Sprintf("the keyspace was not covered completely %s; keyspace checks are missing there", on),
			"see the incomplete reasons: grant the refused commands, wait for the cluster to recover, or run doctor with a larger --max-duration"
	case CheckQueueNotFound:
		if f.KeyType != "" {
			return fmt.Sprintf("queue %s is a %s, not a list, stream or sorted set %s: it is not monitored", f.Queue, f.KeyType, on),
				"fix the --queue name"
		}
		return fmt.Sprintf("queue %s does not exist %s: it is not monitored until it has entries", f.Queue, on),
			"check the --queue name; Redis deletes an emptied list or sorted set, so an idle queue can be missing"
	case CheckSamplerForbidden:
		return fmt.Sprintf("the sampler's ACL user may not run the %s stage's commands %s; those checks are missing", f.Command, on),
			"grant the user +info +scan +pttl +get +type +llen +xlen +xrange +xinfo +xpending +zcard +zrange +object, read-only on the key patterns"
	}
	return "", ""
}

// seconds formats an age for people: "10m0s", "26h5m3s".
func seconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}
