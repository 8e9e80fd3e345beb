package instrument

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// WriteResult is the outcome of SetVersioned.
type WriteResult int

// Outcomes of a versioned write.
const (
	// NewerVersion: the version was newer than the stored one (or none
	// was stored) and was written.
	NewerVersion WriteResult = iota + 1
	// DuplicateVersion: the same version was already stored; nothing was
	// written. The work that produced it was done twice
	// (cachewatch_duplicate_version_writes_total).
	DuplicateVersion
	// OlderVersion: a newer version was stored; the write was rejected
	// (cachewatch_write_skew_total). A retried or slow job lost the race,
	// and the newer data stays.
	OlderVersion
)

// String returns "written", "duplicate" or "older".
func (r WriteResult) String() string {
	switch r {
	case NewerVersion:
		return "written"
	case DuplicateVersion:
		return "duplicate"
	case OlderVersion:
		return "older"
	}
	return "WriteResult(" + strconv.Itoa(int(r)) + ")"
}

// SetVersioned writes value under version at key (a hash of version and
// data) by compare-and-set in one script: an older version never replaces a
// newer one. ttl > 0 sets the key's expiry; 0 keeps none. Keep the TTL longer
// than the time in which late writers may still arrive: once the key has
// expired, any version is accepted again.
func (c *Client) SetVersioned(ctx context.Context, key string, value []byte, version int64, ttl time.Duration) (WriteResult, error) {
	if version < 0 || ttl < 0 {
		return 0, fmt.Errorf("cachewatch: SetVersioned %q: version %d and ttl %v must not be negative", key, version, ttl)
	}
	group := c.group(key)
	ctx, span := c.spans.start(ctx, "cachewatch.set_versioned", trace.WithAttributes(
		attribute.String("cachewatch.key_group", group), attribute.Int64("cachewatch.version", version)))
	defer span.End()
	res, err := bounded(ctx, c.rdb, func() ([]any, error) {
		return luascript.VersionedSet.Run(c.ctx(ctx), c.rdb, []string{key},
			strconv.FormatInt(version, 10), value, ttl.Milliseconds()).Slice()
	}, nil)
	if err != nil {
		span.RecordError(err)
		return 0, callErr(ctx, "set versioned "+strconv.Quote(key), err)
	}
	code, stored, err := versionReply(res)
	if err != nil {
		return 0, redisErr("set versioned "+strconv.Quote(key), err)
	}
	result := NewerVersion
	switch code {
	case 0:
		result = DuplicateVersion
		c.m.duplicate.WithLabelValues(group).Inc()
	case -1:
		result = OlderVersion
		c.m.writeSkew.WithLabelValues(group).Inc()
		span.AddEvent("write skew", trace.WithAttributes(attribute.String("cachewatch.stored_version", stored)))
	default:
		span.AddEvent("written")
	}
	c.logDecision(ctx, "versioned write", result.String(), group, key,
		slog.Int64("version", version), slog.String("stored_version", stored))
	return result, nil
}

func versionReply(res []any) (code int64, stored string, err error) {
	if len(res) == 2 {
		code, ok1 := res[0].(int64)
		stored, ok2 := res[1].(string)
		if ok1 && ok2 {
			return code, stored, nil
		}
	}
	return 0, "", fmt.Errorf("unexpected reply %v", res)
}

// GetVersioned reads a value written by SetVersioned and its version. When
// the key does not exist it returns an error wrapping ErrNotFound.
func (c *Client) GetVersioned(ctx context.Context, key string) (value []byte, version int64, err error) {
	res, err := c.rdb.HMGet(c.ctx(ctx), key, "v", "d").Result()
	if err != nil {
		return nil, 0, callErr(ctx, "get versioned "+strconv.Quote(key), err)
	}
	v, ok1 := res[0].(string)
	d, ok2 := res[1].(string)
	if !ok1 || !ok2 {
		return nil, 0, fmt.Errorf("cachewatch: GetVersioned %q: %w", key, ErrNotFound)
	}
	if version, err = strconv.ParseInt(v, 10, 64); err != nil {
		return nil, 0, fmt.Errorf("cachewatch: GetVersioned %q: stored version %q: %w", key, v, err)
	}
	return []byte(d), version, nil
}

