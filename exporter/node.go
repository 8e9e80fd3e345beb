package exporter

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/ctxsleep"
)

// ErrorKey identifies a counter of sample_errors_total.
type ErrorKey struct {
	Stage Stage
	Class Class
}

// NodeSnapshot is the published result of one node's last sample.
type NodeSnapshot struct {
	Node string
	// Up is false when the node could not be reached or refused the
	// sampler (and before its first sample); then only the self-metrics
	// below are set, never an older value presented as fresh.
	Up  bool
	Err error
	// Errors lists the stages that failed in this sample, or that were
	// skipped because they failed recently and their backoff has not
	// passed (the other stages were sampled).
	Errors []*StageError

	Time, LastSuccess time.Time
	Duration          time.Duration

	// Server is nil when INFO could not be read.
	Server *ServerStats
	// Hits and Misses are the server's keyspace hits and misses less the
	// lookups of samplers (this one's, other exporters' and doctor runs')
	// since the server started.
	Hits, Misses uint64
	// Pass is the keyspace view of the sample: the last complete
	// whole-keyspace pass or, before one completes, the pass in progress
	// (Pass.Complete false: its key figures are not exported, only its
	// coverage), with the lock figures shown (Pass.LocksAsOf). Nil when
	// there is nothing to show.
	Pass *Pass
	// Coverage is the fraction (0 to 1) of the node's keyspace that Pass's
	// key figures cover: 1 for a complete pass.
	Coverage float64
	Queues   []QueueStats
	// NotQueues maps each configured queue this node holds under a type
	// that is not a queue ("string", "hash", …) or not at all ("none") to
	// that type. Keys another Cluster master owns are not listed.
	NotQueues map[string]string

	// Cumulative self-accounting counters.
	KeysScanned, ScanCycles, Truncated, MissBursts uint64
	ErrorCounts                                    map[ErrorKey]uint64
	// OwnHits and OwnMisses are this sampler's own key lookups since the
	// server (run_id) started.
	OwnHits, OwnMisses uint64

	// LocksAsOf, KeysAsOf, ServerAsOf and QueuesAsOf are when the figures
	// of each series family were taken (the oldest observation they are
	// built from); zero when there are none yet. They are kept while a
	// failing stage's series are left out, so the age keeps growing.
	LocksAsOf, KeysAsOf, ServerAsOf, QueuesAsOf time.Time
	// LockNotifications is true when keyspace notifications keep the lock
	// figures exact; LockRepairs counts the lock keys a reconciling pass
	// found the notification-fed index wrong about.
	LockNotifications bool
	LockRepairs       uint64
	// LockNotificationsRefused is true when the server publishes no
	// keyspace events for the lock index and refused the exporter's CONFIG
	// GET or SET of notify-keyspace-events (ACL, a renamed or missing
	// CONFIG): the lock figures come from SCAN passes.
	LockNotificationsRefused bool
	// QueueReadsSkipped counts, per queue and read, the samples that left
	// out a read whose last reply exceeded Options.MaxQueueReply.
	QueueReadsSkipped map[QueueRead]uint64
}

// retry is the backoff of a failed node or stage.
type retry struct {
	until time.Time
	wait  time.Duration
	err   *StageError
}

