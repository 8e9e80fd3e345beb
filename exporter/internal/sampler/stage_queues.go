package sampler

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// Queue reads whose reply size the data decides.
const (
	readFirstEntry  = "first_entry"
	readGroups      = "groups"
	readFirstMember = "first_member"
)

// queueStage reads the configured queue keys that live on the node. Reads
// whose reply the data sizes are suspended with a backoff of their own
// once a reply exceeds MaxQueueReply.
type queueStage struct {
	env   *env
	retry backoff
	// own counts the key lookups of a run, added to the node's after it.
	own lookups
	// types remembers each queue's type for when it is emptied.
	types map[string]string
	// reads are the backoffs of costly queue reads; readsSkipped counts
	// the samples that left a read out; groupsDropped is each stream's
	// last GroupsDropped.
	reads         map[snapshot.QueueRead]*readCap
	readsSkipped  map[snapshot.QueueRead]uint64
	groupsDropped map[string]uint64
	// notQueues are this sample's configured queues that the node holds
	// under another type or not at all; notQueuesLogged what was logged.
	notQueues, notQueuesLogged map[string]string
	// asOf is when the queues were last read whole.
	asOf time.Time
}

func newQueueStage(v *env) queueStage {
	return queueStage{env: v, types: map[string]string{}, reads: map[snapshot.QueueRead]*readCap{},
		notQueuesLogged: map[string]string{}}
}

// run reads the queues into the sample, unless none are configured or the
// stage is in its backoff. It returns the error that makes the node
// unusable, if any.
func (q *queueStage) run(r *sampleRun) *StageError {
	if len(q.env.cfg.Queues) == 0 || r.skip(&q.retry) {
		return nil
	}
	q.own = lookups{}
	queues, errs := q.sample(r.ctx)
	r.n.own.merge(q.own)
	for _, se := range errs {
		if se.Fatal() {
			return se
		}
		r.failed(se, &q.retry)
	}
	if len(errs) == 0 {
		q.retry.reset()
		q.asOf = q.env.now()
	}
	r.s.Queues, r.s.NotQueues = queues, q.notQueues
	return nil
}

// readCap is the backoff of a queue read whose last reply exceeded
// Config.MaxQueueReply: it is left out until then (the interval, doubling
// up to maxReadCapWait intervals), so that such a read costs the server at
// most one reply per backoff, not one per sample.
type readCap struct {
	until time.Time
	wait  time.Duration
}

// maxReadCapWait bounds a suspended read's backoff, in intervals.
const maxReadCapWait = 16

// allowRead reports whether read may be sent this sample, counting the
// samples that leave it out.
func (q *queueStage) allowRead(queue, read string) bool {
	c := q.reads[snapshot.QueueRead{Queue: queue, Read: read}]
	if c == nil || !q.env.now().Before(c.until) {
		return true
	}
	if q.readsSkipped == nil {
		q.readsSkipped = map[snapshot.QueueRead]uint64{}
	}
	q.readsSkipped[snapshot.QueueRead{Queue: queue, Read: read}]++
	return false
}

// readCost records the size of a read's reply: above MaxQueueReply (or
// -1: refused unread, larger) the read is suspended (logged when it
// starts), at or below it any backoff ends.
func (q *queueStage) readCost(queue, read string, bytes int) {
	cfg := q.env.cfg
	key := snapshot.QueueRead{Queue: queue, Read: read}
	if bytes >= 0 && bytes <= cfg.MaxQueueReply {
		delete(q.reads, key)
		return
	}
	c := q.reads[key]
	if c == nil {
		c = &readCap{wait: cfg.Interval}
		q.reads[key] = c
		size := any(bytes)
		if bytes < 0 {
			size = "more (refused unread)"
		}
		cfg.Logger.Warn("a queue read returned more than the reply cap: it is left out, and tried again less and less often",
			"node", q.env.addr, "queue", queue, "read", read, "bytes", size, "cap", cfg.MaxQueueReply)
	} else {
		c.wait = min(2*c.wait, maxReadCapWait*cfg.Interval)
	}
	c.until = q.env.now().Add(c.wait)
}

// sample reports each configured queue that lives on the node. In a
// Cluster a key owned by another master answers MOVED and is skipped here.
func (q *queueStage) sample(ctx context.Context) ([]snapshot.QueueStats, []*StageError) {
	var out []snapshot.QueueStats
	var errs []*StageError
	q.notQueues = nil
	for _, key := range q.env.cfg.Queues {
		qs, ok, err := q.sampleBounded(ctx, key)
		if err != nil {
			se := stageErr(StageQueues, err)
			errs = append(errs, se)
			if se.Fatal() {
				return nil, errs
			}
			continue
		}
		if ok {
			out = append(out, qs)
			delete(q.notQueuesLogged, key)
		} else if qs.Queue != "" {
			q.notAQueue(qs)
		}
	}
	return out, errs
}

