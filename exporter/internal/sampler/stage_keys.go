package sampler

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// keyStage is the whole-keyspace pass: SCAN … COUNT over the keyspace with
// pipelined TTL reads (and OBJECT FREQ for hot keys, MEMORY USAGE of one key
// in MemorySample), paced at KeysPerSecond and bounded by MaxKeys and
// MaxDuration per sample; the cursor resumes on the next sample. Its key
// figures are those of the last complete pass.
type keyStage struct {
	env *env
	// scanRetry and keysRetry are the backoffs of its SCAN and of its key
	// reads.
	scanRetry, keysRetry backoff
	// cursor is where the next SCAN starts. Once paged, page holds the
	// keys of the last SCAN not read yet, next the cursor after them.
	cursor, next uint64
	page         []string
	paged        bool
	// watch follows the pass's cursors.
	watch scanWatch
	// pass is being accumulated; done is the last complete one.
	pass, done *keyPass
	hot        hotKeys
	// memoryTurn counts keys towards the next MEMORY USAGE read;
	// memoryRefused is set once the ACL refused it.
	memoryTurn    uint64
	memoryRefused bool
	// scanned, cycles and truncated count the keys scanned, the passes
	// completed and the samples that ran out of budget.
	scanned, cycles, truncated uint64
	// ok says whether the last sample's pass succeeded: its series are
	// left out otherwise.
	ok bool
}

// run continues the pass within the sample's key and time budget. At most
// one pass completes per sample, so a small keyspace is not walked again
// and again within one sample.
func (k *keyStage) run(ctx context.Context, began, deadline time.Time, hot bool, own lookups) []*StageError {
	cfg := k.env.cfg
	if k.pass == nil {
		k.pass = newKeyPass(k.env.now())
		k.hot = hotKeys{k: cfg.HotKeys}
		k.watch.start()
	}
	scanned, paced := 0, began
	for {
		if scanned >= cfg.MaxKeys || cfg.Pacer.Now().After(deadline) {
			k.truncated++
			return nil
		}
		if !k.paged {
			if se := k.takePage(k.env.rdb.Scan(ctx, k.cursor, "", int64(cfg.ScanCount))); se != nil {
				return k.failed(se)
			}
		}
		if se := k.readPage(ctx, &scanned, &paced, hot, own); se != nil {
			return k.failed(se)
		}
		if k.cursor == 0 {
			k.complete()
			return nil
		}
	}
}

// takePage takes the reply of the SCAN from k.cursor as the page to read.
func (k *keyStage) takePage(c *redis.ScanCmd) *StageError {
	cfg := k.env.cfg
	keys, cursor, err := c.Result()
	if err == nil {
		err = k.watch.next(cursor, k.env.facts.scanBudget(cfg.ScanCount))
	}
	if err != nil {
		return stageErr(StageScan, err)
	}
	k.env.scanCost.visited(cfg.ScanCount)
	k.page, k.next, k.paged = keys, cursor, true
	return nil
}

// turnPage moves the cursor past the page just read; the page after it,
// when its SCAN went with the last batch, is the one to read next.
func (k *keyStage) turnPage(next *redis.ScanCmd) *StageError {
	k.cursor, k.paged = k.next, false
	if next == nil {
		return nil
	}
	return k.takePage(next)
}

// readPage reads the keys of the page SCAN returned, Batch keys per
// pipeline, paced; those read leave the page, so that a pass resumed after
// a timeout reads each key once. The page's last batch goes with the SCAN
// of the next page: one round trip per page, not two.
func (k *keyStage) readPage(ctx context.Context, scanned *int, paced *time.Time, hot bool, own lookups) *StageError {
	for {
		if err := k.env.pace(ctx, paced, *scanned, k.rate()); err != nil {
			return stageErr(StageKeys, err)
		}
		batch := k.page[:min(k.env.cfg.Batch, len(k.page))]
		last := len(batch) == len(k.page)
		if last && len(batch) == 0 && k.next == 0 {
			return k.turnPage(nil)
		}
		n, next, se := k.read(ctx, batch, last && k.next != 0, hot, own)
		k.page = k.page[n:]
		*scanned += n
		k.scanned += uint64(n)
		if se != nil {
			return se
		}
		if last {
			return k.turnPage(next)
		}
	}
}

// rate is the pass's pace in keys per second; ≤ 0 when unpaced.
func (k *keyStage) rate() float64 {
	if k.env.cfg.Unpaced {
		return -1
	}
	return k.env.cfg.KeysPerSecond
}

// failed ends the sample's share of the pass after se. A timeout keeps
// the pass, its cursor and the keys of the page not read yet: the server
// answered late. Any other failure drops the pass: the next starts afresh.
func (k *keyStage) failed(se *StageError) []*StageError {
	if !answeredLate(se) {
		k.reset()
	}
	return []*StageError{se}
}

