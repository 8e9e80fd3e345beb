package snapshot

import "time"

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
	// GroupsDropped counts the others.
	Groups        []StreamGroup
	GroupsDropped uint64
}

// MaxStreamGroups bounds the consumer groups reported per stream; the rest
// are counted in cachewatch_exporter_stream_groups_dropped.
const MaxStreamGroups = 50

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
