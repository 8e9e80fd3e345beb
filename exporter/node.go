package exporter

import (
	"context"
	"errors"
	"hash/maphash"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/ctxsleep"
)

// ErrorKey identifies a counter of sample_errors_total.
type ErrorKey struct{ Stage, Class string }

// NodeSnapshot is the published result of one node's last sample.
type NodeSnapshot struct {
	Node string
	// Up is false when the node could not be reached or refused the
	// sampler; then only the self-metrics below are set, never an older
	// value presented as fresh.
	Up  bool
	Err error
	// Errors lists this sample's failed stages (the others were sampled).
	Errors []*StageError

	Time, LastSuccess time.Time
	Duration          time.Duration

	// Server is nil when INFO could not be read.
	Server *ServerStats
	// Hits and Misses are the server's keyspace hits and misses less the
	// sampler's own lookups since the server started.
	Hits, Misses uint64
	// Pass is the last complete SCAN pass, nil until one completes.
	Pass   *Pass
	Queues []QueueStats
	// NotQueues maps each configured queue this node holds under a type
	// that is not a queue ("string", "hash", …) or not at all ("none") to
	// that type. Keys another Cluster master owns are not listed.
	NotQueues map[string]string

	// Cumulative self-accounting counters.
	KeysScanned, ScanCycles, Truncated, MissBursts uint64
	ErrorCounts                                    map[ErrorKey]uint64
	// OwnHits and OwnMisses are the sampler's own key lookups since the
	// server (run_id) started.
	OwnHits, OwnMisses uint64
}

// tokenSeen remembers a lock's owner token as a hash, never the token.
type tokenSeen struct {
	hash  uint64
	since time.Time
	pass  uint64
	// ttl is the lock's remaining TTL when this token was first seen
	// (negative: none); held longer than that, the owner extended it.
	ttl time.Duration
}

// node is the sampler state of one Redis node. Only the goroutine sampling
// the node touches it (Sample is serialised).
type node struct {
	addr string
	rdb  *redis.Client

	cursor  uint64
	pass    *Pass // being accumulated
	done    *Pass // last complete
	passSeq uint64
	tokens  map[string]tokenSeen
	hot     hotKeys
	// queueTypes remembers each queue's type for when it is emptied.
	queueTypes map[string]string
	// notQueues are this sample's configured queues that the node holds
	// under another type or not at all; notQueuesLogged what was logged.
	notQueues, notQueuesLogged map[string]string

	runID              string
	ownHits, ownMisses uint64
	ownGets            uint64 // GETs of lock keys, in commandstats' get calls
	prevMisses         uint64
	havePrev           bool
	lastSuccess        time.Time

	keysScanned, cycles, truncated, missBursts uint64
	errCounts                                  map[ErrorKey]uint64
}

func newNode(addr string, rdb *redis.Client) *node {
	return &node{addr: addr, rdb: rdb, tokens: map[string]tokenSeen{}, queueTypes: map[string]string{}, notQueuesLogged: map[string]string{}, errCounts: map[ErrorKey]uint64{}}
}

// resetKeyspace forgets the partial and the last complete pass: after a
// failure or a server restart they no longer describe the server.
func (n *node) resetKeyspace() {
	n.cursor, n.pass, n.done = 0, nil, nil
	clear(n.tokens)
}

