package sampler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

// reading is what one INFO reply told: the server figures published, and
// what the sampler itself needs from INFO commandstats.
type reading struct {
	stats *snapshot.ServerStats
	// samplerCalls are the calls of samplerCommands, by commandstats name.
	samplerCalls map[string]uint64
	// scanUsec is the server's time in SCAN, flushCalls the calls of
	// FLUSHALL, FLUSHDB and SWAPDB (commandstats).
	scanUsec, flushCalls uint64
	// newRun is set when the run_id is not the last read's (restarted when
	// there was one: the server restarted); keysRewritten when FLUSHALL,
	// FLUSHDB, SWAPDB or a resync changed keys since.
	newRun, restarted, keysRewritten bool
}

// parseInfo splits an INFO reply into its key:value fields. Section headers
// ("# Stats"), blank lines and CRLF are skipped; any other line without a
// colon makes the reply malformed.
func parseInfo(s string) (map[string]string, error) {
	fields := make(map[string]string, 64)
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: line %q has no key:value", ErrMalformed, truncate(line, 40))
		}
		fields[k] = v
	}
	return fields, nil
}

// parseServerStats reads the fields the sampler needs from a parsed INFO
// reply. Required stats fields that are missing or not numbers make the
// reply malformed; optional ones (latencystats before Redis 7) are skipped.
func parseServerStats(fields map[string]string) (*reading, error) {
	st := &snapshot.ServerStats{
		RunID: fields["run_id"], Version: fields["redis_version"],
		Cluster: fields["cluster_enabled"] == "1", Role: fields["role"],
		MaxmemoryPolicy: fields["maxmemory_policy"],
		Commands:        map[string]snapshot.CommandStat{},
		Latency:         map[string]map[string]float64{},
	}
	r := &reading{stats: st, samplerCalls: map[string]uint64{}}
	required := []struct {
		key string
		dst *uint64
	}{
		{"keyspace_hits", &st.KeyspaceHits}, {"keyspace_misses", &st.KeyspaceMisses},
		{"expired_keys", &st.ExpiredKeys}, {"evicted_keys", &st.EvictedKeys},
		{"connected_clients", &st.ConnectedClients}, {"blocked_clients", &st.BlockedClients},
		{"used_memory", &st.MemoryUsed}, {"maxmemory", &st.MemoryMax},
	}
	for _, r := range required {
		v, ok := fields[r.key]
		if !ok {
			return nil, fmt.Errorf("%w: no %s field", ErrMalformed, r.key)
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %s=%q is not a count", ErrMalformed, r.key, truncate(v, 20))
		}
		*r.dst = n
	}
	for k, v := range fields {
		var err error
		switch {
		case strings.HasPrefix(k, "cmdstat_"):
			name := strings.TrimPrefix(k, "cmdstat_")
			err = addCommandStat(st.Commands, name, v)
			if err == nil {
				r.internalStat(name, v)
			}
		case strings.HasPrefix(k, "latency_percentiles_usec_"):
			err = addLatency(st.Latency, strings.TrimPrefix(k, "latency_percentiles_usec_"), v)
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

// reportedCommands are the commands whose commandstats are exported by name:
// scripts, and the commands lock and cache code uses. Others fold into "other".
var reportedCommands = map[string]bool{
	"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true, "script": true,
	"set": true, "get": true, "getex": true, "getdel": true, "mget": true, "mset": true, "del": true, "unlink": true,
	"expire": true, "pexpire": true, "exists": true, "setnx": true, "incr": true,
	"hget": true, "hset": true, "hgetall": true,
	"xadd": true, "xreadgroup": true, "xack": true, "xautoclaim": true, "xclaim": true,
	"lpush": true, "rpush": true, "lmove": true, "blmove": true, "brpop": true, "zadd": true, "zrangebyscore": true,
}

// commandLabel maps a commandstats name ("script|load", "GET") to the label
// value it is exported under.
func commandLabel(name string) string {
	name = strings.ToLower(name)
	if i := strings.IndexByte(name, '|'); i >= 0 {
		name = name[:i]
	}
	if reportedCommands[name] {
		return name
	}
	return "other"
}

// addCommandStat parses "calls=1,usec=8,usec_per_call=8.00,rejected_calls=0,failed_calls=0".
func addCommandStat(dst map[string]snapshot.CommandStat, name, v string) error {
	kv, err := parseKV(v)
	if err != nil {
		return fmt.Errorf("%w: cmdstat_%s: %v", ErrMalformed, truncate(name, 30), err)
	}
	calls, err1 := strconv.ParseUint(kv["calls"], 10, 64)
	usec, err2 := strconv.ParseUint(kv["usec"], 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("%w: cmdstat_%s: calls or usec not a count", ErrMalformed, truncate(name, 30))
	}
	var failed uint64
	for _, f := range []string{"failed_calls", "rejected_calls"} { // absent before Redis 6.2
		if s, ok := kv[f]; ok {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: cmdstat_%s: %s not a count", ErrMalformed, truncate(name, 30), f)
			}
			failed += n
		}
	}
	label := commandLabel(name)
	cs := dst[label]
	cs.Calls += calls
	cs.Seconds += float64(usec) / 1e6
	cs.Failed += failed
	dst[label] = cs
	return nil
}

// addLatency parses "p50=8.031,p99=8.031,p99.9=8.031" (microseconds). Only
// reported commands without subcommands are kept: percentiles of different
// commands cannot be merged into "other".
func addLatency(dst map[string]map[string]float64, name, v string) error {
	kv, err := parseKV(v)
	if err != nil {
		return fmt.Errorf("%w: latency_percentiles_usec_%s: %v", ErrMalformed, truncate(name, 30), err)
	}
	ps := make(map[string]float64, len(kv))
	for p, s := range kv {
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f < 0 || f != f {
			return fmt.Errorf("%w: latency_percentiles_usec_%s: %s not a number", ErrMalformed, truncate(name, 30), truncate(p, 10))
		}
		if p == "p50" || p == "p99" || p == "p99.9" {
			ps[p] = f / 1e6
		}
	}
	name = strings.ToLower(name)
	if strings.IndexByte(name, '|') < 0 && reportedCommands[name] {
		dst[name] = ps
	}
	return nil
}

// parseKV splits "a=1,b=2".
func parseKV(s string) (map[string]string, error) {
	out := make(map[string]string, 5)
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(part, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("field %q is not key=value", truncate(part, 30))
		}
		out[k] = v
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// internalStat keeps what the sampler itself needs from one commandstats
// line (already checked by addCommandStat).
func (r *reading) internalStat(name, v string) {
	kv, _ := parseKV(v)
	calls, _ := strconv.ParseUint(kv["calls"], 10, 64)
	switch {
	case isSamplerCommand(name):
		r.samplerCalls[name] = calls
	case name == "scan":
		r.scanUsec, _ = strconv.ParseUint(kv["usec"], 10, 64)
	case name == "flushall", name == "flushdb", name == "swapdb":
		r.flushCalls += calls
	}
}

// parseScanUsec reads the server's time in SCAN from an INFO commandstats
// reply; false when the reply is malformed or has no SCAN line.
func parseScanUsec(raw string) (uint64, bool) {
	fields, err := parseInfo(raw)
	if err != nil {
		return 0, false
	}
	kv, err := parseKV(fields["cmdstat_scan"])
	if err != nil {
		return 0, false
	}
	usec, err := strconv.ParseUint(kv["usec"], 10, 64)
	return usec, err == nil
}

func isSamplerCommand(name string) bool {
	for _, c := range samplerCommands {
		if c == name {
			return true
		}
	}
	return false
}