// FirstSeen records the idempotency key for ttl (SET key 1 NX PX ttl) and
// reports whether this is its first use: true means do the work, false means
// another caller already did (or is doing) it. If the work then fails and may
// be retried, Invalidate the key. ttl must be positive: an idempotency key
// without expiry would live forever. After an error the key may or may not
// be recorded (a command cut off by ctx can still land); a check abandoned
// at ctx's end whose SET lands later is undone when the client can see it
// land (clients without ContextTimeoutEnabled).
func (c *Client) FirstSeen(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, fmt.Errorf("cachewatch: FirstSeen %q: ttl %v: want at least 1ms", key, ttl)
	}
	group := c.group(key)
	first, err := bounded(ctx, c.rdb, func() (bool, error) {
		return c.rdb.SetNX(c.ctx(ctx), key, "1", ttl).Result()
	}, func(late bool, err error) {
		if err == nil && late { // the caller saw an error: let its retry be first
			_ = c.rdb.Unlink(c.ctx(context.WithoutCancel(ctx)), key).Err()
		}
	})
	result := "duplicate"
	switch {
	case err != nil:
		result = "error"
	case first:
		result = "first"
	}
	c.m.idempotency.WithLabelValues(group, result).Inc()
	c.logDecision(ctx, "idempotency key", result, group, key, slog.String("idempotency_key", key))
	if err != nil {
		return false, callErr(ctx, "idempotency key "+strconv.Quote(key), err)
	}
	return first, nil
}

// SlideResult is the outcome of SlideTTL.
type SlideResult int

// Outcomes of a sliding-TTL touch.
const (
	// Slid: the key was past the threshold of its life; its TTL was reset.
	Slid SlideResult = iota + 1
	// NotYetDue: the key had enough life left; nothing was written.
	NotYetDue
	// NoExpiry: the key has no TTL; sliding leaves it alone.
	NoExpiry
	// KeyMissing: the key does not exist.
	KeyMissing
)

// SlideTTL extends key's TTL back to ttl, but only once threshold (a
// fraction in (0, 1]; 0 means 0.5) of that life has passed, i.e. when at
// most (1-threshold)·ttl remains. Reads of a hot session thus rewrite its
// expiry once per slice of its life instead of on every read.
//
// It is one script (PTTL, compare, PEXPIRE) rather than PTTL then PEXPIRE
// from Go: one round trip instead of two, and atomic, so it never
// overwrites a TTL that another writer set between the two commands. The
// threshold is judged on Redis's clock, the one that expires the key. It
// records no metric: each call writes one debug log line with its outcome.
func (c *Client) SlideTTL(ctx context.Context, key string, ttl time.Duration, threshold float64) (SlideResult, error) {
	if threshold == 0 {
		threshold = 0.5
	}
	if ttl < time.Millisecond || threshold < 0 || threshold > 1 {
		return 0, fmt.Errorf("cachewatch: SlideTTL %q: ttl %v (want ≥ 1ms), threshold %v (want in (0, 1])", key, ttl, threshold)
	}
	dueAt := time.Duration(float64(ttl) * (1 - threshold))
	n, err := bounded(ctx, c.rdb, func() (int, error) {
		return luascript.SlideTTL.Run(c.ctx(ctx), c.rdb, []string{key}, ttl.Milliseconds(), dueAt.Milliseconds()).Int()
	}, nil)
	if err != nil {
		return 0, callErr(ctx, "slide ttl "+strconv.Quote(key), err)
	}
	result, outcome := KeyMissing, "missing"
	switch n {
	case 1:
		result, outcome = Slid, "slid"
	case 0:
		result, outcome = NotYetDue, "not_yet_due"
	case -1:
		result, outcome = NoExpiry, "no_expiry"
	}
	c.logDecision(ctx, "slide ttl", outcome, c.group(key), key)
	return result, nil
}

// invalidateBatch is how many keys one SCAN step asks for and one pipeline
// of UNLINKs removes.
const invalidateBatch = 500

