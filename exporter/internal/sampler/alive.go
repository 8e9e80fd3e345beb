package sampler

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/lockholder"
)

// MaxAliveChecks bounds the liveness keys one sample (or one listing)
// checks: distinct holder processes, not locks. Holders past it are
// unknown.
const MaxAliveChecks = 2000

// aliveSet is what the liveness keys of holder instances told: true alive,
// false dead; an instance not in it is unknown.
type aliveSet map[string]bool

// of returns whether holder h is alive, as a snapshot.Alive* word.
func (a aliveSet) of(h *snapshot.Holder) string {
	if h == nil || !h.Live {
		return snapshot.AliveUnknown
	}
	alive, known := a[h.Instance]
	switch {
	case !known:
		return snapshot.AliveUnknown
	case alive:
		return snapshot.AliveYes
	}
	return snapshot.AliveNo
}

// checkAlive asks each client whether the liveness key of each instance
// exists: one pipeline of EXISTS per batch instances and client. An
// instance is alive when a client answers 1, dead when one answers 0 and
// none 1 (in a Cluster only the master of the key's slot answers; the others
// answer MOVED), unknown when none answered. count is told of each answer
// (the sampler's own keyspace lookups). At most MaxAliveChecks instances
// are checked.
func checkAlive(ctx context.Context, clients []*redis.Client, instances []string, batch int, count func(hit bool)) aliveSet {
	out := aliveSet{}
	instances = instances[:min(len(instances), MaxAliveChecks)]
	for start := 0; start < len(instances); start += max(batch, 1) {
		part := instances[start:min(start+max(batch, 1), len(instances))]
		for _, c := range clients {
			pipe := c.Pipeline()
			cmds := make([]*redis.IntCmd, len(part))
			for i, inst := range part {
				cmds[i] = pipe.Exists(ctx, lockholder.AliveKey(inst))
			}
			_, _ = pipe.Exec(ctx)
			for i, inst := range part {
				n, err := cmds[i].Result()
				if err != nil {
					if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
						return out
					}
					continue
				}
				if count != nil {
					count(n > 0)
				}
				out[inst] = out[inst] || n > 0
			}
		}
	}
	return out
}

// liveInstances returns the distinct instances of live holders among hs.
func liveInstances(hs []*snapshot.Holder) []string {
	seen := make(map[string]bool, len(hs))
	var out []string
	for _, h := range hs {
		if h != nil && h.Live && !seen[h.Instance] {
			seen[h.Instance] = true
			out = append(out, h.Instance)
		}
	}
	return out
}
