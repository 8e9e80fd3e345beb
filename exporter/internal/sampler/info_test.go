package sampler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter/internal/snapshot"
)

const sampleInfo = "# Server\r\nredis_version:7.0.15\r\nrun_id:248fff18\r\n\r\n# Clients\r\nconnected_clients:3\r\nblocked_clients:1\r\n" +
	"# Memory\r\nused_memory:1038368\r\nmaxmemory:0\r\nmaxmemory_policy:allkeys-lfu\r\n" +
	"# Stats\r\nkeyspace_hits:10\r\nkeyspace_misses:4\r\nexpired_keys:2\r\nevicted_keys:0\r\n" +
	"# Cluster\r\ncluster_enabled:0\r\n" +
	"# Commandstats\r\ncmdstat_get:calls=7,usec=21,usec_per_call=3.00,rejected_calls=1,failed_calls=2\r\n" +
	"cmdstat_script|load:calls=1,usec=4,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_script|flush:calls=2,usec=6,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=5,usec=50,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_ping:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
	"# Latencystats\r\nlatency_percentiles_usec_get:p50=3.007,p99=8.031,p99.9=8.031\r\n" +
	"latency_percentiles_usec_script|load:p50=4.015,p99=4.015,p99.9=4.015\r\n"

func TestParseServerStats(t *testing.T) {
	fields, err := parseInfo(sampleInfo)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := parseServerStats(fields)
	if err != nil {
		t.Fatal(err)
	}
	st := rd.stats
	if st.KeyspaceHits != 10 || st.KeyspaceMisses != 4 || st.ConnectedClients != 3 || st.BlockedClients != 1 ||
		st.MaxmemoryPolicy != "allkeys-lfu" || st.Cluster || st.RunID != "248fff18" {
		t.Fatalf("stats %+v", st)
	}
	if g := st.Commands["get"]; g.Calls != 7 || g.Failed != 3 || g.Seconds != 21e-6 {
		t.Fatalf("get %+v", g)
	}
	if s := st.Commands["script"]; s.Calls != 3 { // subcommands fold into their command
		t.Fatalf("script %+v", s)
	}
	if o := st.Commands["other"]; o.Calls != 6 {
		t.Fatalf("other %+v", o)
	}
	if p := st.Latency["get"]["p99"]; p != 8.031e-6 {
		t.Fatalf("get p99 %v", p)
	}
	if _, ok := st.Latency["script"]; ok {
		t.Fatal("subcommand percentiles cannot be merged and must not be exported")
	}
}

func TestParseMalformed(t *testing.T) {
	for name, in := range map[string]string{
		"no colon":         "keyspace_hits 10\r\n",
		"missing field":    strings.Replace(sampleInfo, "keyspace_hits:10", "keyspace_hitz:10", 1),
		"not a number":     strings.Replace(sampleInfo, "keyspace_hits:10", "keyspace_hits:ten", 1),
		"negative":         strings.Replace(sampleInfo, "evicted_keys:0", "evicted_keys:-1", 1),
		"bad commandstat":  strings.Replace(sampleInfo, "calls=7,usec=21", "calls=7;usec=21", 1),
		"bad calls":        strings.Replace(sampleInfo, "calls=7,", "calls=x,", 1),
		"bad percentile":   strings.Replace(sampleInfo, "p99=8.031,", "p99=NaN,", 1),
		"bad failed count": strings.Replace(sampleInfo, "failed_calls=2", "failed_calls=-2", 1),
	} {
		fields, err := parseInfo(in)
		if err == nil {
			_, err = parseServerStats(fields)
		}
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
}

// FuzzParseInfo feeds arbitrary INFO text (stats, commandstats,
// latencystats) to the parsers: they must never panic, and either fail with
// ErrMalformed or return stats without negative or NaN values.
func FuzzParseInfo(f *testing.F) {
	f.Add(sampleInfo)
	f.Add("")
	f.Add("cmdstat_get:calls=1\r\n")
	f.Add("latency_percentiles_usec_get:p50=1e309\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		fields, err := parseInfo(s)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("parseInfo error not ErrMalformed: %v", err)
			}
			return
		}
		rd, err := parseServerStats(fields)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("parseServerStats error not ErrMalformed: %v", err)
			}
			return
		}
		st := rd.stats
		for c, cs := range st.Commands {
			if cs.Seconds < 0 || cs.Seconds != cs.Seconds {
				t.Fatalf("%s: seconds %v", c, cs.Seconds)
			}
		}
		for c, ps := range st.Latency {
			for p, v := range ps {
				if v < 0 || v != v {
					t.Fatalf("%s %s: %v", c, p, v)
				}
			}
		}
	})
}

func FuzzParseClusterMasters(f *testing.F) {
	f.Add("07c3 127.0.0.1:30004@31004,host slave e7d1 0 1426238317239 4 connected\n" +
		"e7d1 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460\n")
	f.Fuzz(func(t *testing.T, s string) {
		for _, a := range parseClusterMasters(s) {
			if a == "" || strings.Contains(a, "@") {
				t.Fatalf("bad master address %q", a)
			}
		}
	})
}

func TestExpirySyncScore(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	p := newKeyPass(start)
	for i := 0; i < 20; i++ { // 20 keys in the second 100s from now
		p.addKey("sync", 100*time.Second+time.Duration(i)*time.Millisecond, start)
	}
	for i := 0; i < 60; i++ { // 60 keys one per second over a minute
		p.addKey("even", time.Duration(i)*time.Second, start)
	}
	for i := 0; i < 120; i++ { // 120 keys, two per second over a minute
		p.addKey("dense", time.Duration(i/2)*time.Second, start)
	}
	p.addKey("single", 50*time.Second, start)
	p.addKey("forever", -1, start)
	p.finish(start)
	for g, want := range map[string]float64{"sync": 20, "even": 1, "dense": 1, "single": 1, "forever": 0} {
		if got := p.groups[g].syncScore; got != want {
			t.Errorf("%s: score %v, want %v", g, got, want)
		}
	}
}

func TestHotKeysTopK(t *testing.T) {
	h := hotKeys{k: 3}
	for i, f := range []int64{5, 1, 9, 7, 3, 0, 8} {
		h.offer(snapshot.HotKey{Key: string(rune('a' + i)), Freq: f})
	}
	got := h.sorted()
	if len(got) != 3 || got[0].Freq != 9 || got[1].Freq != 8 || got[2].Freq != 7 {
		t.Fatalf("top 3 = %+v", got)
	}
}
