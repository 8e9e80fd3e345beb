package instrument

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/cachewatch/cachewatch/internal/emit"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/cachewatch/cachewatch/internal/burst"
)

// Lookup results, as in the cachewatch_cache_lookups_total result label.
const (
	resultHit       = "hit"
	resultStale     = "stale"
	resultMiss      = "miss"
	resultCoalesced = "coalesced"
	resultFallback  = "fallback"
	resultError     = "error"
)

// results are the values of the lookups' result label, in lookupCounters'
// order.
var results = [...]string{resultHit, resultStale, resultMiss, resultCoalesced, resultFallback, resultError}

// lookupCounters are one key group's lookup counters, by result. An array
// searched, not a map: record runs at the bottom of every caller's stack,
// and a map lookup there made each fresh caller of a stampede grow its
// stack (TestCrowdCallersKeepTheirFirstStack).
type lookupCounters [len(results)]*emit.Counter

// of returns result's counter; result must be one of results.
func (l *lookupCounters) of(result string) *emit.Counter {
	for i := range results { // by index: a range over the array's values would copy it into the frame
		if results[i] == result {
			return l[i]
		}
	}
	panic("instrument: unknown lookup result")
}

// record counts one caller's lookup in its group's metrics gm and logs
// the decision.
func (ca *Cache[T]) record(ctx context.Context, span trace.Span, gm *groupMetrics, group, key, result string) {
	gm.lookups.of(result).Inc()
	if span.IsRecording() {
		tagSpan(span, group, result)
	}
	if result == resultMiss || result == resultCoalesced {
		gm.misses.Miss()
	}
	if ca.c.log.Enabled(ctx, slog.LevelDebug) {
		ca.logDecision(ctx, group, key, result)
	}
}

// tagSpan sets a Fetch span's key group and result.
func tagSpan(span trace.Span, group, result string) {
	span.SetAttributes(attribute.String("cachewatch.key_group", group), attribute.String("cachewatch.result", result))
}

// logDecision writes the debug line of one caller's lookup (its own
// function, so that callers who do not log keep a small stack frame).
func (ca *Cache[T]) logDecision(ctx context.Context, group, key, result string) {
	outcome := result
	if result == resultMiss {
		outcome = "recompute"
	}
	ca.c.log.LogAttrs(ctx, slog.LevelDebug, "cachewatch fetch",
		slog.String("key_group", group), slog.String("key", key), slog.String("outcome", outcome))
}

// groupMetrics are the per-caller metrics of one key group, resolved once:
// every caller of a stampede records one lookup, so the label lookup is
// kept off that path.
type groupMetrics struct {
	lookups        lookupCounters
	staleAge       *emit.Histogram
	hardTTLExpired *emit.Counter
	misses         *burst.Group // its misses, counted for the burst detector
}

func (ca *Cache[T]) metricsFor(group string) *groupMetrics {
	if gm, ok := ca.groupM.Load(group); ok {
		return gm.(*groupMetrics)
	}
	return ca.newGroupMetrics(group)
}

// newGroupMetrics resolves and keeps group's metric handles.
func (ca *Cache[T]) newGroupMetrics(group string) *groupMetrics {
	ca.groupsMu.Lock()
	defer ca.groupsMu.Unlock()
	if gm, ok := ca.groupM.Load(group); ok {
		return gm.(*groupMetrics)
	}
	gm := &groupMetrics{staleAge: ca.c.m.staleAge.WithLabelValues(group), misses: ca.bursts.Group(group),
		hardTTLExpired: ca.c.m.hardTTLExpired.WithLabelValues(group)}
	for i, r := range results {
		gm.lookups[i] = ca.c.m.lookups.WithLabelValues(group, r)
	}
	ca.groupM.Store(group, gm)
	return gm
}

// failureRuns tracks the keys whose refreshes are failing, per group, to
// report the longest current run. Only failing keys are kept, at most
// maxFailingKeys of them, each until its stored value expires in Redis.
type failureRuns struct {
	mu      sync.Mutex
	runs    map[string]map[string]failureRun // group → key → run
	size    atomic.Int64
	soonest atomic.Int64 // unix ms: the earliest until among the runs
}

// failureRun is one key's run of failed refreshes.
type failureRun struct {
	n     int64
	until int64 // unix ms: when the stored value expires
}

const maxFailingKeys = 10000

func (f *failureRuns) set(g *emit.GaugeVec, group, key string, n, until int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := f.runs[group]
	if keys == nil {
		keys = map[string]failureRun{}
		f.runs[group] = keys
	}
	if _, ok := keys[key]; !ok {
		if f.size.Load() >= maxFailingKeys {
			return
		}
		f.size.Add(1)
	}
	keys[key] = failureRun{n: n, until: until}
	if s := f.soonest.Load(); f.size.Load() == 1 || until < s {
		f.soonest.Store(until)
	}
	g.WithLabelValues(group).Set(float64(longest(keys)))
}

func (f *failureRuns) reset(g *emit.GaugeVec, group, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := f.runs[group]
	if _, ok := keys[key]; !ok {
		return
	}
	delete(keys, key)
	f.size.Add(-1)
	g.WithLabelValues(group).Set(float64(longest(keys)))
}

// expire ends the runs of keys whose stored value has expired by now (unix
// ms). Called once per read, it costs two atomic loads until a run is due.
func (f *failureRuns) expire(g *emit.GaugeVec, now int64) {
	if f.size.Load() == 0 || now < f.soonest.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	soonest := int64(math.MaxInt64)
	for group, keys := range f.runs {
		before := len(keys)
		for key, r := range keys {
			if now >= r.until {
				delete(keys, key)
				f.size.Add(-1)
			} else {
				soonest = min(soonest, r.until)
			}
		}
		if len(keys) != before {
			g.WithLabelValues(group).Set(float64(longest(keys)))
		}
	}
	f.soonest.Store(soonest)
}

func longest(keys map[string]failureRun) int64 {
	var n int64
	for _, r := range keys {
		n = max(n, r.n)
	}
	return n
}
