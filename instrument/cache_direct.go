package instrument

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// Set stores v as key's fresh value (with the Cache's jittered FreshTTL
// and HardTTL), without a loader: for writers that know the new value.
// Like an invalidation, it voids the loads of key in flight in every
// process (their write is refused: they read the source before this one)
// and other processes' copies of key are dropped when the pub/sub notice
// reaches them.
func (ca *Cache[T]) Set(ctx context.Context, key string, v T) error {
	k := keysFor(key)
	ca.c.writes.wait(ctx, k.value) // a Fetch that returned before this is written first
	raw, err := ca.o.Codec.Marshal(v)
	if err != nil {
		return fmt.Errorf("cachewatch: set %q: encode: %w", key, err)
	}
	fresh, hard := ca.jitter(ca.o.FreshTTL), ca.jitter(ca.o.HardTTL)
	hard = max(hard, fresh)
	expire := hard + max(hard/10, time.Second)
	now, noticed := ca.c.now(), ca.local.mark(k.value)
	_, err = ca.deg.call(ctx, "set", func(rctx context.Context) ([]any, error) {
		return nil, luascript.FetchSet.Run(ca.c.ctx(rctx), ca.c.rdb, []string{k.value, k.claim, k.waiters},
			raw, now.Add(fresh).UnixMilli(), now.Add(hard).UnixMilli(), expire.Milliseconds()).Err()
	})
	if err != nil {
		return fmt.Errorf("cachewatch: set %q: %w", key, err)
	}
	ca.c.announce(ctx, keysNotice([]string{k.value}))
	ca.local.put(noticed, key, k.value, ca.c.group(key), v, false, now.Add(fresh).UnixMilli(), now.Add(hard).UnixMilli())
	return nil
}

// Get returns key's cached value without a loader: found is false when
// nothing servable is stored (never cached, invalidated, or past its hard
// TTL). A value past FreshTTL is returned (found) but not refreshed: Get
// takes no claim and starts no work. It counts one lookup (hit, stale or
// miss); a cached "not found" (NegativeTTL) returns an error wrapping
// ErrNotFound.
func (ca *Cache[T]) Get(ctx context.Context, key string) (v T, found bool, err error) {
	k := keysFor(key)
	ca.c.writes.wait(ctx, k.value)
	group := ca.c.group(key)
	res, err := ca.deg.call(ctx, "get", func(rctx context.Context) ([]any, error) {
		return ca.c.rdb.HMGet(ca.c.ctx(rctx), k.value, "v", "f", "h", "n").Result()
	})
	if err != nil {
		ca.metricsFor(group).lookups.of(resultError).Inc()
		return v, false, fmt.Errorf("cachewatch: get %q: %w", key, err)
	}
	s, ok := storedFields(res)
	now := ca.c.now().UnixMilli()
	result := resultHit
	switch {
	case !ok || now >= s.hardUntil:
		ca.metricsFor(group).lookups.of(resultMiss).Inc()
		return v, false, nil
	case now >= s.freshUntil:
		result = resultStale
		ca.metricsFor(group).staleAge.Observe((time.Duration(now-s.freshUntil) * time.Millisecond).Seconds())
	}
	v, result, err = ca.decode(key, s, result)
	ca.metricsFor(group).lookups.of(result).Inc()
	return v, err == nil || s.negative, err
}

// storedFields decodes an HMGET of v, f, h, n; ok is false when nothing is
// stored.
func storedFields(res []any) (s stored, ok bool) {
	if len(res) != 4 {
		return s, false
	}
	raw, ok1 := res[0].(string)
	f, ok2 := res[1].(string)
	h, ok3 := res[2].(string)
	if !ok1 || !ok2 || !ok3 {
		return s, false
	}
	s.raw = raw
	s.freshUntil, _ = strconv.ParseInt(f, 10, 64)
	s.hardUntil, _ = strconv.ParseInt(h, 10, 64)
	n, _ := res[3].(string)
	s.negative = n == "1"
	return s, true
}