// node is the sampler state of one Redis node. Only the goroutine sampling
// the node touches it (Sample is serialised); within a sample the lock pass
// and the whole-keyspace pass run concurrently on disjoint fields.
type node struct {
	addr     string
	rdb      *redis.Client
	patterns []string

	// The whole-keyspace pass; keyScan follows its cursors.
	cursor  uint64
	keyScan scanWatch
	pass    *Pass // being accumulated
	done    *Pass // last complete
	passSeq uint64
	hot     hotKeys

	// The lock index, the lock pass that fills it and, with keyspace
	// notifications, the subscription that keeps it exact.
	locks lockIndex
	feed  *lockFeed
	// scanCost estimates the server's time per key SCAN visits.
	scanCost scanCost
	// flushes counts FLUSHALL, FLUSHDB and SWAPDB calls (INFO
	// commandstats): they change keys without notifications.
	flushes uint64
	role    string
	// notifySet is set while notify-keyspace-events holds classes this
	// exporter added (NotifyAuto): notifyWas is the value before, put back
	// on close unless the value is no longer notifyOurs. notifyYielded is
	// set once someone took them away (kept until the server restarts);
	// notifyRefused while the server refuses CONFIG GET or SET.
	notifySet, notifyYielded, notifyRefused bool
	notifyWas, notifyOurs                   string
	// queueReads are the backoffs of costly queue reads.
	queueReads map[QueueRead]*readCap
	// readsSkipped counts the samples that left a queue read out;
	// groupsDropped is each stream's last GroupsDropped.
	readsSkipped  map[QueueRead]uint64
	groupsDropped map[string]uint64
	// keysOK and locksOK say whether the last sample's keyspace pass and
	// lock stage succeeded: their series are left out otherwise.
	keysOK, locksOK bool
	// serverAsOf and queuesAsOf are when INFO and the queues were last read;
	// locksSince is when the lock index was last started afresh, locksAsOf
	// the time of the lock figures the last successful lock stage showed.
	serverAsOf, queuesAsOf, locksSince, locksAsOf time.Time

	// memoryTurn counts keys towards the next MEMORY USAGE read;
	// memoryRefused is set once the ACL refused it.
	memoryTurn    uint64
	memoryRefused bool

	// queueTypes remembers each queue's type for when it is emptied.
	queueTypes map[string]string
	// notQueues are this sample's configured queues that the node holds
	// under another type or not at all; notQueuesLogged what was logged.
	notQueues, notQueuesLogged map[string]string

	runID      string
	ttlCmd     string // "pexpiretime" (Redis 7+) or "pttl"
	dbKeys     uint64 // keys in the sampled database (INFO keyspace)
	dbKnown    bool
	own        lookups // this sampler's lookups since run_id
	prevMisses uint64
	havePrev   bool

	lastSuccess time.Time
	last        *NodeSnapshot
	backoff     map[string]*retry
	refusals    map[string]bool // stage/command refusals already logged

	keysScanned, cycles, truncated, missBursts uint64
	errCounts                                  map[ErrorKey]uint64
}

func newNode(addr string, rdb *redis.Client, patterns []string) *node {
	n := &node{addr: addr, rdb: rdb, patterns: patterns, queueTypes: map[string]string{}, queueReads: map[QueueRead]*readCap{},
		notQueuesLogged: map[string]string{}, errCounts: map[ErrorKey]uint64{}, backoff: map[string]*retry{}, refusals: map[string]bool{}, own: lookups{}, ttlCmd: "pexpiretime"}
	n.locks.reset()
	return n
}

// resetKeyspace forgets both passes: after a failure or a server restart
// they no longer describe the server.
func (n *node) resetKeyspace() {
	n.cursor, n.pass, n.done = 0, nil, nil
	n.resetLocks()
}

// closeNode puts back the operator's notify-keyspace-events where this
// exporter changed it, then ends the node's subscription and closes its
// connections.
func (e *Exporter) closeNode(n *node) error {
	ctx, cancel := context.WithTimeout(context.Background(), feedWait)
	defer cancel()
	e.restoreNotifications(ctx, n)
	return n.close()
}

// close ends the node's subscription and closes its connections.
func (n *node) close() error {
	if n.feed != nil {
		n.feed.close()
		n.feed = nil
	}
	return n.rdb.Close()
}

// resetLocks forgets the lock index: it is rebuilt by a new pass (and a new
// subscription, whose events before the failure are lost).
func (n *node) resetLocks() {
	if n.feed != nil {
		n.feed.close()
		n.feed = nil
	}
	n.locks.reset()
	n.locksSince, n.locksAsOf = time.Time{}, time.Time{}
}

