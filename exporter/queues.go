package exporter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// QueueStats describes one configured queue key on the node that holds it.
type QueueStats struct {
	Queue string
	Type  string // list, stream or zset
	// Length is LLEN, XLEN or ZCARD; 0 for a key that no longer exists
	// (Redis deletes emptied lists and sorted sets). A key never seen is
	// not reported: its type is unknown.
	Length uint64
	// OldestAge is the age of the first stream entry (from its ID), or how
	// overdue the earliest sorted-set score is as a Unix time in seconds or
	// milliseconds (0 when nothing is due). HasOldest is false for lists.
	OldestAge time.Duration
	HasOldest bool
	// Groups are the stream's consumer groups, at most MaxStreamGroups;
	// GroupsDropped counts the others (not exported).
	Groups        []StreamGroup
	GroupsDropped uint64
}

// StreamGroup is one consumer group of a stream.
type StreamGroup struct {
	Name    string
	Pending uint64
	// Lag is undelivered entries; LagKnown is false when the server cannot
	// tell (XINFO GROUPS lag is nil).
	Lag      uint64
	LagKnown bool
	// OldestPending is the age of the lowest pending ID (XPENDING summary).
	OldestPending time.Duration
}

// QueueRead names a read of a queue whose reply size the data decides:
// Read is "first_entry" (a stream's first entry, XRANGE … COUNT 1),
// "groups" (XINFO GROUPS) or "first_member" (a sorted set's earliest
// member).
type QueueRead struct{ Queue, Read string }

// Queue reads whose reply size the data decides.
const (
	readFirstEntry  = "first_entry"
	readGroups      = "groups"
	readFirstMember = "first_member"
)

// readCap is the backoff of a queue read whose last reply exceeded
// Options.MaxQueueReply: it is left out until then (the interval, doubling
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
func (e *Exporter) allowRead(n *node, queue, read string) bool {
	c := n.queueReads[QueueRead{queue, read}]
	if c == nil || !e.clock.Now().Before(c.until) {
		return true
	}
	if n.readsSkipped == nil {
		n.readsSkipped = map[QueueRead]uint64{}
	}
	n.readsSkipped[QueueRead{queue, read}]++
	return false
}

// readCost records the size of a read's reply: above MaxQueueReply (or
// -1: refused unread, larger) the read is suspended (logged when it
// starts), at or below it any backoff ends.
func (e *Exporter) readCost(n *node, queue, read string, bytes int) {
	key := QueueRead{queue, read}
	if bytes >= 0 && bytes <= e.opts.MaxQueueReply {
		delete(n.queueReads, key)
		return
	}
	c := n.queueReads[key]
	if c == nil {
		c = &readCap{wait: e.opts.Interval}
		n.queueReads[key] = c
		size := any(bytes)
		if bytes < 0 {
			size = "more (refused unread)"
		}
		e.opts.Logger.Warn("a queue read returned more than the reply cap: it is left out, and tried again less and less often",
			"node", n.addr, "queue", queue, "read", read, "bytes", size, "cap", e.opts.MaxQueueReply)
	} else {
		c.wait = min(2*c.wait, maxReadCapWait*e.opts.Interval)
	}
	c.until = e.clock.Now().Add(c.wait)
}

// sampleQueues reports each configured queue that lives on n. In a Cluster a
// key owned by another master answers MOVED and is skipped here.
func (e *Exporter) sampleQueues(ctx context.Context, n *node) ([]QueueStats, []*StageError) {
	var out []QueueStats
	var errs []*StageError
	n.notQueues = nil
	for _, q := range e.opts.Queues {
		qs, ok, err := e.sampleQueueBounded(ctx, n, q)
		if err != nil {
			se := stageErr(StageQueues, err)
			errs = append(errs, se)
			if se.fatal() {
				return nil, errs
			}
			continue
		}
		if ok {
			out = append(out, qs)
			delete(n.notQueuesLogged, q)
		} else if qs.Queue != "" {
			e.notAQueue(n, qs)
		}
	}
	return out, errs
}

// notAQueue records a configured queue the node holds under another type
// or not at all, and logs it once per node and type: a mistyped --queue
// must not go unnoticed.
func (e *Exporter) notAQueue(n *node, qs QueueStats) {
	typ := qs.Type
	if typ == "" {
		typ = "none"
	}
	if n.notQueues == nil {
		n.notQueues = map[string]string{}
	}
	n.notQueues[qs.Queue] = typ
	if n.notQueuesLogged[qs.Queue] == typ {
		return
	}
	n.notQueuesLogged[qs.Queue] = typ
	if typ == "none" {
		e.opts.Logger.Warn("configured queue does not exist (an emptied list or sorted set is deleted; reported again once it has entries)",
			"node", n.addr, "queue", qs.Queue)
		return
	}
	e.opts.Logger.Warn("configured queue is not a list, stream or sorted set; not reported", "node", n.addr, "queue", qs.Queue, "type", typ)
}

// queueReads are the queue reads each guarded reply class answers.
var queueReads = map[replyClass]string{replyXRange: readFirstEntry, replyZRange: readFirstMember}

// sampleQueueBounded samples a queue. A read of its first entry whose
// reply declared more than MaxQueueReply was refused unread (the
// connection's guard): it is left out for a backoff, as one found too
// large once read, and the queue is sampled again without it.
func (e *Exporter) sampleQueueBounded(ctx context.Context, n *node, key string) (QueueStats, bool, error) {
	for range len(queueReads) {
		qs, ok, err := e.sampleQueue(ctx, n, key)
		class, refused := refusedClass(err)
		read, isQueueRead := queueReads[class]
		if !refused || !isQueueRead {
			return qs, ok, err
		}
		e.readCost(n, key, read, -1)
	}
	return e.sampleQueue(ctx, n, key)
}

