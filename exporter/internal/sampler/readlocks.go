package sampler

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
	"github.com/cachewatch/cachewatch/internal/ctxsleep"
)

// LockRead is one lock key as ReadLocks found it.
type LockRead struct {
	Node, Key, Group string
	Holder           snapshot.Holder
	// Acquired is the acquisition time the value tells; zero when it
	// tells none.
	Acquired time.Time
	// Token is a hash of the value read (its first MaxTokenBytes): a new
	// token is a new holder. Hashes compare within one process only.
	Token uint64
	// TTL is the remaining time to live; -1 when the lock has none.
	TTL time.Duration
	// Alive says whether the holder is alive (snapshot.AliveYes, AliveNo,
	// AliveUnknown): its liveness key, for a holder that keeps one.
	Alive string
}

// ReadLocksOptions bound a ReadLocks call.
type ReadLocksOptions struct {
	// Max is the most lock keys listed over all nodes; more report
	// truncated.
	Max int
	// Rate is the keys SCAN may visit per second on each node (SCAN costs
	// the server the same per key visited, whatever the pattern).
	Rate float64
}

var tokenSeed = maphash.MakeSeed()

// ReadLocks lists the lock keys of cfg's target (every master of a
// Cluster): SCAN … MATCH for each lock pattern (COUNT LockScanCount, never
// KEYS), paced at opts.Rate keys visited per second per node, and for each
// key found its TTL and the first MaxTokenBytes of its value (GETRANGE:
// replies bounded by the reply guard) in pipelines of Batch keys, the
// holder parsed from it. It reports truncated when more than opts.Max keys
// matched; the listing is then the first opts.Max found. Locks are sorted
// by node and key.
func ReadLocks(ctx context.Context, cfg Config, opts ReadLocksOptions) ([]LockRead, bool, error) {
	addrs := cfg.Conn.Addrs
	if cfg.Conn.Mode != ModeStandalone {
		masters, isCluster, err := New(cfg).discover(ctx)
		if refusedClusterInfo(err) {
			return nil, false, fmt.Errorf("exporter: %w: the server refused INFO cluster, so whether it is a Cluster is not known "+
				"(a server that is not Redis, such as miniredis, answers so): read it as one server (--redis.mode standalone)", err)
		}
		if err != nil {
			return nil, false, fmt.Errorf("exporter: %w", err)
		}
		if isCluster {
			addrs = masters
		}
	}
	var (
		mu        sync.Mutex
		out       []LockRead
		truncated bool
		errs      = make([]error, len(addrs))
		wg        sync.WaitGroup
	)
	clients := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		clients[i] = cfg.client(addr)
		defer clients[i].Close()
	}
	for i, addr := range addrs {
		wg.Go(func() {
			locks, more, err := readNodeLocks(ctx, &cfg, clients[i], addr, opts)
			mu.Lock()
			defer mu.Unlock()
			out, truncated = append(out, locks...), truncated || more
			if err != nil {
				errs[i] = fmt.Errorf("exporter: %s: %w", addr, err)
			}
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].Key < out[j].Key
	})
	if opts.Max > 0 && len(out) > opts.Max {
		out, truncated = out[:opts.Max], true
	}
	judgeAlive(ctx, &cfg, clients, out)
	return out, truncated, errors.Join(errs...)
}

// refusedClusterInfo reports the error reply of a server that answered
// INFO cluster with an error of its own, neither a refused permission, a
// failed login nor a busy or loading server: one that does not know the
// section.
func refusedClusterInfo(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && classify(err) == ClassOther
}

// judgeAlive sets whether each lock's holder is alive, asking every node
// for the liveness keys of the holders that keep one (checkAlive).
func judgeAlive(ctx context.Context, cfg *Config, clients []*redis.Client, locks []LockRead) {
	hs := make([]*snapshot.Holder, len(locks))
	for i := range locks {
		hs[i] = &locks[i].Holder
	}
	alive := checkAlive(ctx, clients, liveInstances(hs), cfg.Batch, nil)
	for i := range locks {
		locks[i].Alive = alive.of(&locks[i].Holder)
	}
}

// readNodeLocks lists the lock keys of one node, at most opts.Max of them.
func readNodeLocks(ctx context.Context, cfg *Config, c *redis.Client, addr string, opts ReadLocksOptions) ([]LockRead, bool, error) {
	var out []LockRead
	seen := map[string]bool{} // keys matched by two patterns count once
	start, visited := time.Now(), 0
	for _, pattern := range cfg.LockPatterns {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, pattern, int64(cfg.LockScanCount)).Result()
			if err != nil {
				return out, false, err
			}
			batch := keys[:0]
			for _, k := range keys {
				if !seen[k] {
					seen[k] = true
					batch = append(batch, k)
				}
			}
			if opts.Max > 0 && len(out)+len(batch) > opts.Max {
				batch = batch[:opts.Max-len(out)]
				locks, err := readLockBatch(ctx, cfg, c, addr, batch)
				return append(out, locks...), true, err
			}
			locks, err := readLockBatch(ctx, cfg, c, addr, batch)
			if out = append(out, locks...); err != nil {
				return out, false, err
			}
			visited += cfg.LockScanCount
			if cursor = next; cursor == 0 {
				break
			}
			if err := paceScan(ctx, start, visited, opts.Rate); err != nil {
				return out, false, err
			}
		}
	}
	return out, false, nil
}

// paceScan waits until visited keys fit the rate since start.
func paceScan(ctx context.Context, start time.Time, visited int, rate float64) error {
	if rate <= 0 {
		return nil
	}
	due := start.Add(time.Duration(float64(visited) / rate * float64(time.Second)))
	if wait := time.Until(due); wait > 0 {
		return ctxsleep.Sleep(ctx, wait)
	}
	return nil
}

// readLockBatch reads the TTL and value of keys, Batch keys per pipeline.
// A key gone meanwhile is left out; a value that is not a string (WRONGTYPE)
// names no holder.
func readLockBatch(ctx context.Context, cfg *Config, c *redis.Client, addr string, keys []string) ([]LockRead, error) {
	out := make([]LockRead, 0, len(keys))
	for start := 0; start < len(keys); start += cfg.Batch {
		part := keys[start:min(start+cfg.Batch, len(keys))]
		pipe := c.Pipeline()
		ttls := make([]*redis.DurationCmd, len(part))
		vals := make([]*redis.StringCmd, len(part))
		for i, k := range part {
			ttls[i] = pipe.PTTL(ctx, k)
			vals[i] = pipe.GetRange(ctx, k, 0, MaxTokenBytes-1)
		}
		_, _ = pipe.Exec(ctx)
		for i, k := range part {
			ttl, err := ttls[i].Result()
			if err != nil {
				return out, err
			}
			if ttl == -2 { // gone (go-redis returns PTTL's -2 as -2ns)
				continue
			}
			if ttl < 0 {
				ttl = -1
			}
			l := LockRead{Node: addr, Key: k, Group: cfg.LockGroups.Classify(k), TTL: ttl, Holder: snapshot.Holder{Format: snapshot.Opaque}}
			val, err := vals[i].Result()
			switch {
			case err == nil:
				var ms int64
				l.Holder, ms = ParseHolder(val)
				l.Token = maphash.String(tokenSeed, val)
				if ms > 0 {
					l.Acquired = time.UnixMilli(ms)
				}
			case classify(err) != ClassOther || !isWrongType(err):
				return out, err
			}
			out = append(out, l)
		}
	}
	return out, nil
}

func isWrongType(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && len(rerr.Error()) >= 9 && rerr.Error()[:9] == "WRONGTYPE"
}
