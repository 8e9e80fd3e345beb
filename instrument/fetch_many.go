package instrument

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/luascript"
)

// FetchMany returns the values of keys as Fetch would, reading them all in
// one round trip (a pipeline of the read script; on Redis Cluster, one per
// node). The keys that must be loaded and whose refresh claim this call
// obtained are loaded by one call of load, with those keys; each value it
// returns is stored under its claim, and a key it leaves out of its map
// counts as ErrNotFound (cached with NegativeTTL, else left out of the
// result). Stale values are served and refreshed in the background, one
// key per load call; keys being loaded by another caller are waited for as
// Fetch does. When Redis is unavailable, load is called directly for all
// keys, with the Cache's fallback concurrency.
//
// Each call of load counts as one loader call and one duration observation
// (cachewatch_loader_calls_total, cachewatch_loader_duration_seconds) in
// each key group among the keys it was given, with the call's result: a
// group's loader calls per refresh stay exact whatever the batch size, and
// a key load leaves out is a not-found answer, not a call of its own. Each
// key counts one lookup.
//
// The result holds every key that has a value; its error is load's
// (wrapped) or the first per-key error.
func (ca *Cache[T]) FetchMany(ctx context.Context, keys []string, load func(ctx context.Context, keys []string) (map[string]T, error)) (map[string]T, error) {
	out := make(map[string]T, len(keys))
	states, tokens, err := ca.readManyPatiently(ctx, keys)
	if err != nil {
		if cause, failing := ca.deg.failing(err); failing {
			return ca.fallbackMany(ctx, keys, load, err, cause)
		}
		ca.countLookups(ca.groupsOf(keys), resultError)
		return nil, fmt.Errorf("cachewatch: fetch many: waiting for Redis: %w", err)
	}
	var toLoad []int
	var firstErr error
	keep := func(err error) {
		if firstErr == nil && err != nil && !errors.Is(err, ErrNotFound) {
			firstErr = err
		}
	}
	for i, key := range keys {
		s, group := states[i], ca.c.group(key)
		one := loadOne(key, load)
		switch {
		case s.state == stateFresh || s.state == stateStale:
			result := resultHit
			if s.state == stateStale {
				result = resultStale
				ca.metricsFor(group).staleAge.Observe(ca.staleFor(s.freshUntil).Seconds())
			}
			if s.granted {
				l := &lookup[T]{ca: ca, key: key, group: group, k: keysFor(key), token: tokens[i], load: one}
				l.refreshInBackground(ctx)
			}
			v, result, err := ca.decode(key, s, result)
			ca.metricsFor(group).lookups.of(result).Inc()
			if err == nil {
				out[key] = v
			}
			keep(err)
		case s.granted:
			toLoad = append(toLoad, i)
		default: // another caller loads it: wait as Fetch does
			v, err := ca.Fetch(ctx, key, one)
			if err == nil {
				out[key] = v
			}
			keep(err)
		}
	}
	if len(toLoad) > 0 {
		keep(ca.loadMany(ctx, keys, tokens, toLoad, states, load, out))
	}
	return out, firstErr
}

// readMany runs the read script for every key in one pipeline.
func (ca *Cache[T]) readMany(ctx context.Context, keyList, tokens []string) ([]stored, error) {
	if ca.deg.open() {
		return nil, errBreakerOpen
	}
	now := ca.c.now().UnixMilli()
	calls := make([]*scriptCall, len(keyList))
	for i, key := range keyList {
		k := keysFor(key)
		calls[i] = newScriptCall("fetch many read", luascript.FetchRead, []string{k.value, k.claim},
			now, 0, ca.o.RefreshClaimTTL.Milliseconds(), tokens[i])
	}
	var cmds []*redis.Cmd
	_, err := ca.deg.call(ctx, "fetch many read", func(rctx context.Context) ([]any, error) {
		var err error
		cmds, err = ca.pipelineOnce(rctx, calls)
		return nil, err
	})
	if err != nil {
		return nil, err
	}
	states := make([]stored, len(cmds))
	for i, cmd := range cmds {
		res, err := cmd.Slice()
		if err != nil {
			return nil, err
		}
		if states[i], err = parseStored(res); err != nil {
			return nil, err
		}
	}
	return states, nil
}

// readManyPatiently reads the keys as readMany, sent again under the same
// tokens while Redis is slow rather than failing (patiently); a read
// abandoned at last has the claims it may have been granted released as
// orphans.
func (ca *Cache[T]) readManyPatiently(ctx context.Context, keyList []string) ([]stored, []string, error) {
	tokens := make([]string, len(keyList))
	for i := range keyList {
		tokens[i] = ca.c.claimToken(ca.c.hub.holder())
	}
	var states []stored
	mayHaveRun, err := ca.patiently(ctx, "", func() (err error) {
		states, err = ca.readMany(ctx, keyList, tokens)
		return err
	})
	if err != nil {
		if mayHaveRun {
			for i, key := range keyList {
				ca.releaseOrphan(keysFor(key), tokens[i])
			}
		}
		return nil, nil, err
	}
	return states, tokens, nil
}