func (e *Exporter) sampleQueue(ctx context.Context, n *node, key string) (QueueStats, bool, error) {
	typ, err := n.rdb.Type(ctx, key).Result()
	if isMoved(err) {
		return QueueStats{}, false, nil
	}
	if err != nil {
		return QueueStats{}, false, err
	}
	qs := QueueStats{Queue: key, Type: typ}
	if typ == "none" { // an emptied list or sorted set is deleted: length 0
		n.own.count("type", false)
		qs.Type = n.queueTypes[key]
		return qs, qs.Type != "", nil
	}
	n.own.count("type", true)
	now := e.clock.Now()
	switch typ {
	case "list":
		l, err := n.rdb.LLen(ctx, key).Result()
		if err != nil {
			return qs, false, err
		}
		n.own.count("llen", true)
		qs.Length = uint64(l)
	case "zset":
		err = e.sampleZSet(ctx, n, &qs, now)
	case "stream":
		err = e.sampleStream(ctx, n, &qs, now)
	default:
		return qs, false, nil // not a queue type: nothing to report
	}
	if err == nil {
		n.queueTypes[key] = typ
	}
	return qs, err == nil, err
}

// sampleZSet reads a delayed-job set's size and how many jobs are overdue
// (ZCOUNT: scores read as Unix seconds, or milliseconds above 1e11); only
// when some are does it read the earliest member, whose size the data
// decides (capped by MaxQueueReply).
func (e *Exporter) sampleZSet(ctx context.Context, n *node, qs *QueueStats, now time.Time) error {
	pipe := n.rdb.Pipeline()
	card := pipe.ZCard(ctx, qs.Queue)
	dueSec := pipe.ZCount(ctx, qs.Queue, "-inf", strconv.FormatInt(now.Unix(), 10))
	dueMs := pipe.ZCount(ctx, qs.Queue, "(100000000000", strconv.FormatInt(now.UnixMilli(), 10))
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	n.own.count("zcard", true)
	n.own.count("zcount", true)
	n.own.count("zcount", true)
	qs.Length = uint64(card.Val())
	if dueSec.Val()+dueMs.Val() == 0 {
		qs.HasOldest = true // nothing overdue
		return nil
	}
	if !e.allowRead(n, qs.Queue, readFirstMember) {
		return nil
	}
	first, err := n.rdb.ZRangeWithScores(ctx, qs.Queue, 0, 0).Result()
	if err != nil {
		return err
	}
	n.own.count("zrange", true)
	qs.HasOldest = true
	size := 0
	if len(first) == 1 {
		size = len(fmt.Sprint(first[0].Member)) + 24
		if overdue := now.Sub(scoreTime(first[0].Score)); overdue > 0 {
			qs.OldestAge = overdue
		}
	}
	e.readCost(n, qs.Queue, readFirstMember, size)
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
// MaxQueueReply, and only the first MaxStreamGroups groups get an XPENDING.
func (e *Exporter) sampleStream(ctx context.Context, n *node, qs *QueueStats, now time.Time) error {
	pipe := n.rdb.Pipeline()
	xlen := pipe.XLen(ctx, qs.Queue)
	var first *redis.XMessageSliceCmd
	var groups *redis.XInfoGroupsCmd
	if e.allowRead(n, qs.Queue, readFirstEntry) {
		first = pipe.XRangeN(ctx, qs.Queue, "-", "+", 1)
	}
	if e.allowRead(n, qs.Queue, readGroups) {
		groups = pipe.XInfoGroups(ctx, qs.Queue)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	n.own.count("xlen", true)
	qs.Length = uint64(xlen.Val())
	if first != nil {
		n.own.count("xrange", true)
		qs.HasOldest = true
		size := 0
		if msgs := first.Val(); len(msgs) == 1 {
			qs.OldestAge = idAge(msgs[0].ID, now)
			size = entrySize(msgs[0])
		}
		e.readCost(n, qs.Queue, readFirstEntry, size)
	}
	if groups == nil { // suspended: the groups left out as last read
		qs.GroupsDropped = n.groupsDropped[qs.Queue]
		return nil
	}
	n.own.count("xinfo|groups", true)
	gs := groups.Val()
	size := 0
	for _, g := range gs {
		size += len(g.Name) + len(g.LastDeliveredID) + 64
	}
	e.readCost(n, qs.Queue, readGroups, size)
	if len(gs) > MaxStreamGroups {
		qs.GroupsDropped = uint64(len(gs) - MaxStreamGroups)
		gs = gs[:MaxStreamGroups]
	}
	if n.groupsDropped == nil {
		n.groupsDropped = map[string]uint64{}
	}
	n.groupsDropped[qs.Queue] = qs.GroupsDropped
	return e.groupsPending(ctx, n, qs, gs, now)
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
func (e *Exporter) groupsPending(ctx context.Context, n *node, qs *QueueStats, gs []redis.XInfoGroup, now time.Time) error {
	pending := make([]*redis.XPendingCmd, len(gs))
	pipe := n.rdb.Pipeline()
	for i, g := range gs {
		qs.Groups = append(qs.Groups, StreamGroup{Name: g.Name, Pending: uint64(max(g.Pending, 0)),
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
			n.own.count("xpending", true)
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
