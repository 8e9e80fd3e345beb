package sampler

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// serverLatencyBuckets are the buckets of signals.ServerCommandDuration.
var serverLatencyBuckets = snapshot.LatencyBuckets

// latencyStage reads LATENCY HISTOGRAM (Redis 7+) into the server figures;
// a failure leaves the histograms out and is retried after its backoff.
type latencyStage struct {
	retry backoff
}

// run adds LATENCY HISTOGRAM to st on Redis 7 and later, unless the stage
// is in its backoff.
func (l *latencyStage) run(r *sampleRun, st *snapshot.ServerStats) {
	if majorVersion(st.Version) < 7 || r.skip(&l.retry) {
		return
	}
	h, se := readLatencyHistograms(r.ctx, r.n.env.rdb)
	if se != nil {
		r.failed(se, &l.retry)
		return
	}
	l.retry.reset()
	st.Histograms = h
}

// readLatencyHistograms reads LATENCY HISTOGRAM for every command the
// server has run (a reply bounded by the server's command table) and folds
// the commands cachewatch does not report by name into "other".
func readLatencyHistograms(ctx context.Context, rdb *redis.Client) (map[string]*snapshot.CommandHistogram, *StageError) {
	reply, err := rdb.Do(ctx, "latency", "histogram").Result()
	if err != nil {
		return nil, stageErr(StageLatency, err)
	}
	out, err := parseLatencyHistogram(reply)
	if err != nil {
		return nil, stageErr(StageLatency, err)
	}
	return out, nil
}

// parseLatencyHistogram parses the RESP2 (flat arrays) or RESP3 (maps)
// reply: command name → calls and histogram_usec, a cumulative count per
// power-of-two microsecond bucket.
func parseLatencyHistogram(reply any) (map[string]*snapshot.CommandHistogram, error) {
	pairs, err := kvPairs(reply)
	if err != nil {
		return nil, err
	}
	out := map[string]*snapshot.CommandHistogram{}
	for i := 0; i+1 < len(pairs); i += 2 {
		name, ok := pairs[i].(string)
		if !ok {
			return nil, fmt.Errorf("%w: LATENCY HISTOGRAM command name %v", ErrMalformed, pairs[i])
		}
		calls, raw, err := commandHistogram(pairs[i+1])
		if err != nil {
			return nil, fmt.Errorf("%w: LATENCY HISTOGRAM %s: %v", ErrMalformed, truncate(name, 30), err)
		}
		label := commandLabel(name)
		h := out[label]
		if h == nil {
			h = &snapshot.CommandHistogram{Buckets: make(map[float64]uint64, len(serverLatencyBuckets))}
			for _, ub := range serverLatencyBuckets {
				h.Buckets[ub] = 0
			}
			out[label] = h
		}
		h.Count += calls
		addBuckets(h.Buckets, raw, calls)
	}
	return out, nil
}

// commandHistogram reads one command's "calls" and "histogram_usec".
func commandHistogram(v any) (uint64, []any, error) {
	fields, err := kvPairs(v)
	if err != nil {
		return 0, nil, err
	}
	var calls uint64
	var raw []any
	for i := 0; i+1 < len(fields); i += 2 {
		switch fields[i] {
		case "calls":
			n, ok := fields[i+1].(int64)
			if !ok || n < 0 {
				return 0, nil, fmt.Errorf("calls %v", fields[i+1])
			}
			calls = uint64(n)
		case "histogram_usec":
			if raw, err = kvPairs(fields[i+1]); err != nil {
				return 0, nil, err
			}
		}
	}
	return calls, raw, nil
}

// addBuckets adds one command's cumulative counts (bucket µs, count, …) to
// dst: each catalog bucket gets the count of the largest reported bucket
// at or below it (Redis lists only buckets where the count grows).
func addBuckets(dst map[float64]uint64, raw []any, calls uint64) {
	type point struct {
		le    float64
		count uint64
	}
	var pts []point
	for i := 0; i+1 < len(raw); i += 2 {
		usec, ok1 := raw[i].(int64)
		count, ok2 := raw[i+1].(int64)
		if ok1 && ok2 && usec >= 0 && count >= 0 {
			pts = append(pts, point{float64(usec) / 1e6, uint64(count)})
		}
	}
	for _, ub := range serverLatencyBuckets {
		var c uint64
		for _, p := range pts {
			if p.le <= ub*(1+1e-9) {
				c = max(c, p.count)
			}
		}
		dst[ub] += min(c, calls)
	}
}

// kvPairs flattens a RESP2 array or a RESP3 map into key, value, ….
func kvPairs(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		if len(x)%2 != 0 {
			return nil, fmt.Errorf("%w: odd-length array", ErrMalformed)
		}
		return x, nil
	case map[any]any:
		out := make([]any, 0, 2*len(x))
		for k, v := range x {
			out = append(out, k, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unexpected %T", ErrMalformed, v)
}

// majorVersion is the major version in INFO's redis_version ("7.0.15" → 7),
// 0 when unknown.
func majorVersion(v string) int {
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(major)
	if err != nil || n < 0 || n > math.MaxInt16 {
		return 0
	}
	return n
}
