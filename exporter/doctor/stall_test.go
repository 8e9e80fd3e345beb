package doctor_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

var cmdstat = regexp.MustCompile(`(?m)^cmdstat_(\w+):calls=(\d+),.*rejected_calls=(\d+),failed_calls=(\d+)`)

// commandCounts returns calls+rejected+failed per command from INFO
// commandstats: every attempt the server saw, refused ones included.
func commandCounts(t *testing.T, rdb *redis.Client) map[string]int {
	t.Helper()
	raw, err := rdb.Info(context.Background(), "commandstats").Result()
	must(t, err)
	out := map[string]int{}
	for _, m := range cmdstat.FindAllStringSubmatch(raw, -1) {
		for _, v := range m[2:] {
			n, _ := strconv.Atoi(v)
			out[m[1]] += n
		}
	}
	return out
}

// A stage the ACL refuses while the node answers is not retried in a loop:
// the run stops sampling, reports what it could (server stats, queues) with
// the reason, and the commands Redis received stay a handful.
func TestDoctorRefusedStageIsNotAHotLoop(t *testing.T) {
	for _, refused := range []string{"scan", "pexpiretime"} {
		t.Run(refused, func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			ctx := context.Background()
			must(t, admin.Do(ctx, "ACL", "SETUSER", "sampler", "on", ">pw", "~*", "+@all", "-"+refused).Err())
			for i := 0; i < 20; i++ {
				must(t, admin.Set(ctx, "lock:job:"+strconv.Itoa(i), "tok", time.Minute).Err())
			}
			must(t, admin.RPush(ctx, "jobs", "a").Err())
			before := commandCounts(t, admin)
			r, err := doctor.Run(ctx, doctor.Options{
				Exporter: exporter.Options{Target: exporter.Target{Addrs: []string{srv.Addr}, Username: "sampler", Password: "pw"},
					Queues: []string{"jobs"}},
				Interval: 10 * time.Millisecond, MaxDuration: 10 * time.Second,
			})
			must(t, err)
			after := commandCounts(t, admin)
			for _, c := range []string{"scan", "pexpiretime", "info", "ping"} {
				// Two covers of one sample each (PEXPIRETIME: one pipeline of
				// the 21 keys and one of the 20 locks each; SCAN: one for the
				// keyspace pass and a few for the lock pass's SCAN … MATCH
				// COUNT 25), where a loop without pauses would run
				// thousands in MaxDuration.
				limit := 4
				switch c {
				case "pexpiretime":
					limit = 2 * (21 + 20)
				case "scan":
					limit = 2 * 4
				}
				if n := after[c] - before[c]; n > limit {
					t.Errorf("%s: Redis received %d during the run", c, n)
				}
			}
			if after[refused]-before[refused] == 0 {
				t.Fatalf("%s was never tried: the test does not exercise the refusal", refused)
			}
			if r.Complete() || !strings.Contains(strings.Join(r.Incomplete, "\n"), "(noperm)") {
				t.Fatalf("a refused stage must make the run incomplete with its reason: %q", r.Incomplete)
			}
			// Partial results are kept: the server was read and the queue sampled.
			if len(r.Nodes) != 1 || !r.Nodes[0].Up || r.Nodes[0].Version == "" {
				t.Fatalf("nodes %+v", r.Nodes)
			}
			got := briefs(t, r)
			if !containsCheck(got, doctor.CheckSamplerForbidden) || !containsCheck(got, doctor.CheckPartialCoverage) {
				t.Fatalf("findings %v", got)
			}
		})
	}
}

func containsCheck(bs []brief, check string) bool {
	for _, b := range bs {
		if b.Check == check {
			return true
		}
	}
	return false
}

// On a Cluster that lost a slot every master still answers, but refuses
// key commands with CLUSTERDOWN. Doctor retries a few times with growing
// pauses, then reports the run incomplete with the reason; the PTTLs Redis
// receives stay bounded (a retry loop without pauses sends them by the
// million in 20 s).
func TestDoctorClusterDownIsBounded(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	cc := cl.Client(t)
	for i := 0; i < 30; i++ {
		must(t, cc.Set(ctx, "lock:job:"+strconv.Itoa(i), "tok", time.Minute).Err())
	}
	admins := make([]*redis.Client, len(cl.Nodes))
	for i, n := range cl.Nodes {
		admins[i] = n.Client(t)
	}
	// Slot 0 is owned by the first master; without it that master sees
	// the cluster failed (cluster-require-full-coverage) and answers
	// CLUSTERDOWN to key commands.
	must(t, admins[0].Do(ctx, "CLUSTER", "DELSLOTS", "0").Err())
	poll.Until(t, "the cluster to fail", func() bool {
		return strings.Contains(admins[0].ClusterInfo(ctx).Val(), "cluster_state:fail")
	})
	pttl := func() int {
		n := 0
		for _, a := range admins {
			n += commandCounts(t, a)["pexpiretime"]
		}
		return n
	}
	before := pttl()
	r, err := doctor.Run(ctx, doctor.Options{
		Exporter: exporter.Options{Target: exporter.Target{Addrs: cl.Addrs()}},
		Interval: 10 * time.Millisecond, MaxDuration: 20 * time.Second,
	})
	must(t, err)
	// Two covers of at most maxStalls (3) samples, each at most one
	// pipeline of every key of a node in each of the two passes, and one
	// more of the locks when a lock pass completes (read again at its end).
	if n := pttl() - before; n == 0 || n > 2*3*3*30 {
		t.Fatalf("Redis received %d PEXPIRETIME during the run", n)
	}
	if r.Complete() || !strings.Contains(strings.Join(r.Incomplete, "\n"), "CLUSTERDOWN") {
		t.Fatalf("incomplete reasons %q", r.Incomplete)
	}
}