// Backoff keys beside the stages: the lock pass's token reads can be
// refused (GETRANGE) while its SCAN and TTL reads are allowed.
const backoffTokens = "locks/tokens"

// due reports whether a stage (or the node, under StageConnect) may be
// tried again.
func (e *Exporter) due(n *node, key string) bool {
	r := n.backoff[key]
	return r == nil || !e.clock.Now().Before(r.until)
}

// failed starts or doubles the backoff of key: refused commands (ACL) are
// retried after Interval, doubling up to 8 × Interval (permissions rarely
// change by themselves); other failures after 1s, doubling up to Interval.
func (e *Exporter) failed(n *node, key string, se *StageError) {
	base, ceiling := time.Second, e.opts.Interval
	if se.Class == ClassNoPerm {
		base, ceiling = e.opts.Interval, 8*e.opts.Interval
	}
	r := n.backoff[key]
	if r == nil {
		r = &retry{wait: min(base, ceiling)}
		n.backoff[key] = r
	} else {
		r.wait = min(2*r.wait, ceiling)
	}
	r.until, r.err = e.clock.Now().Add(r.wait), se
}

// sampleNode runs the stages of one sample: connect, INFO, queues, then the
// lock pass and the whole-keyspace pass side by side.
func (e *Exporter) sampleNode(ctx context.Context, n *node) *NodeSnapshot {
	if n.last != nil && !n.last.Up && !e.due(n, string(StageConnect)) {
		return n.last // the node failed recently: do not dial it again yet
	}
	sm := &sampling{ctx: ctx, e: e, n: n, s: &NodeSnapshot{Node: n.addr}, began: e.pacer.Now()}
	if n.locksSince.IsZero() {
		n.locksSince = e.clock.Now()
	}
	s := sm.s
	if err := n.rdb.Ping(ctx).Err(); err != nil {
		se := stageErr(StageConnect, e.opts.Target.plaintextHint(ctx, n.addr, err))
		if se.fatal() || se.Class == ClassOther || se.Class == ClassMalformed {
			return sm.finish(se)
		}
		sm.record(se, string(StageConnect))
	}
	if fatal := e.serverStages(ctx, n, s, sm.skip, sm.record); fatal != nil {
		return sm.finish(fatal)
	}
	locksChanged := e.publishEarly(n, s)
	if fatal := e.passes(ctx, n, sm.began, s, sm.skip, sm.record, locksChanged); fatal != nil {
		return sm.finish(fatal)
	}
	s.Pass, s.Coverage = n.keyView()
	if !n.keysOK {
		s.Pass, s.Coverage = nil, 0
	}
	s.Pass = e.withLockView(n, s.Pass, n.locksOK)
	return sm.finish(nil)
}

// sampling is one sample of a node in progress: the snapshot it fills in,
// and when it began.
type sampling struct {
	ctx   context.Context
	e     *Exporter
	n     *node
	s     *NodeSnapshot
	began time.Time
}

// record notes a stage's failure in the snapshot and the node's counters,
// and starts or extends the backoff of key.
func (sm *sampling) record(se *StageError, key string) {
	sm.s.Errors = append(sm.s.Errors, se)
	sm.n.errCounts[ErrorKey{se.Stage, se.Class}]++
	sm.e.logRefusal(sm.n, se)
	sm.e.failed(sm.n, key, se)
}

// skip reports whether the stage of key is still in backoff; a skipped
// stage reports its last error.
func (sm *sampling) skip(key string) bool {
	if sm.e.due(sm.n, key) {
		return false
	}
	if r := sm.n.backoff[key]; r.err != nil {
		sm.s.Errors = append(sm.s.Errors, r.err)
	}
	return true
}