// Invalidate removes keys with UNLINK (the memory is freed off Redis's main
// thread), pipelined in batches of single-key UNLINKs so that keys on
// different Cluster slots need no grouping. It returns how many existed.
//
// A key is named as it was written: the name passed to SetVersioned,
// FirstSeen or a plain SET, or the name passed to Cache.Fetch — Invalidate
// removes what a Cache stores for that name too (its value and refresh
// claim; see Cache.Invalidate), so the storage layout never matters.
// Every process's Caches are notified (pub/sub) and drop their copies of
// these keys (CacheOptions.LocalCopies).
func (c *Client) Invalidate(ctx context.Context, keys ...string) (int64, error) {
	targets := make([]target, len(keys))
	for i, k := range keys {
		targets[i] = targetFor(k)
		for _, name := range targets[i].counted {
			c.writes.wait(ctx, name) // a Fetch that returned before this is written first
		}
	}
	return c.invalidate(ctx, targets)
}

// targetFor names everything stored for key: the key itself and, when a
// Cache would store it under another name, that name, plus the refresh
// claim, whose removal voids the loads in flight (the write script
// requires the claim).
func targetFor(key string) target {
	names := keysFor(key)
	t := target{key: key, counted: []string{key}, extra: []string{names.claim}}
	if names.value != key {
		t.counted = append(t.counted, names.value)
	}
	return t
}

// invalidate unlinks targets in batches and announces each batch.
func (c *Client) invalidate(ctx context.Context, targets []target) (int64, error) {
	var removed int64
	for start := 0; start < len(targets); start += invalidateBatch {
		batch := targets[start:min(start+invalidateBatch, len(targets))]
		n, err := c.unlink(ctx, c.rdb, batch, byKeys)
		removed += n
		c.announce(ctx, keysNotice(counted(batch)))
		if err != nil {
			return removed, err
		}
	}
	c.invalidated(ctx, byKeys, len(targets), removed)
	return removed, nil
}

// target is one key to invalidate: the names it is stored under (it counts
// as removed when one of them existed) and the names removed with it
// without being counted (a cached value's refresh claim).
type target struct {
	key     string // as the caller named it: its key group labels the count
	counted []string
	extra   []string
}

// counted returns the counted names of targets: those the notices list.
func counted(targets []target) []string {
	var names []string
	for _, t := range targets {
		names = append(names, t.counted...)
	}
	return names
}

// InvalidateMatch removes every key matching the SCAN pattern (glob) on
// every master: SCAN MATCH, never KEYS, so Redis is never blocked on the
// whole keyspace, and UNLINK batch by batch as the scan goes. Keys written
// during the scan may survive it.
//
// As with Invalidate, the pattern names keys as they were written: a
// pattern that would match a name passed to Cache.Fetch ("product:4*" for
// "product:42") also matches what the Cache stores for it ("product:{42}"):
// the keyspace is scanned once for the pattern as given, once for the
// Cache's layout when it differs, and once for the refresh claims, which
// are removed (voiding the loads in flight: see Cache.Invalidate) but not
// counted. Every process's Caches are notified (pub/sub) and drop
// all their copies (CacheOptions.LocalCopies).
func (c *Client) InvalidateMatch(ctx context.Context, pattern string) (int64, error) {
	if pattern == "" {
		return 0, errors.New("cachewatch: InvalidateMatch: empty pattern")
	}
	c.writes.waitAll(ctx) // the Fetches that returned before this are written first
	// The claims go first: a load in flight holds one before any value is
	// stored, and its write, refused without it, cannot then land between
	// the scan of the values and the scan of the claims.
	stored := keysFor(pattern)
	patterns := []string{stored.claim, pattern}
	if stored.value != pattern {
		patterns = append(patterns, stored.value)
	}
	var removed atomic.Int64
	var err error
	for _, p := range patterns {
		if cluster, ok := c.rdb.(*redis.ClusterClient); ok {
			err = cluster.ForEachMaster(c.ctx(ctx), func(ctx context.Context, node *redis.Client) error {
				return c.unlinkMatching(ctx, node, p, &removed)
			})
		} else {
			err = c.unlinkMatching(ctx, c.rdb, p, &removed)
		}
		if err != nil {
			break
		}
	}
	c.announce(ctx, patternNotice(pattern))
	c.invalidated(ctx, byPattern, -1, removed.Load())
	return removed.Load(), err
}

