package sampler

import (
	"context"
	"errors"
	"time"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// node samples one Redis node. Each stage is a value of its own, with its
// state, pacing and backoff; the node runs them in order (connect, INFO
// and latency, queues), then the lock stage and the whole-keyspace pass
// side by side, and assembles what they found into a snapshot. Only the
// goroutine sampling the node touches it (samples are serialised); within
// a sample the two passes run concurrently on their own stages.
type node struct {
	env   *env
	board *board
	// connect is the backoff of a node that could not be sampled.
	connect backoff
	errs    errorLog
	// own are this sampler's key lookups since the server (run_id)
	// started, taken out of the server's hit and miss counts.
	own lookups

	info    infoStage
	latency latencyStage
	queues  queueStage
	locks   lockStage
	keys    keyStage

	lastSuccess time.Time
	last        *snapshot.Node
}

func newNode(cfg *Config, addr string, b *board) *node {
	v := &env{cfg: cfg, addr: addr, rdb: cfg.client(addr), facts: facts{ttlCmd: "pexpiretime"}}
	return &node{env: v, board: b, own: lookups{}, errs: newErrorLog(),
		info: infoStage{env: v}, queues: newQueueStage(v), locks: newLockStage(v), keys: keyStage{env: v}}
}

// sample runs the stages of one sample of the node.
func (n *node) sample(ctx context.Context) *snapshot.Node {
	if n.last != nil && !n.last.Up && !n.connect.due(n.env.now()) {
		return n.last // the node failed recently: do not dial it again yet
	}
	r := &sampleRun{ctx: ctx, n: n, s: &snapshot.Node{Node: n.env.addr}, began: n.env.cfg.Pacer.Now()}
	n.locks.begin()
	if fatal := r.ping(); fatal != nil {
		return r.finish(fatal)
	}
	if fatal := r.server(); fatal != nil {
		return r.finish(fatal)
	}
	early := r.publishEarly()
	if fatal := r.passes(early); fatal != nil {
		return r.finish(fatal)
	}
	keys, coverage := n.keys.view()
	r.s.Pass, r.s.Coverage = n.locks.view(keys, n.locks.ok), coverage
	return r.finish(nil)
}

// close puts back the operator's notify-keyspace-events where this sampler
// changed it, then ends the node's subscription and closes its
// connections.
func (n *node) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), feedWait)
	defer cancel()
	n.locks.restoreNotifications(ctx)
	n.locks.stopFeed()
	return n.env.rdb.Close()
}

// resetKeyspace forgets both passes: after a failure or a server restart
// they no longer describe the server.
func (n *node) resetKeyspace() {
	n.keys.reset()
	n.locks.reset()
}

// sampleRun is one sample of a node in progress: the snapshot it fills in,
// and when it began.
type sampleRun struct {
	ctx   context.Context
	n     *node
	s     *snapshot.Node
	began time.Time
}

// failed notes a stage's failure in the snapshot and the node's counters,
// and starts or extends the stage's backoff b.
func (r *sampleRun) failed(se *StageError, b *backoff) {
	r.s.Errors = append(r.s.Errors, se)
	r.n.errs.add(r.n.env, se)
	b.fail(r.n.env.now(), r.n.env.cfg.Interval, se)
}

// skip reports whether the stage of backoff b is still in its backoff; a
// skipped stage reports its last error.
func (r *sampleRun) skip(b *backoff) bool {
	if b.due(r.n.env.now()) {
		return false
	}
	if b.err != nil {
		r.s.Errors = append(r.s.Errors, b.err)
	}
	return true
}

// ping checks that the node answers and accepts the credentials. It
// returns the error that makes the node unusable, if any; a refused PING
// (ACL) or a Cluster that is down are noted, and the stages go on.
func (r *sampleRun) ping() *StageError {
	v := r.n.env
	err := v.rdb.Ping(r.ctx).Err()
	if err == nil {
		return nil
	}
	se := stageErr(StageConnect, v.cfg.Conn.plaintextHint(r.ctx, v.addr, err))
	if se.Fatal() || se.Class == ClassOther || se.Class == ClassMalformed {
		return se
	}
	r.failed(se, &r.n.connect)
	return nil
}