// finish completes the snapshot, down when fatal is set, and keeps it as
// the node's last. A sample cut short because its context was cancelled
// (the exporter is stopping) failed at nothing: it is neither recorded nor
// logged, and the node's last snapshot stays.
func (sm *sampling) finish(fatal *StageError) *NodeSnapshot {
	e, n, s := sm.e, sm.n, sm.s
	if fatal != nil && errors.Is(sm.ctx.Err(), context.Canceled) {
		if n.last != nil {
			return n.last
		}
		return &NodeSnapshot{Node: n.addr, Err: ErrNotSampled}
	}
	s.Time, s.Duration = e.clock.Now(), e.pacer.Since(sm.began)
	if fatal != nil {
		sm.record(fatal, string(StageConnect))
		e.opts.Logger.Warn("redis sample failed", "node", n.addr, "err", fatal.Error())
		n.resetKeyspace()
		n.havePrev = false
		s.Up, s.Err, s.Server, s.Pass, s.Queues, s.Coverage = false, fatal, nil, nil, nil, 0
		s.Hits, s.Misses = 0, 0
	} else {
		s.Up = true
		n.lastSuccess = s.Time
		delete(n.backoff, string(StageConnect))
		e.ages(n, s)
	}
	e.selfCounters(n, s)
	n.last = s
	return s
}

// publishEarly shows scrapes the server figures of s at once, beside the
// last passes' figures: the passes may take most of the interval (they are
// paced). It returns what the lock stage calls to show its fresh figures as
// soon as it has them.
func (e *Exporter) publishEarly(n *node, s *NodeSnapshot) (locksChanged func()) {
	early := *s
	early.Up, early.Time = true, e.clock.Now()
	if n.last != nil { // the duration of the last whole sample, not 0
		early.Duration = n.last.Duration
	}
	keys, coverage := n.keyView()
	if !n.keysOK {
		keys, coverage = nil, 0
	}
	early.Coverage = coverage
	early.Pass = e.withLockView(n, keys, n.locksOK)
	e.selfCounters(n, &early)
	e.ages(n, &early)
	e.publish(&early)
	return func() {
		withNew := early
		withNew.Pass = e.withLockView(n, keys, true)
		e.lockAges(n, &withNew, true)
		e.publish(&withNew)
	}
}

// latencyStage adds LATENCY HISTOGRAM to st (Redis 7+); a failure leaves
// the histograms out and is retried after its backoff.
func (e *Exporter) latencyStage(ctx context.Context, n *node, st *ServerStats, skip func(string) bool, record func(*StageError, string)) {
	if majorVersion(st.Version) < 7 || skip(string(StageLatency)) {
		return
	}
	h, se := e.readLatencyHistograms(ctx, n)
	if se != nil {
		record(se, string(StageLatency))
		return
	}
	delete(n.backoff, string(StageLatency))
	st.Histograms = h
}

// ages records when each series family's figures were taken.
func (e *Exporter) ages(n *node, s *NodeSnapshot) {
	e.lockAges(n, s, n.locksOK)
	s.ServerAsOf, s.QueuesAsOf, s.KeysAsOf = n.serverAsOf, n.queuesAsOf, time.Time{}
	if len(e.opts.Queues) == 0 {
		s.QueuesAsOf = time.Time{}
	}
	if n.done != nil {
		s.KeysAsOf = n.done.Started
	} else if n.pass != nil {
		s.KeysAsOf = n.pass.Started
	}
}

// lockAges records the lock index's state; only the lock stage's goroutine
// changes it. shown says whether s serves the lock figures shown now;
// otherwise (a failing lock stage) their time stays that of the last
// successful stage's.
func (e *Exporter) lockAges(n *node, s *NodeSnapshot, shown bool) {
	s.LocksAsOf, s.LockRepairs = n.locksAsOf, n.locks.repairs
	if shown {
		s.LocksAsOf = n.locks.viewAt
		if n.locks.view == nil {
			s.LocksAsOf = time.Time{}
		}
	}
	if s.LocksAsOf.IsZero() { // no lock figures since the index started
		s.LocksAsOf = n.locksSince
	}
	s.LockNotifications = n.feed != nil && n.locks.synced
	s.LockNotificationsRefused = n.notifyRefused
}