func (k *keyStage) complete() {
	k.pass.finish(k.env.now())
	k.pass.hot = k.hot.sorted()
	k.done, k.pass = k.pass, nil
	k.cycles++
}

// reset forgets both passes: after a failure or a server restart they no
// longer describe the server.
func (k *keyStage) reset() { k.cursor, k.page, k.paged, k.pass, k.done = 0, nil, false, nil, nil }

// read reads one batch of keys in a single pipeline: the TTL of every key,
// OBJECT FREQ when hot keys are tracked, and MEMORY USAGE of one key in
// MemorySample; with scanNext, the SCAN of the next page too, returned
// once every key of the batch was read. Every read that reaches a key is
// counted as the sampler's own hit or miss.
func (k *keyStage) read(ctx context.Context, keys []string, scanNext, hot bool, own lookups) (int, *redis.ScanCmd, *StageError) {
	f := &k.env.facts
	pipe := k.env.rdb.Pipeline()
	ttls := make([]*redis.Cmd, len(keys))
	freqs := make([]*redis.IntCmd, len(keys))
	mems := make([]*redis.IntCmd, len(keys))
	for i, key := range keys {
		ttls[i] = f.readTTL(ctx, pipe, key)
		if hot {
			freqs[i] = pipe.ObjectFreq(ctx, key)
		}
		if k.memoryDue() {
			mems[i] = pipe.MemoryUsage(ctx, key, memoryUsageSamples)
		}
	}
	var next *redis.ScanCmd
	if scanNext {
		next = pipe.Scan(ctx, k.next, "", int64(k.env.cfg.ScanCount))
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below
	now := k.env.now()
	for i, key := range keys {
		ttl, err := f.ttlOf(ttls[i], now)
		if err != nil {
			return i, nil, stageErr(StageKeys, err)
		}
		own.count(f.ttlCmd, ttl != -2)
		if freqs[i] != nil {
			own.countReply("object|freq", freqs[i].Err())
		}
		if ttl == -2 { // gone between SCAN and the read
			continue
		}
		group := k.env.cfg.KeyGroups.Classify(key)
		g := k.pass.addKey(group, ttl, now)
		k.memory(g, mems[i])
		if hot && freqs[i] != nil {
			if freq, err := freqs[i].Result(); err == nil {
				k.hot.offer(snapshot.HotKey{Key: key, Group: group, Freq: freq, NoTTL: ttl < 0})
			}
		}
	}
	return len(keys), next, nil
}

// memoryDue reports whether the next key's memory is read: one key in
// MemorySample, unless the ACL refused MEMORY USAGE.
func (k *keyStage) memoryDue() bool {
	m := k.env.cfg.MemorySample
	if m <= 0 || k.memoryRefused {
		return false
	}
	k.memoryTurn++
	return k.memoryTurn%uint64(m) == 0
}

// memory adds a MEMORY USAGE reply (nil: not read) to g.
func (k *keyStage) memory(g *keyGroup, c *redis.IntCmd) {
	if c == nil {
		return
	}
	b, err := c.Result()
	switch {
	case err == nil:
		g.memorySum += uint64(b)
		g.memoryReads++
	case classify(err) == ClassNoPerm: // the keys are still sampled, without their memory
		k.memoryRefused = true
		k.env.cfg.Logger.Warn("redis refused MEMORY USAGE (ACL): no memory per key group until it is granted",
			"node", k.env.addr, "err", err.Error())
	}
}

// view returns the key figures to show: the last complete pass's or, until
// one completes, the pass in progress's, and the fraction of the keyspace
// they cover. Nil, 0 when no pass has started or the last sample's failed.
func (k *keyStage) view() (*snapshot.Pass, float64) {
	if !k.ok {
		return nil, 0
	}
	if k.done != nil {
		return k.done.view(), 1
	}
	if k.pass == nil {
		return nil, 0
	}
	coverage, f := 0.0, &k.env.facts
	if f.dbKnown && f.dbKeys > 0 {
		coverage = min(float64(k.pass.keys)/float64(f.dbKeys), 1)
	}
	return k.pass.view(), coverage
}

// asOf is when the key figures shown were taken: the start of the pass.
func (k *keyStage) asOf() time.Time {
	switch {
	case k.done != nil:
		return k.done.started
	case k.pass != nil:
		return k.pass.started
	}
	return time.Time{}
}

// backoffFor returns the backoff of the part of the pass that failed.
func (k *keyStage) backoffFor(se *StageError) *backoff {
	if se.Stage == StageScan {
		return &k.scanRetry
	}
	return &k.keysRetry
}

// settled notes how the sample's pass went: ran, and failed with errs.
func (k *keyStage) settled(ran bool, errs []*StageError) {
	k.ok = ran && len(errs) == 0
	if k.ok {
		k.scanRetry.reset()
		k.keysRetry.reset()
	}
}