// unlinkMatching scans one node for pattern and unlinks what it finds.
func (c *Client) unlinkMatching(ctx context.Context, node redis.UniversalClient, pattern string, removed *atomic.Int64) error {
	iter := node.Scan(c.ctx(ctx), 0, pattern, invalidateBatch).Iterator()
	batch := make([]target, 0, invalidateBatch)
	flush := func() error {
		n, err := c.unlink(ctx, node, batch, byPattern)
		removed.Add(n)
		batch = batch[:0]
		return err
	}
	for iter.Next(c.ctx(ctx)) {
		if batch = append(batch, scanned(iter.Val())); len(batch) == invalidateBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return callErr(ctx, "scan "+strconv.Quote(pattern), err)
	}
	return flush()
}

// scanned is the target of a key found by InvalidateMatch: a Cache's value
// goes with its refresh claim, and counts under the key group of the name
// its callers pass to Fetch, as their lookups do; a refresh claim is
// removed but not counted.
func scanned(name string) target {
	switch {
	case !hashTagged(name):
		return target{key: name, counted: []string{name}}
	case strings.HasSuffix(name, "}"+claimSuffix):
		return target{key: name, extra: []string{name}}
	}
	return target{key: fetchName(name), counted: []string{name}, extra: []string{name + claimSuffix}}
}

// fetchName returns the name passed to Fetch for a value a Cache stores as
// stored (see hashTag): "bulk:7:x" for "bulk:{7:x}". A name outside that
// layout is returned as is. A key named with a hash tag of its own
// ("order:{7}") is stored under that very name, which the layout also gives
// "order:7": it is taken for the latter, whose key group the default
// classifier makes the same ("order:*").
func fetchName(stored string) string {
	open := strings.IndexByte(stored, '{')
	if open < 0 || stored[len(stored)-1] != '}' || open+2 >= len(stored) {
		return stored
	}
	name := stored[:open] + stored[open+1:len(stored)-1]
	if keysFor(name).value != stored {
		return stored
	}
	return name
}

// How keys to invalidate were named, as in the invalidated keys metric's
// "by" label.
const (
	byKeys    = "keys"
	byPattern = "pattern"
)

// unlink removes targets through rdb in one pipeline of single-key UNLINKs
// and counts the targets removed, per key group.
func (c *Client) unlink(ctx context.Context, rdb redis.UniversalClient, targets []target, by string) (int64, error) {
	if len(targets) == 0 {
		return 0, nil
	}
	cmds := make([][]*redis.IntCmd, len(targets))
	_, err := rdb.Pipelined(c.ctx(ctx), func(p redis.Pipeliner) error {
		for i, t := range targets {
			for _, name := range t.counted {
				cmds[i] = append(cmds[i], p.Unlink(c.ctx(ctx), name))
			}
			for _, name := range t.extra {
				p.Unlink(c.ctx(ctx), name)
			}
		}
		return nil
	})
	var n int64
	for i, t := range targets {
		for _, cmd := range cmds[i] {
			if cmd.Val() > 0 {
				n++
				c.m.invalidated.WithLabelValues(c.group(t.key), by).Inc()
				break
			}
		}
	}
	if err != nil {
		return n, callErr(ctx, "unlink", err)
	}
	return n, nil
}

func (c *Client) invalidated(ctx context.Context, what string, asked int, removed int64) {
	trace.SpanFromContext(ctx).AddEvent("invalidated", trace.WithAttributes(
		attribute.String("cachewatch.invalidate", what), attribute.Int64("cachewatch.removed", removed)))
	if c.log.Enabled(ctx, slog.LevelDebug) {
		c.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch invalidate", slog.String("by", what),
			slog.Int("asked", asked), slog.Int64("removed", removed), slog.String("outcome", "invalidated"))
	}
}

// logDecision writes one debug line for a consistency decision.
func (c *Client) logDecision(ctx context.Context, msg, outcome, group, key string, extra ...slog.Attr) {
	if !c.log.Enabled(ctx, slog.LevelDebug) {
		return
	}
	attrs := append([]slog.Attr{slog.String("key_group", group), slog.String("key", key), slog.String("outcome", outcome)}, extra...)
	c.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch "+msg, attrs...)
}