// serverStages reads INFO, LATENCY HISTOGRAM and the queues into s. It
// returns the error that makes the node unusable, if any.
func (e *Exporter) serverStages(ctx context.Context, n *node, s *NodeSnapshot, skip func(string) bool, record func(*StageError, string)) *StageError {
	// A reply that does not parse means a server (or proxy) the sampler does
	// not understand: nothing it says is trusted. A refused INFO (NOPERM) is
	// the operator's choice, and the other stages still run.
	if !skip(string(StageInfo)) {
		st, se := e.readInfo(ctx, n)
		switch {
		case se != nil && (se.fatal() || se.Class == ClassMalformed):
			return se
		case se != nil:
			record(se, string(StageInfo))
		default:
			delete(n.backoff, string(StageInfo))
			e.serverFigures(n, s, st)
			n.serverAsOf = e.clock.Now()
			e.latencyStage(ctx, n, st, skip, record)
		}
	}
	if len(e.opts.Queues) == 0 || skip(string(StageQueues)) {
		return nil
	}
	queues, qerrs := e.sampleQueues(ctx, n)
	for _, se := range qerrs {
		if se.fatal() {
			return se
		}
		record(se, string(StageQueues))
	}
	if len(qerrs) == 0 {
		delete(n.backoff, string(StageQueues))
		n.queuesAsOf = e.clock.Now()
	}
	s.Queues, s.NotQueues = queues, n.notQueues
	return nil
}

// withLockView adds the lock figures shown (showLocks) to the key figures
// p, unless the lock stage failed (ok false): then its series are left
// out, and only their age is exported.
func (e *Exporter) withLockView(n *node, p *Pass, ok bool) *Pass {
	x := &n.locks
	if !ok || x.view == nil {
		return withLocks(p, nil, time.Time{}, false, false)
	}
	v := withLocks(p, x.view, x.viewAt, x.viewTokens, x.viewNotified)
	v.LockPassStarted, v.LockPassEnded = x.lastStarted, x.lastEnded
	return v
}

// passes runs the lock stage and the whole-keyspace pass concurrently,
// within the sample's budget, and records their errors. It returns the
// first error that makes the node unusable.
func (e *Exporter) passes(ctx context.Context, n *node, began time.Time, s *NodeSnapshot,
	skip func(string) bool, record func(*StageError, string), locksChanged func()) *StageError {
	deadline := began.Add(e.opts.MaxDuration)
	hot := e.opts.HotKeys > 0 && s.Server != nil && containsLFU(s.Server.MaxmemoryPolicy)
	runLocks := !skip(string(StageLocks))
	readTokens := runLocks && !skip(backoffTokens)
	runKeys := !skip(string(StageScan)) && !skip(string(StageKeys))
	lockOwn, keyOwn := lookups{}, lookups{}
	var lockErrs, keyErrs []*StageError
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer recoverStage(StageLocks, &lockErrs)
		if runLocks {
			lockErrs = e.lockStage(ctx, n, deadline, readTokens, lockOwn, locksChanged)
		}
	}()
	defer func() { <-done }() // also when the keyspace pass panics: the node is left to one goroutine
	if runKeys {
		keyErrs = e.scanKeyspace(ctx, n, began, deadline, hot, keyOwn)
	}
	<-done
	n.own.merge(lockOwn)
	n.own.merge(keyOwn)
	var fatal *StageError
	tokensFailed, locksFailed := false, false
	for _, se := range append(lockErrs, keyErrs...) {
		if se.fatal() {
			fatal = cmpOr(fatal, se)
			continue
		}
		key := string(se.Stage)
		switch {
		case se.Stage == StageLocks && errors.Is(se, errTokens):
			key, tokensFailed = backoffTokens, true
		case se.Stage == StageLocks:
			locksFailed = true
		}
		record(se, key)
	}
	if fatal != nil {
		return fatal
	}
	n.locksOK = runLocks && !locksFailed
	n.keysOK = runKeys && len(keyErrs) == 0
	if runLocks && !locksFailed {
		delete(n.backoff, string(StageLocks))
		n.locksAsOf = time.Time{}
		if n.locks.view != nil {
			n.locksAsOf = n.locks.viewAt
		}
	}
	if readTokens && !tokensFailed {
		delete(n.backoff, backoffTokens)
	}
	if n.keysOK {
		delete(n.backoff, string(StageScan))
		delete(n.backoff, string(StageKeys))
	}
	return nil
}