// sampleNode runs the stages of one sample: connect, INFO, queues, keyspace.
func (e *Exporter) sampleNode(ctx context.Context, n *node) *NodeSnapshot {
	began := time.Now()
	s := &NodeSnapshot{Node: n.addr}
	record := func(se *StageError) {
		s.Errors = append(s.Errors, se)
		n.errCounts[ErrorKey{se.Stage, se.Class}]++
	}
	finish := func(fatal *StageError) *NodeSnapshot {
		s.Time, s.Duration = e.opts.Now(), time.Since(began)
		if fatal != nil {
			record(fatal)
			n.resetKeyspace()
			n.havePrev = false
			s.Up, s.Err, s.Server, s.Pass, s.Queues = false, fatal, nil, nil, nil
			s.Hits, s.Misses = 0, 0
		} else {
			s.Up = true
			n.lastSuccess = s.Time
		}
		s.LastSuccess = n.lastSuccess
		s.KeysScanned, s.ScanCycles, s.Truncated, s.MissBursts = n.keysScanned, n.cycles, n.truncated, n.missBursts
		s.ErrorCounts = make(map[ErrorKey]uint64, len(n.errCounts))
		for k, v := range n.errCounts {
			s.ErrorCounts[k] = v
		}
		s.OwnHits, s.OwnMisses = n.ownHits, n.ownMisses
		return s
	}

	if err := n.rdb.Ping(ctx).Err(); err != nil {
		if se := stageErr(stageConnect, err); se.fatal() || se.Class == classOther {
			return finish(se)
		} else {
			record(se)
		}
	}
	// A reply that does not parse means a server (or proxy) the sampler does
	// not understand: nothing it says is trusted. A refused INFO (NOPERM) is
	// the operator's choice, and the other stages still run.
	st, se := e.readInfo(ctx, n)
	if se != nil && (se.fatal() || se.Class == classMalformed) {
		return finish(se)
	} else if se != nil {
		record(se)
	}
	if st != nil {
		s.Server = st
		s.Hits, s.Misses = sub(st.KeyspaceHits, n.ownHits), sub(st.KeyspaceMisses, n.ownMisses)
		if get, ok := st.Commands["get"]; ok {
			get.Calls = sub(get.Calls, n.ownGets)
			st.Commands["get"] = get
		}
		if e.opts.MissBurst > 0 && n.havePrev && s.Misses >= n.prevMisses+e.opts.MissBurst {
			n.missBursts++
		}
		n.prevMisses, n.havePrev = s.Misses, true
	}
	queues, qerrs := e.sampleQueues(ctx, n)
	for _, se := range qerrs {
		if se.fatal() {
			return finish(se)
		}
		record(se)
	}
	s.Queues, s.NotQueues = queues, n.notQueues
	hot := e.opts.HotKeys > 0 && st != nil && containsLFU(st.MaxmemoryPolicy)
	for _, se := range e.scanKeyspace(ctx, n, began, hot) {
		if se.fatal() {
			return finish(se)
		}
		record(se)
	}
	s.Pass = n.done
	return finish(nil)
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func containsLFU(policy string) bool { return len(policy) >= 3 && policy[len(policy)-3:] == "lfu" }

// readInfo reads INFO and resets the self-accounting when the server
// restarted (a new run_id starts its counters at zero).
func (e *Exporter) readInfo(ctx context.Context, n *node) (*ServerStats, *StageError) {
	raw, err := n.rdb.Info(ctx, "server", "clients", "memory", "stats", "cluster", "commandstats", "latencystats").Result()
	if err != nil {
		return nil, stageErr(stageInfo, err)
	}
	fields, err := parseInfo(raw)
	if err != nil {
		return nil, stageErr(stageInfo, err)
	}
	st, err := parseServerStats(fields)
	if err != nil {
		return nil, stageErr(stageInfo, err)
	}
	if st.RunID != n.runID {
		if n.runID != "" {
			n.resetKeyspace()
			n.havePrev = false
		}
		n.runID, n.ownHits, n.ownMisses, n.ownGets = st.RunID, 0, 0, 0
	}
	return st, nil
}

// scanKeyspace continues the SCAN pass within the sample's key and time
// budget. At most one pass completes per sample, so a small keyspace is not
// walked again and again within one sample.
func (e *Exporter) scanKeyspace(ctx context.Context, n *node, began time.Time, hot bool) []*StageError {
	if n.pass == nil {
		n.pass = newPass(e.opts.Now())
		n.passSeq++
		n.hot = hotKeys{k: e.opts.HotKeys}
	}
	deadline := began.Add(e.opts.MaxDuration)
	scanned := 0
	var errs []*StageError
	for {
		if scanned >= e.opts.MaxKeys || time.Now().After(deadline) {
			n.truncated++
			return errs
		}
		keys, cursor, err := n.rdb.Scan(ctx, n.cursor, "", int64(e.opts.ScanCount)).Result()
		if err != nil {
			n.resetKeyspace()
			return append(errs, stageErr(stageScan, err))
		}
		for start := 0; start < len(keys); start += e.opts.Batch {
			batch := keys[start:min(start+e.opts.Batch, len(keys))]
			if se := e.readKeys(ctx, n, batch, hot); se != nil {
				if se.Stage == stageLocks && !se.fatal() { // keep sampling TTLs without tokens
					errs = append(errs, se)
					continue
				}
				n.resetKeyspace()
				return append(errs, se)
			}
			if err := e.pace(ctx, began, scanned+start+len(batch)); err != nil {
				n.resetKeyspace()
				return append(errs, stageErr(stageKeys, err))
			}
		}
		scanned += len(keys)
		n.keysScanned += uint64(len(keys))
		n.cursor = cursor
		if cursor == 0 {
			e.completePass(n)
			return errs
		}
	}
}

// pace sleeps so that the keys read so far in this sample stay within
// KeysPerSecond.
func (e *Exporter) pace(ctx context.Context, began time.Time, keys int) error {
	if e.opts.KeysPerSecond <= 0 {
		return nil
	}
	due := began.Add(time.Duration(float64(keys) / e.opts.KeysPerSecond * float64(time.Second)))
	wait := time.Until(due)
	if wait <= 0 {
		return nil
	}
	return ctxsleep.Sleep(ctx, wait)
}

func (e *Exporter) completePass(n *node) {
	now := e.opts.Now()
	n.pass.finish(now)
	n.pass.HotKeys = n.hot.sorted()
	for k, t := range n.tokens { // locks gone since the last pass
		if t.pass != n.passSeq {
			delete(n.tokens, k)
		}
	}
	n.done, n.pass = n.pass, nil
	n.cycles++
}

// readKeys reads one batch of keys in a single pipeline: PTTL for every key,
// GET for lock keys (owner tokens), OBJECT FREQ when hot keys are tracked.
// Every read that reaches a key is counted as the sampler's own hit or miss.
func (e *Exporter) readKeys(ctx context.Context, n *node, keys []string, hot bool) *StageError {
	pipe := n.rdb.Pipeline()
	ttls := make([]*redis.DurationCmd, len(keys))
	gets := make([]*redis.StringCmd, len(keys))
	freqs := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		ttls[i] = pipe.PTTL(ctx, k)
		if n.pass.TokensRead && e.isLock(k) {
			gets[i] = pipe.Get(ctx, k)
		}
		if hot {
			freqs[i] = pipe.ObjectFreq(ctx, k)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	for _, g := range gets {
		if g != nil && (g.Err() == nil || errors.Is(g.Err(), redis.Nil) || classify(g.Err()) == classOther) {
			n.ownGets++ // the server ran it (NOPERM and lost connections do not count)
		}
	}
	now := e.opts.Now()
	var lockErr *StageError
	for i, k := range keys {
		ttl, err := ttls[i].Result()
		if err != nil {
			return stageErr(stageKeys, err)
		}
		if ttl == -2 { // gone between SCAN and PTTL
			n.ownMisses++
			if gets[i] != nil {
				e.countReadErr(n, gets[i].Err())
			}
			if freqs[i] != nil {
				e.countReadErr(n, freqs[i].Err())
			}
			continue
		}
		n.ownHits++
		group := e.groups.Classify(k)
		g := n.pass.addKey(group, ttl, now)
		if hot && freqs[i] != nil {
			if f, err := freqs[i].Result(); err == nil {
				n.ownHits++
				n.hot.offer(HotKey{Key: k, Group: group, Freq: f, NoTTL: ttl < 0})
			} else {
				e.countReadErr(n, err)
			}
		}
		if !e.isLock(k) {
			continue
		}
		longHeld := false
		if gets[i] != nil {
			var se *StageError
			longHeld, se = e.trackToken(n, k, ttl, gets[i], now)
			if se != nil {
				if se.fatal() {
					return se
				}
				lockErr = se
			}
		}
		g.addLock(ttl, longHeld)
		if t, ok := n.tokens[k]; longHeld && ttl >= 0 && ok && (t.ttl < 0 || now.Sub(t.since) > t.ttl) {
			g.LocksLongHeldPastTTL++
		}
	}
	if lockErr != nil {
		n.pass.TokensRead = false
		return lockErr
	}
	return nil
}

// trackToken compares a lock's owner token (as a hash) with the one seen in
// earlier passes and reports whether it has been held past LongHeld.
func (e *Exporter) trackToken(n *node, key string, ttl time.Duration, get *redis.StringCmd, now time.Time) (bool, *StageError) {
	val, err := get.Result()
	switch {
	case errors.Is(err, redis.Nil):
		n.ownMisses++
		return false, nil
	case err != nil:
		se := stageErr(stageLocks, err)
		if se.Class == classNoPerm || se.fatal() {
			return false, se
		}
		n.ownHits++ // WRONGTYPE: the key was looked up; a non-string lock has no token
		return false, nil
	}
	n.ownHits++
	h := maphash.String(e.seed, val)
	prev, seen := n.tokens[key]
	if !seen && len(n.tokens) >= maxTrackedLocks {
		return false, nil
	}
	if !seen || prev.hash != h {
		prev = tokenSeen{hash: h, since: now, ttl: ttl}
	}
	prev.pass = n.passSeq
	n.tokens[key] = prev
	return now.Sub(prev.since) >= e.opts.LongHeld, nil
}

// countReadErr counts the lookup behind a key read's reply: a value or a
// WRONGTYPE error found the key, nil did not, NOPERM never looked.
func (e *Exporter) countReadErr(n *node, err error) {
	switch {
	case err == nil:
		n.ownHits++
	case errors.Is(err, redis.Nil):
		n.ownMisses++
	case classify(err) == classOther: // e.g. WRONGTYPE: looked up, found
		n.ownHits++
	}
}
