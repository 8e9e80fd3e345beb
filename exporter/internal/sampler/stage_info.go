package sampler

import (
	"context"
	"time"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// infoStage reads INFO: the server figures, and what the other stages need
// to know of the server (its version, key count, SCAN cost, restarts).
type infoStage struct {
	env   *env
	retry backoff
	// runID, flushes and role tell restarts, flushes and resyncs apart.
	runID, role string
	flushes     uint64
	// prevMisses are the corrected misses of the last sample (havePrev),
	// for miss bursts.
	prevMisses uint64
	havePrev   bool
	missBursts uint64
	// asOf is when INFO was last read.
	asOf time.Time
}

// read reads INFO and notes what changed on the server since the last
// read: a new run_id (a restart, whose counters start at zero), or keys
// rewritten without a notification per key.
func (i *infoStage) read(ctx context.Context) (*reading, *StageError) {
	v := i.env
	raw, err := v.rdb.Info(ctx, "server", "clients", "memory", "stats", "replication", "cluster", "keyspace", "commandstats", "latencystats").Result()
	if err != nil {
		return nil, stageErr(StageInfo, err)
	}
	fields, err := parseInfo(raw)
	if err != nil {
		return nil, stageErr(StageInfo, err)
	}
	rd, err := parseServerStats(fields)
	if err != nil {
		return nil, stageErr(StageInfo, err)
	}
	st := rd.stats
	switch {
	case st.RunID != i.runID:
		rd.newRun, rd.restarted = true, i.runID != ""
		if rd.restarted {
			i.havePrev = false
		}
		i.runID = st.RunID
	case rd.flushCalls != i.flushes || st.Role != i.role:
		// FLUSHALL, FLUSHDB, SWAPDB and a full resync as a replica change
		// keys without a notification per key.
		rd.keysRewritten = true
	}
	i.flushes, i.role = rd.flushCalls, st.Role
	v.scanCost.update(rd.scanUsec)
	// PEXPIRETIME (Redis 7+) does not depend on when the reply is read;
	// older servers only have PTTL. A server whose INFO is refused is
	// taken to be recent.
	v.facts.ttlCmd = "pexpiretime"
	if ver := majorVersion(st.Version); ver > 0 && ver < 7 {
		v.facts.ttlCmd = "pttl"
	}
	v.facts.dbKeys, v.facts.dbKnown = dbKeys(fields, v.cfg.Conn.DB)
	return rd, nil
}

// figures fills the server figures of s from rd, with the samplers'
// lookups (own: this sampler's) taken out of the keyspace hits and misses,
// and counts a miss burst.
func (i *infoStage) figures(s *snapshot.Node, rd *reading, own lookups) {
	s.Server = rd.stats
	s.Hits, s.Misses = own.correct(rd)
	if m := i.env.cfg.MissBurst; m > 0 && i.havePrev && s.Misses >= i.prevMisses+m {
		i.missBursts++
	}
	i.prevMisses, i.havePrev = s.Misses, true
	i.asOf = i.env.now()
}