func cmpOr(a, b *StageError) *StageError {
	if a != nil {
		return a
	}
	return b
}

// selfCounters copies the cumulative self-accounting counters into s.
func (e *Exporter) selfCounters(n *node, s *NodeSnapshot) {
	s.LastSuccess = n.lastSuccess
	s.KeysScanned, s.ScanCycles, s.Truncated, s.MissBursts = n.keysScanned, n.cycles, n.truncated, n.missBursts
	s.ErrorCounts = make(map[ErrorKey]uint64, len(n.errCounts))
	for k, v := range n.errCounts {
		s.ErrorCounts[k] = v
	}
	s.OwnHits, s.OwnMisses = n.own.total()
	s.QueueReadsSkipped = make(map[QueueRead]uint64, len(n.readsSkipped))
	for k, v := range n.readsSkipped {
		s.QueueReadsSkipped[k] = v
	}
}

// logRefusal logs, once per node, stage and command, which command the
// ACL refused: the operator can then grant exactly that.
func (e *Exporter) logRefusal(n *node, se *StageError) {
	if se.Class != ClassNoPerm {
		return
	}
	cmd := refusedCommand(se.Err)
	key := string(se.Stage) + "/" + cmd
	if n.refusals[key] {
		return
	}
	n.refusals[key] = true
	if cmd == "" {
		cmd = "(a key or channel)"
	}
	e.opts.Logger.Warn("redis refused a sampler command (ACL): that stage's series are missing until it is granted",
		"node", n.addr, "stage", string(se.Stage), "command", cmd, "err", se.Err.Error())
}