// groupsOf returns the key group of each key.
func (ca *Cache[T]) groupsOf(keyList []string) []string {
	groups := make([]string, len(keyList))
	for i, key := range keyList {
		groups[i] = ca.c.group(key)
	}
	return groups
}

// loadMany loads the keys at indexes idx (whose claims this call holds) in
// one call of load and stores each answer under its claim.
func (ca *Cache[T]) loadMany(ctx context.Context, keyList, tokens []string, idx []int, states []stored,
	load func(context.Context, []string) (map[string]T, error), out map[string]T) error {
	batch := make([]string, len(idx))
	groups := make([]string, len(idx))
	for j, i := range idx {
		batch[j] = keyList[i]
		groups[j] = ca.c.group(batch[j])
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ca.o.RefreshClaimTTL)
	defer cancel()
	start := ca.c.now()
	vals, err := ca.callBatchLoader(lctx, batch, groups, load)
	end := ca.c.now()
	for j, i := range idx {
		l := lookup[T]{ca: ca, key: batch[j], group: groups[j], k: keysFor(batch[j]), token: tokens[i]}
		ca.metricsFor(l.group).lookups.of(resultMiss).Inc()
		if states[i].state == stateExpired {
			ca.c.m.hardTTLExpired.WithLabelValues(l.group).Inc()
		}
		switch v, ok := vals[l.key]; {
		case err != nil:
			l.failed(ctx)
		case ok:
			out[l.key] = v
			l.store(ctx, loaded[T]{v: v, took: end.Sub(start), at: end})
		case ca.o.NegativeTTL > 0:
			var zero T
			l.store(ctx, loaded[T]{v: zero, err: ErrNotFound, took: end.Sub(start), at: end})
		default:
			ca.giveBack(l.k, l.token)
		}
	}
	if err != nil {
		return fmt.Errorf("cachewatch: fetch many: load: %w", err)
	}
	return nil
}

// callBatchLoader calls a batch loader once for keys (of key groups groups,
// in the same order), timing and counting the call as callLoader does a
// loader's: one loader call and one duration observation per distinct key group among
// the keys, so that a group's loader calls per refresh stay exact whatever
// the batch size. The result is the call's: success when it returned
// without an error, however many keys it left out (each of those is a
// not-found answer).
func (ca *Cache[T]) callBatchLoader(ctx context.Context, keys, groups []string,
	load func(context.Context, []string) (map[string]T, error)) (map[string]T, error) {
	start := time.Now()
	vals, err := load(ctx, keys)
	ca.countSourceCall(distinct(groups), sourceResult(err), time.Since(start))
	return vals, err
}

// distinct returns the distinct strings of list, in first-seen order (a
// batch spans few key groups: a linear search beats a map).
func distinct(list []string) []string {
	var out []string
	for _, s := range list {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// fallbackMany serves FetchMany from the source while Redis is unavailable,
// counted as Fetch's fallback is: one loader call (or rejection) per key
// group, and per key a fallback lookup, or an error when no value came.
func (ca *Cache[T]) fallbackMany(ctx context.Context, keyList []string, load func(context.Context, []string) (map[string]T, error), cause error, causeLabel string) (map[string]T, error) {
	groups := ca.groupsOf(keyList)
	ca.deg.fallbacks.WithLabelValues(causeLabel).Inc()
	if err := ca.deg.acquire(ctx); err != nil {
		for _, group := range distinct(groups) {
			ca.c.m.loaderCalls.WithLabelValues(group, "rejected").Inc()
		}
		ca.countLookups(groups, resultError)
		return nil, fmt.Errorf("cachewatch: fetch many: Redis unavailable (%w) and no source slot free: %w", cause, err)
	}
	defer ca.deg.release()
	vals, err := ca.callBatchLoader(ctx, keyList, groups, load)
	if err != nil {
		ca.countLookups(groups, resultError)
		return nil, fmt.Errorf("cachewatch: fetch many: Redis unavailable (%w), load: %w", cause, err)
	}
	ca.countLookups(groups, resultFallback)
	return vals, nil
}

// countLookups counts one lookup of result per key, given the keys' groups.
func (ca *Cache[T]) countLookups(groups []string, result string) {
	for _, group := range groups {
		ca.metricsFor(group).lookups.of(result).Inc()
	}
}

// loadOne adapts a batch loader to one key.
func loadOne[T any](key string, load func(context.Context, []string) (map[string]T, error)) func(context.Context) (T, error) {
	return func(ctx context.Context) (T, error) {
		vals, err := load(ctx, []string{key})
		if err != nil {
			var zero T
			return zero, err
		}
		v, ok := vals[key]
		if !ok {
			return v, ErrNotFound
		}
		return v, nil
	}
}

// staleFor returns how far past freshUntil (unix ms) the clock is.
func (ca *Cache[T]) staleFor(freshUntil int64) time.Duration {
	return time.Duration(ca.c.now().UnixMilli()-freshUntil) * time.Millisecond
}