// notAQueue records a configured queue the node holds under another type
// or not at all, and logs it once per node and type: a mistyped --queue
// must not go unnoticed.
func (q *queueStage) notAQueue(qs snapshot.QueueStats) {
	typ := qs.Type
	if typ == "" {
		typ = "none"
	}
	if q.notQueues == nil {
		q.notQueues = map[string]string{}
	}
	q.notQueues[qs.Queue] = typ
	if q.notQueuesLogged[qs.Queue] == typ {
		return
	}
	q.notQueuesLogged[qs.Queue] = typ
	log := q.env.cfg.Logger
	if typ == "none" {
		log.Warn("configured queue does not exist (an emptied list or sorted set is deleted; reported again once it has entries)",
			"node", q.env.addr, "queue", qs.Queue)
		return
	}
	log.Warn("configured queue is not a list, stream or sorted set; not reported", "node", q.env.addr, "queue", qs.Queue, "type", typ)
}

// queueReads are the queue reads each guarded reply class answers.
var queueReads = map[replyClass]string{replyXRange: readFirstEntry, replyZRange: readFirstMember}

// sampleQueueBounded samples a queue. A read of its first entry whose
// reply declared more than MaxQueueReply was refused unread (the
// connection's guard): it is left out for a backoff, as one found too
// large once read, and the queue is sampled again without it.
func (q *queueStage) sampleBounded(ctx context.Context, key string) (snapshot.QueueStats, bool, error) {
	for range len(queueReads) {
		qs, ok, err := q.sampleQueue(ctx, key)
		class, refused := refusedClass(err)
		read, isQueueRead := queueReads[class]
		if !refused || !isQueueRead {
			return qs, ok, err
		}
		q.readCost(key, read, -1)
	}
	return q.sampleQueue(ctx, key)
}

func (q *queueStage) sampleQueue(ctx context.Context, key string) (snapshot.QueueStats, bool, error) {
	rdb := q.env.rdb
	typ, err := rdb.Type(ctx, key).Result()
	if isMoved(err) {
		return snapshot.QueueStats{}, false, nil
	}
	if err != nil {
		return snapshot.QueueStats{}, false, err
	}
	qs := snapshot.QueueStats{Queue: key, Type: typ}
	if typ == "none" { // an emptied list or sorted set is deleted: length 0
		q.own.count("type", false)
		qs.Type = q.types[key]
		return qs, qs.Type != "", nil
	}
	q.own.count("type", true)
	now := q.env.now()
	switch typ {
	case "list":
		l, err := rdb.LLen(ctx, key).Result()
		if err != nil {
			return qs, false, err
		}
		q.own.count("llen", true)
		qs.Length = uint64(l)
	case "zset":
		err = q.sampleZSet(ctx, &qs, now)
	case "stream":
		err = q.sampleStream(ctx, &qs, now)
	default:
		return qs, false, nil // not a queue type: nothing to report
	}
	if err == nil {
		q.types[key] = typ
	}
	return qs, err == nil, err
}

// sampleZSet reads a delayed-job set's size and how many jobs are overdue
// (ZCOUNT: scores read as Unix seconds, or milliseconds above 1e11); only
// when some are does it read the earliest member, whose size the data
// decides (capped by MaxQueueReply).
func (q *queueStage) sampleZSet(ctx context.Context, qs *snapshot.QueueStats, now time.Time) error {
	pipe := q.env.rdb.Pipeline()
	card := pipe.ZCard(ctx, qs.Queue)
	dueSec := pipe.ZCount(ctx, qs.Queue, "-inf", strconv.FormatInt(now.Unix(), 10))
	dueMs := pipe.ZCount(ctx, qs.Queue, "(100000000000", strconv.FormatInt(now.UnixMilli(), 10))
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	q.own.count("zcard", true)
	q.own.count("zcount", true)
	q.own.count("zcount", true)
	qs.Length = uint64(card.Val())
	if dueSec.Val()+dueMs.Val() == 0 {
		qs.HasOldest = true // nothing overdue
		return nil
	}
	if !q.allowRead(qs.Queue, readFirstMember) {
		return nil
	}
	first, err := q.env.rdb.ZRangeWithScores(ctx, qs.Queue, 0, 0).Result()
	if err != nil {
		return err
	}
	q.own.count("zrange", true)
	qs.HasOldest = true
	size := 0
	if len(first) == 1 {
		size = len(fmt.Sprint(first[0].Member)) + 24
		if overdue := now.Sub(scoreTime(first[0].Score)); overdue > 0 {
			qs.OldestAge = overdue
		}
	}
	q.readCost(qs.Queue, readFirstMember, size)
	return nil
}

