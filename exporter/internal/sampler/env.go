package sampler

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/ctxsleep"
)

// env is what the stages of one node share: the configuration, the node's
// address and client, and what INFO told of the server. The info stage
// writes facts before the passes start; the passes only read them.
type env struct {
	cfg  *Config
	addr string
	rdb  *redis.Client
	// facts are the server's, from its last INFO.
	facts facts
	// scanCost estimates the server's time per key SCAN visits: both
	// passes add the keys they visit; the info stage, and the lock pass
	// while the budget paces it, read the server's SCAN time (one after
	// the other: the info stage runs before the passes).
	scanCost scanCost
}

func (v *env) now() time.Time { return v.cfg.Clock.Now() }

// facts are what the last INFO told of the server that the passes need.
type facts struct {
	// ttlCmd reads a key's expiry: "pexpiretime" (Redis 7+) or "pttl".
	ttlCmd string
	// dbKeys is the number of keys in the sampled database (INFO
	// keyspace); dbKnown is false when INFO did not tell.
	dbKeys  uint64
	dbKnown bool
}

// readTTL queues the TTL read of key on pipe.
func (f *facts) readTTL(ctx context.Context, pipe redis.Pipeliner, key string) *redis.Cmd {
	if f.ttlCmd == "pexpiretime" {
		return pipe.Do(ctx, "pexpiretime", key)
	}
	return pipe.Do(ctx, "pttl", key)
}

// ttlOf turns a readTTL reply into the remaining TTL at now: -1 no expiry,
// -2 no such key.
func (f *facts) ttlOf(c *redis.Cmd, now time.Time) (time.Duration, error) {
	v, err := c.Int64()
	if err != nil {
		return 0, err
	}
	switch {
	case v < 0:
		return time.Duration(v), nil
	case f.ttlCmd == "pexpiretime":
		return max(time.UnixMilli(v).Sub(now), 0), nil
	}
	return time.Duration(v) * time.Millisecond, nil
}

// scanBudget is the most SCAN calls of COUNT count a pass over the
// database may make: four times what its keys need, and a thousand more (a
// sparse table, keys added during the pass); 0 (none) when the number of
// keys is unknown.
func (f *facts) scanBudget(count int) uint64 {
	if !f.dbKnown {
		return 0
	}
	return 4*(f.dbKeys/uint64(max(count, 1))+1) + 1000
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

// Pacing of the passes.
const (
	// minPaceSleep is the least a paced pass gets ahead of schedule before
	// it sleeps: a few SCAN calls of the lock pass between sleeps.
	minPaceSleep = 2 * time.Millisecond
	// maxPaceLag is how far behind its schedule a paced pass may fall
	// before the schedule moves: after a stall (the process starved of CPU
	// or stopped, a slow reply) the pass goes on at its rate instead of
	// catching up at full speed, which would take the server for itself.
	maxPaceLag = 50 * time.Millisecond
)

// pace sleeps on the pacing clock so that the n units of work done since
// *began stay within perSecond (≤ 0: unpaced). It sleeps only once the work
// is at least minPaceSleep ahead of schedule: the schedule is absolute, so
// the rate is the same, with fewer timer wake-ups (a sleep per SCAN call
// cost the exporter CPU on the cores Redis and its clients share). Work
// more than maxPaceLag behind schedule moves *began later instead.
func (v *env) pace(ctx context.Context, began *time.Time, n int, perSecond float64) error {
	if perSecond <= 0 {
		return nil
	}
	due := began.Add(time.Duration(float64(n) / perSecond * float64(time.Second)))
	wait := due.Sub(v.cfg.Pacer.Now())
	if wait < -maxPaceLag {
		*began = began.Add(-wait - maxPaceLag)
		return nil
	}
	if wait <= 0 || wait < minPaceSleep {
		return nil
	}
	return ctxsleep.On(ctx, v.cfg.Pacer, wait)
}