// server runs the stages of the server's own figures: INFO, LATENCY
// HISTOGRAM and the queues. It returns the error that makes the node
// unusable, if any.
func (r *sampleRun) server() *StageError {
	n := r.n
	// A reply that does not parse means a server (or proxy) the sampler does
	// not understand: nothing it says is trusted. A refused INFO (NOPERM) is
	// the operator's choice, and the other stages still run.
	if !r.skip(&n.info.retry) {
		rd, se := n.info.read(r.ctx)
		switch {
		case se != nil && (se.Fatal() || se.Class == ClassMalformed):
			return se
		case se != nil:
			r.failed(se, &n.info.retry)
		default:
			n.info.retry.reset()
			n.serverChanged(rd)
			n.info.figures(r.s, rd, n.own)
			n.latency.run(r, rd.stats)
		}
	}
	return n.queues.run(r)
}

// serverChanged forgets what no longer describes the server: everything
// after a restart (a new run_id, whose counters start at zero), the lock
// index after FLUSHALL, FLUSHDB, SWAPDB or a full resync as a replica,
// which change keys without a notification per key.
func (n *node) serverChanged(rd *reading) {
	switch {
	case rd.restarted:
		n.resetKeyspace()
		n.locks.notify.serverRestarted()
		fallthrough
	case rd.newRun:
		n.own = lookups{}
	case rd.keysRewritten:
		n.locks.reset()
	}
}

// finish completes the snapshot, down when fatal is set, and keeps it as
// the node's last. A sample cut short because its context was cancelled
// (the sampler is stopping) failed at nothing: it is neither recorded nor
// logged, and the node's last snapshot stays.
func (r *sampleRun) finish(fatal *StageError) *snapshot.Node {
	n, s := r.n, r.s
	if fatal != nil && errors.Is(r.ctx.Err(), context.Canceled) {
		if n.last != nil {
			return n.last
		}
		return &snapshot.Node{Node: n.env.addr, Err: ErrNotSampled}
	}
	s.Time, s.Duration = n.env.now(), n.env.cfg.Pacer.Since(r.began)
	if fatal != nil {
		r.failed(fatal, &n.connect)
		n.env.cfg.Logger.Warn("redis sample failed", "node", n.env.addr, "err", fatal.Error())
		if !answeredLate(fatal) {
			n.resetKeyspace()
		}
		n.info.havePrev = false
		s.Up, s.Err, s.Server, s.Pass, s.Queues, s.Coverage = false, fatal, nil, nil, nil, 0
		s.Hits, s.Misses = 0, 0
	} else {
		s.Up = true
		n.lastSuccess = s.Time
		n.connect.reset()
		n.ages(s)
	}
	n.selfCounters(s)
	n.last = s
	return s
}

// ages records when each series family's figures were taken.
func (n *node) ages(s *snapshot.Node) {
	n.locks.ages(s, n.locks.ok)
	s.ServerAsOf, s.QueuesAsOf, s.KeysAsOf = n.info.asOf, n.queues.asOf, n.keys.asOf()
}

// selfCounters copies the cumulative self-accounting counters into s.
func (n *node) selfCounters(s *snapshot.Node) {
	s.LastSuccess = n.lastSuccess
	s.KeysScanned, s.ScanCycles, s.Truncated = n.keys.scanned, n.keys.cycles, n.keys.truncated
	s.MissBursts = n.info.missBursts
	s.ErrorCounts = make(map[snapshot.ErrorKey]uint64, len(n.errs.counts))
	for k, v := range n.errs.counts {
		s.ErrorCounts[k] = v
	}
	s.OwnHits, s.OwnMisses = n.own.total()
	s.QueueReadsSkipped = make(map[snapshot.QueueRead]uint64, len(n.queues.readsSkipped))
	for k, v := range n.queues.readsSkipped {
		s.QueueReadsSkipped[k] = v
	}
}

// errorLog counts a node's stage failures (sample_errors_total) and logs,
// once per stage and command, what the server's ACL refused: the operator
// can then grant exactly that.
type errorLog struct {
	counts   map[snapshot.ErrorKey]uint64
	refusals map[string]bool // stage/command refusals already logged
}

func newErrorLog() errorLog {
	return errorLog{counts: map[snapshot.ErrorKey]uint64{}, refusals: map[string]bool{}}
}

func (l *errorLog) add(v *env, se *StageError) {
	l.counts[snapshot.ErrorKey{Stage: se.Stage, Class: se.Class}]++
	if se.Class != ClassNoPerm {
		return
	}
	cmd := refusedCommand(se.Err)
	key := string(se.Stage) + "/" + cmd
	if l.refusals[key] {
		return
	}
	l.refusals[key] = true
	if cmd == "" {
		cmd = "(a key or channel)"
	}
	v.cfg.Logger.Warn("redis refused a sampler command (ACL): that stage's series are missing until it is granted",
		"node", v.addr, "stage", string(se.Stage), "command", cmd, "err", se.Err.Error())
}