// scoreTime reads a delayed-job score as Unix seconds, or milliseconds when
// it is too large to be seconds.
func scoreTime(score float64) time.Time {
	if score > 1e11 {
		return time.UnixMilli(int64(score))
	}
	return time.Unix(0, int64(score*1e9))
}

// sampleStream reads a stream's length, the age of its first entry and its
// consumer groups. The first entry (XRANGE … COUNT 1, fields included) and
// the group list (XINFO GROUPS, one row per group) are as large as the data
// makes them: each is left out for a while once its reply exceeds
// MaxQueueReply, and only the first snapshot.MaxStreamGroups groups get an XPENDING.
func (q *queueStage) sampleStream(ctx context.Context, qs *snapshot.QueueStats, now time.Time) error {
	pipe := q.env.rdb.Pipeline()
	xlen := pipe.XLen(ctx, qs.Queue)
	var first *redis.XMessageSliceCmd
	var groups *redis.XInfoGroupsCmd
	if q.allowRead(qs.Queue, readFirstEntry) {
		first = pipe.XRangeN(ctx, qs.Queue, "-", "+", 1)
	}
	if q.allowRead(qs.Queue, readGroups) {
		groups = pipe.XInfoGroups(ctx, qs.Queue)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	q.own.count("xlen", true)
	qs.Length = uint64(xlen.Val())
	if first != nil {
		q.own.count("xrange", true)
		qs.HasOldest = true
		size := 0
		if msgs := first.Val(); len(msgs) == 1 {
			qs.OldestAge = idAge(msgs[0].ID, now)
			size = entrySize(msgs[0])
		}
		q.readCost(qs.Queue, readFirstEntry, size)
	}
	if groups == nil { // suspended: the groups left out as last read
		qs.GroupsDropped = q.groupsDropped[qs.Queue]
		return nil
	}
	q.own.count("xinfo|groups", true)
	gs := groups.Val()
	size := 0
	for _, g := range gs {
		size += len(g.Name) + len(g.LastDeliveredID) + 64
	}
	q.readCost(qs.Queue, readGroups, size)
	if len(gs) > snapshot.MaxStreamGroups {
		qs.GroupsDropped = uint64(len(gs) - snapshot.MaxStreamGroups)
		gs = gs[:snapshot.MaxStreamGroups]
	}
	if q.groupsDropped == nil {
		q.groupsDropped = map[string]uint64{}
	}
	q.groupsDropped[qs.Queue] = qs.GroupsDropped
	return q.groupsPending(ctx, qs, gs, now)
}

// entrySize is about the bytes of a stream entry's reply.
func entrySize(m redis.XMessage) int {
	size := len(m.ID)
	for k, v := range m.Values {
		size += len(k) + len(fmt.Sprint(v)) + 8
	}
	return size
}

// groupsPending reads the oldest pending ID of each group with pending
// entries (XPENDING summary form).
func (q *queueStage) groupsPending(ctx context.Context, qs *snapshot.QueueStats, gs []redis.XInfoGroup, now time.Time) error {
	pending := make([]*redis.XPendingCmd, len(gs))
	pipe := q.env.rdb.Pipeline()
	for i, g := range gs {
		qs.Groups = append(qs.Groups, snapshot.StreamGroup{Name: g.Name, Pending: uint64(max(g.Pending, 0)),
			Lag: uint64(max(g.Lag, 0)), LagKnown: g.Lag >= 0})
		if g.Pending > 0 {
			pending[i] = pipe.XPending(ctx, qs.Queue, g.Name)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	for i, p := range pending {
		if p != nil {
			q.own.count("xpending", true)
			qs.Groups[i].OldestPending = idAge(p.Val().Lower, now)
		}
	}
	return nil
}

// idAge is now minus the millisecond time in a stream ID ("1700000000000-0"),
// at least 0.
func idAge(id string, now time.Time) time.Duration {
	ms, _, _ := strings.Cut(id, "-")
	v, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0
	}
	if age := now.Sub(time.UnixMilli(v)); age > 0 {
		return age
	}
	return 0
}