// serverFigures fills the server figures of s from INFO, with the
// samplers' lookups taken out of the keyspace hits and misses.
func (e *Exporter) serverFigures(n *node, s *NodeSnapshot, st *ServerStats) {
	s.Server = st
	s.Hits, s.Misses = n.own.correct(st)
	if e.opts.MissBurst > 0 && n.havePrev && s.Misses >= n.prevMisses+e.opts.MissBurst {
		n.missBursts++
	}
	n.prevMisses, n.havePrev = s.Misses, true
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func containsLFU(policy string) bool { return strings.HasSuffix(policy, "lfu") }

// readInfo reads INFO and resets the self-accounting when the server
// restarted (a new run_id starts its counters at zero).
func (e *Exporter) readInfo(ctx context.Context, n *node) (*ServerStats, *StageError) {
	raw, err := n.rdb.Info(ctx, "server", "clients", "memory", "stats", "replication", "cluster", "keyspace", "commandstats", "latencystats").Result()
	if err != nil {
		return nil, stageErr(StageInfo, err)
	}
	fields, err := parseInfo(raw)
	if err != nil {
		return nil, stageErr(StageInfo, err)
	}
	st, err := parseServerStats(fields)
	if err != nil {
		return nil, stageErr(StageInfo, err)
	}
	if st.RunID != n.runID {
		if n.runID != "" {
			n.resetKeyspace()
			n.havePrev = false
			// A restarted server read its configuration afresh.
			n.notifySet, n.notifyYielded = false, false
		}
		n.runID, n.own = st.RunID, lookups{}
	} else if st.flushCalls != n.flushes || st.Role != n.role {
		// FLUSHALL, FLUSHDB, SWAPDB and a full resync as a replica change
		// keys without a notification per key: the lock index starts over.
		n.resetLocks()
	}
	n.flushes, n.role = st.flushCalls, st.Role
	n.scanCost.update(st.scanUsec)
	// PEXPIRETIME (Redis 7+) does not depend on when the reply is read;
	// older servers only have PTTL. A server whose INFO is refused is
	// taken to be recent.
	n.ttlCmd = "pexpiretime"
	if v := majorVersion(st.Version); v > 0 && v < 7 {
		n.ttlCmd = "pttl"
	}
	n.dbKeys, n.dbKnown = dbKeys(fields, e.opts.Target.DB)
	return st, nil
}

// dbKeys reads "db0:keys=12,expires=3,avg_ttl=0" of INFO keyspace; a
// database without keys has no line.
func dbKeys(fields map[string]string, db int) (uint64, bool) {
	if _, ok := fields["redis_version"]; !ok {
		return 0, false
	}
	line, ok := fields["db"+strconv.Itoa(db)]
	if !ok {
		return 0, true
	}
	kv, err := parseKV(line)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(kv["keys"], 10, 64)
	return v, err == nil
}

// readTTL queues the node's TTL read for key on pipe.
func (n *node) readTTL(ctx context.Context, pipe redis.Pipeliner, key string) *redis.Cmd {
	if n.ttlCmd == "pexpiretime" {
		return pipe.Do(ctx, "pexpiretime", key)
	}
	return pipe.Do(ctx, "pttl", key)
}

// ttlOf turns a readTTL reply into the remaining TTL at now: -1 no expiry,
// -2 no such key.
func (n *node) ttlOf(c *redis.Cmd, now time.Time) (time.Duration, error) {
	v, err := c.Int64()
	if err != nil {
		return 0, err
	}
	switch {
	case v < 0:
		return time.Duration(v), nil
	case n.ttlCmd == "pexpiretime":
		return max(time.UnixMilli(v).Sub(now), 0), nil
	}
	return time.Duration(v) * time.Millisecond, nil
}

// scanKeyspace continues the whole-keyspace pass within the sample's key and
// time budget. At most one pass completes per sample, so a small keyspace is
// not walked again and again within one sample.
func (e *Exporter) scanKeyspace(ctx context.Context, n *node, began, deadline time.Time, hot bool, own lookups) []*StageError {
	if n.pass == nil {
		n.pass = newPass(e.clock.Now())
		n.passSeq++
		n.hot = hotKeys{k: e.opts.HotKeys}
		n.keyScan.start()
	}
	scanned, paced := 0, began
	for {
		if scanned >= e.opts.MaxKeys || e.pacer.Now().After(deadline) {
			n.truncated++
			return nil
		}
		keys, cursor, err := n.rdb.Scan(ctx, n.cursor, "", int64(e.opts.ScanCount)).Result()
		if err == nil {
			err = n.keyScan.next(cursor, scanBudget(n, e.opts.ScanCount))
		}
		if err != nil {
			n.cursor, n.pass = 0, nil
			return []*StageError{stageErr(StageScan, err)}
		}
		n.scanCost.visited(e.opts.ScanCount)
		for start := 0; start < len(keys); start += e.opts.Batch {
			batch := keys[start:min(start+e.opts.Batch, len(keys))]
			if se := e.readKeys(ctx, n, batch, hot, own); se != nil {
				n.cursor, n.pass = 0, nil
				return []*StageError{se}
			}
			if err := e.pace(ctx, &paced, scanned+start+len(batch), e.opts.KeysPerSecond); err != nil {
				n.cursor, n.pass = 0, nil
				return []*StageError{stageErr(StageKeys, err)}
			}
		}
		scanned += len(keys)
		n.keysScanned += uint64(len(keys))
		n.cursor = cursor
		if cursor == 0 {
			e.completePass(n)
			return nil
		}
	}
}

// maxPaceLag is how far behind its schedule a paced pass may fall before
// the schedule moves: after a stall (the process starved of CPU or stopped,
// a slow reply) the pass goes on at its rate instead of catching up at full
// speed, which would take the server for itself.
const maxPaceLag = 50 * time.Millisecond

// pace sleeps on the pacing clock so that the n units of work done since
// *began stay within perSecond (≤ 0: unpaced). It sleeps only once the work
// is at least e.minSleep ahead of schedule: the schedule is absolute, so the
// rate is the same, with fewer timer wake-ups (a sleep per SCAN call cost
// the exporter CPU on the cores Redis and its clients share). Work more
// than maxPaceLag behind schedule moves *began later instead.
func (e *Exporter) pace(ctx context.Context, began *time.Time, n int, perSecond float64) error {
	if perSecond <= 0 {
		return nil
	}
	due := began.Add(time.Duration(float64(n) / perSecond * float64(time.Second)))
	wait := due.Sub(e.pacer.Now())
	if wait < -maxPaceLag {
		*began = began.Add(-wait - maxPaceLag)
		return nil
	}
	if wait <= 0 || wait < e.minSleep {
		return nil
	}
	return ctxsleep.On(ctx, e.pacer, wait)
}

func (e *Exporter) completePass(n *node) {
	n.pass.finish(e.clock.Now())
	n.pass.HotKeys = n.hot.sorted()
	n.done, n.pass = n.pass, nil
	n.cycles++
}

// readKeys reads one batch of keys in a single pipeline: the TTL of every
// key, OBJECT FREQ when hot keys are tracked, and MEMORY USAGE of one key in
// MemorySample. Every read that reaches a key is counted as the sampler's
// own hit or miss.
func (e *Exporter) readKeys(ctx context.Context, n *node, keys []string, hot bool, own lookups) *StageError {
	pipe := n.rdb.Pipeline()
	ttls := make([]*redis.Cmd, len(keys))
	freqs := make([]*redis.IntCmd, len(keys))
	mems := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		ttls[i] = n.readTTL(ctx, pipe, k)
		if hot {
			freqs[i] = pipe.ObjectFreq(ctx, k)
		}
		if e.opts.MemorySample > 0 && !n.memoryRefused {
			if n.memoryTurn++; n.memoryTurn%uint64(e.opts.MemorySample) == 0 {
				mems[i] = pipe.MemoryUsage(ctx, k, memoryUsageSamples)
			}
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	now := e.clock.Now()
	for i, k := range keys {
		ttl, err := n.ttlOf(ttls[i], now)
		if err != nil {
			return stageErr(StageKeys, err)
		}
		own.count(n.ttlCmd, ttl != -2)
		if freqs[i] != nil {
			own.countReply("object|freq", freqs[i].Err())
		}
		if ttl == -2 { // gone between SCAN and the read
			continue
		}
		group := e.groups.Classify(k)
		g := n.pass.addKey(group, ttl, now)
		if mems[i] != nil {
			if b, err := mems[i].Result(); err == nil {
				g.memorySum += uint64(b)
				g.MemorySampled++
			} else if classify(err) == ClassNoPerm { // the keys are still sampled, without their memory
				n.memoryRefused = true
				e.opts.Logger.Warn("redis refused MEMORY USAGE (ACL): no memory per key group until it is granted",
					"node", n.addr, "err", err.Error())
			}
		}
		if hot && freqs[i] != nil {
			if f, err := freqs[i].Result(); err == nil {
				n.hot.offer(HotKey{Key: k, Group: group, Freq: f, NoTTL: ttl < 0})
			}
		}
	}
	return nil
}
