package e2e

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/cachewatch/cachewatch/internal/doccheck"
	"github.com/cachewatch/cachewatch/internal/figures"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// The sharded probing of TestProbeShards.
const (
	// shardTargetsEnv sets how many redis-servers are probed beside the
	// Cluster (shardDefaultTargets by default, sized for CI).
	shardTargetsEnv     = "CACHEWATCH_SHARD_TARGETS"
	shardDefaultTargets = 6
	// shardEvery is the module's sample interval and the scrape interval.
	shardEvery = 3 * time.Second
	// shardIdle is every replica's --probe.idle-timeout.
	shardIdle = 20 * time.Second
	// shardJobPrefix names the documented jobs, one per replica: -0, -1, -2.
	shardJobPrefix = "cachewatch-probe-"
	// shardSelfJob scrapes every replica's own /metrics.
	shardSelfJob = "cachewatch-exporter"
	// testClientName names the test's own connections to Redis, left out
	// when counting the exporters'.
	testClientName = "cachewatch-e2e"
)

// TestProbeShards runs the sharded probing of docs/exporter.md as a reader
// deploys it: three `cachewatch exporter --probe.modules-file` replicas
// and a real Prometheus with the documented scrape configuration (file
// service discovery, one job per replica, hashmod on the target), the
// targets throwaway redis-servers and a 3-master Cluster. Through the
// Prometheus API it checks that every target is scraped by exactly one
// replica, the one its hash names, and sampled by it alone; that every
// scrape serving lock or key figures taken after a change (SET with and
// without TTL, DEL) serves them exact, and how soon they are; that a
// target removed from service discovery has its sampler stopped and its
// connections closed once the idle timeout has passed since its last
// probe, not before; and it reports the probe latency (Prometheus's
// scrape_duration_seconds). CACHEWATCH_SHARD_TARGETS=60 runs it at full
// size (docs/benchmarks.md).
func TestProbeShards(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: starts redis-servers, a Cluster, 3 exporters and Prometheus for about two minutes; skipped with -short")
	}
	t.Parallel()
	bins := findBinaries(t)
	ctx := context.Background()
	n := shardDefaultTargets
	if v := os.Getenv(shardTargetsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 4 {
			t.Fatalf("%s=%q: want a count of at least 4", shardTargetsEnv, v)
		}
	} else {
		t.Logf("%d redis-servers and a Cluster; the full size: %s=60 go test -run TestProbeShards -v -timeout 30m ./internal/e2e", n, shardTargetsEnv)
	}
	began := time.Now()
	doc := readShardDoc(t)

	// The targets, each with keys of its own; every node holds a lock and
	// a key that never change, so that each node's figures are served.
	var targets []*shardTarget
	for i := range n {
		targets = append(targets, newStandaloneTarget(t, i))
	}
	targets = append(targets, newClusterTarget(t, n))
	seeded := time.Now()

	// The replicas, each probed only by its job.
	bin := buildCachewatch(t, t.TempDir())
	modules := filepath.Join(t.TempDir(), "modules.yml")
	if err := os.WriteFile(modules, fmt.Appendf(nil, "modules:\n  %s:\n    interval: %s\n", doc.module, shardEvery), 0o600); err != nil {
		t.Fatal(err)
	}
	replicas := make([]*process, doc.replicas)
	addrs := make([]string, doc.replicas)
	for i := range replicas {
		var port int
		replicas[i], port = startOnFreePort(t, fmt.Sprintf("exporter-%d", i), bin, func(port int) []string {
			return []string{"exporter", "--web.listen-address=" + loopback(port), "--probe.modules-file=" + modules,
				"--probe.idle-timeout=" + shardIdle.String()}
		}, func(port int) error { return httpOK("http://" + loopback(port) + "/metrics") })
		addrs[i] = loopback(port)
	}

	// Prometheus with the documented jobs, discovering the targets from a
	// file, and a job scraping the replicas' own /metrics.
	sdDir := t.TempDir()
	writeTargets(t, sdDir, targets)
	cfg := filepath.Join(t.TempDir(), "prometheus.yml")
	every := model.Duration(shardEvery).String()
	writeJSON(t, cfg, map[string]any{
		"global": map[string]any{"scrape_interval": every, "scrape_timeout": every},
		"scrape_configs": append(doc.jobs(t, filepath.Join(sdDir, "*.yml"), addrs), map[string]any{
			"job_name": shardSelfJob, "static_configs": []any{map[string]any{"targets": addrs}},
		}),
	})
	prom := runPrometheus(t, "prometheus", bins.prometheus, cfg)
	api := prom.api
	promStarted := time.Now()
	defer func() {
		for _, p := range append(replicas, prom.p) {
			p.alive(t)
		}
		t.Logf("elapsed %v", time.Since(began).Round(time.Second))
	}()
	t.Logf("%d redis-servers, a Cluster, %d replicas and Prometheus up after %v; load %s", n, len(replicas),
		time.Since(began).Round(time.Second), figures.LoadAvg())

	up := fmt.Sprintf(`count(up{job=~"%s.*"} == 1)`, shardJobPrefix)
	if err := poll.Check(ctx, dataTimeout, time.Second, func() error {
		if got := scalar(ctx, api, up); got != float64(len(targets)) {
			return fmt.Errorf("%v of %d targets up", got, len(targets))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("all %d targets scraped up after %v", len(targets), time.Since(promStarted).Round(time.Millisecond))

	// Exact from the first figures: every key was written before any
	// sampler started.
	for _, tg := range targets {
		tg.changed = seeded
	}
	awaitExact(t, api, targets, seeded)
	settled := time.Now()

	notified := fmt.Sprintf(`count(min by (target) (cachewatch_exporter_lock_notifications{job=~"%s.*"}) == 1)`, shardJobPrefix)
	if err := poll.Check(ctx, dataTimeout, time.Second, func() error {
		if got := scalar(ctx, api, notified); got != float64(len(targets)) {
			return fmt.Errorf("%v of %d targets' lock figures kept exact by keyspace notifications on every node", got, len(targets))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Changes in three redis-servers and the Cluster.
	changed := []*shardTarget{targets[0], targets[1], targets[2], targets[n]}
	var lockLags, keyLags []time.Duration
	for _, step := range []struct {
		what  string
		apply func(*shardTarget)
	}{
		{"a lock without TTL, a lock with a TTL and a key written", func(tg *shardTarget) {
			tg.set(t, "lock:orders:new-a", false)
			tg.set(t, "lock:orders:new-b", true)
			tg.set(t, "cache:new", true)
		}},
		{"a lock deleted, a lock's TTL dropped by SET, a key without TTL written", func(tg *shardTarget) {
			tg.del(t, "lock:orders:new-a")
			tg.set(t, "lock:orders:new-b", false)
			tg.set(t, "cache:new-config", false)
		}},
	} {
		from := time.Now()
		for _, tg := range changed {
			step.apply(tg)
			tg.changed = time.Now()
		}
		lags := awaitExact(t, api, changed, from)
		var locks, keys []time.Duration
		for _, tg := range changed {
			locks, keys = append(locks, lags[tg].locks), append(keys, lags[tg].keys)
		}
		t.Logf("%s in %d targets: exact through Prometheus after at most %v (locks) and %v (keys); interval %v",
			step.what, len(changed), slices.Max(locks).Round(time.Millisecond), slices.Max(keys).Round(time.Millisecond), shardEvery)
		lockLags, keyLags = append(lockLags, locks...), append(keyLags, keys...)
	}

	// Exactly once, over the whole run.
	owners, once := exactlyOnce(t, api, targets, addrs, doc.modulus, promStarted)

	// A target leaves service discovery: its sampler stops once the idle
	// timeout has passed since its last probe, and its connections close.
	gone := targets[n-1]
	stopAfter, sinceLastProbe := removeTarget(t, api, gone, targets, addrs, owners[gone.param], sdDir)

	// The probe latency, every scrape since the first figures were exact.
	durations := scrapeDurations(t, api, settled)

	slices.Sort(lockLags)
	slices.Sort(keyLags)
	maxLag := max(slices.Max(lockLags), slices.Max(keyLags))
	t.Logf("FIGURES %d targets (%d redis-servers and a 3-master Cluster), %d replicas, interval %v, idle timeout %v: "+
		"every target scraped by exactly one replica: %t; changed lock and key figures exact through Prometheus after "+
		"%v / %v (locks, median / max), %v / %v (keys) = at most %.2f intervals; removed target's sampler stopped "+
		"%v after its removal, %v after its last probe; probe p50 %v, p99 %v, max %v over %d scrapes; load %s",
		len(targets), n, len(replicas), shardEvery, shardIdle, once,
		figures.Quantile(lockLags, 0.5), figures.Quantile(lockLags, 1), figures.Quantile(keyLags, 0.5), figures.Quantile(keyLags, 1),
		maxLag.Seconds()/shardEvery.Seconds(), stopAfter.Round(100*time.Millisecond), sinceLastProbe.Round(100*time.Millisecond),
		figures.Quantile(durations, 0.5), figures.Quantile(durations, 0.99), figures.Quantile(durations, 1), len(durations), figures.LoadAvg())
}

// shardDoc is the documented scrape configuration of sharded probing with
// file service discovery (docs/exporter.md, "Probing many Redis").
type shardDoc struct {
	raw      []map[string]any // the jobs as the page writes them
	module   string           // the module the jobs probe with
	replicas int              // one job per replica
	modulus  int              // of the hashmod relabelling
}

// readShardDoc reads the page's prometheus-config block that discovers
// targets from files, failing t if it no longer has the shape the test
// fills in.
func readShardDoc(t *testing.T) shardDoc {
	t.Helper()
	root, err := doccheck.Root()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := doccheck.Blocks(root, "docs/exporter.md")
	if err != nil {
		t.Fatal(err)
	}
	var text string
	for _, b := range blocks {
		if b.Marker == "check: prometheus-config" && strings.Contains(b.Text, "file_sd_configs:") {
			if text != "" {
				t.Fatalf("docs/exporter.md has two prometheus-config blocks with file_sd_configs; %s", b)
			}
			text = b.Text
		}
	}
	var file struct {
		ScrapeConfigs []map[string]any `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(text), &file); err != nil || len(file.ScrapeConfigs) < 2 {
		t.Fatalf("docs/exporter.md: no prometheus-config block with file_sd_configs and a job per replica (%v)", err)
	}
	d := shardDoc{raw: file.ScrapeConfigs, replicas: len(file.ScrapeConfigs)}
	for i, job := range d.raw {
		if name := job["job_name"]; name != shardJobPrefix+strconv.Itoa(i) {
			t.Fatalf("docs/exporter.md: job %d is named %v, want %s%d", i, name, shardJobPrefix, i)
		}
		params, _ := job["params"].(map[string]any)
		module, _ := params["module"].([]any)
		if len(module) != 1 {
			t.Fatalf("docs/exporter.md: job %d probes with params %v, want one module", i, params)
		}
		if d.module == "" {
			d.module = fmt.Sprint(module[0])
		}
		for _, r := range relabelRules(t, job) {
			if r["action"] == "hashmod" {
				d.modulus, _ = r["modulus"].(int)
			}
		}
	}
	if d.modulus != d.replicas {
		t.Fatalf("docs/exporter.md: hashmod modulus %d for %d replicas", d.modulus, d.replicas)
	}
	return d
}

// jobs returns the documented jobs as a reader fills them in: the files
// service discovery reads, the scrape interval and each replica's address
// are the test's, the rest is the page's.
func (d shardDoc) jobs(t *testing.T, files string, replicas []string) []any {
	t.Helper()
	if len(replicas) != d.replicas {
		t.Fatalf("%d replicas for the page's %d jobs", len(replicas), d.replicas)
	}
	var out []any
	for i, job := range d.raw {
		job["scrape_interval"] = model.Duration(shardEvery).String()
		sd, _ := job["file_sd_configs"].([]any)
		if len(sd) != 1 {
			t.Fatalf("docs/exporter.md: job %d has %d file_sd_configs, want 1", i, len(sd))
		}
		sd[0].(map[string]any)["files"] = []any{files}
		var kept, addressed bool
		for _, r := range relabelRules(t, job) {
			switch {
			case r["action"] == "keep":
				if r["regex"] != strconv.Itoa(i) {
					t.Fatalf("docs/exporter.md: job %d keeps shard %v", i, r["regex"])
				}
				kept = true
			case r["target_label"] == "__address__":
				if !strings.HasSuffix(fmt.Sprint(r["replacement"]), fmt.Sprintf("-%d:9643", i)) {
					t.Fatalf("docs/exporter.md: job %d scrapes %v, not replica %d", i, r["replacement"], i)
				}
				r["replacement"] = replicas[i]
				addressed = true
			}
		}
		if !kept || !addressed {
			t.Fatalf("docs/exporter.md: job %d keeps its shard (%t) and scrapes its replica (%t)", i, kept, addressed)
		}
		out = append(out, job)
	}
	return out
}

func relabelRules(t *testing.T, job map[string]any) []map[string]any {
	t.Helper()
	rules, _ := job["relabel_configs"].([]any)
	var out []map[string]any
	for _, r := range rules {
		m, ok := r.(map[string]any)
		if !ok {
			t.Fatalf("docs/exporter.md: job %v: relabel rule %v", job["job_name"], r)
		}
		out = append(out, m)
	}
	return out
}

// shardOf is the replica the documented hashmod relabelling gives a
// target: the last 8 bytes of the MD5 of the target parameter,
// big-endian, modulo the replicas (Prometheus's relabel package).
func shardOf(param string, replicas int) int {
	sum := md5.Sum([]byte(param))
	return int(binary.BigEndian.Uint64(sum[8:]) % uint64(replicas))
}

// shardTarget is one probed target and the truth about its keys: what the
// test wrote.
type shardTarget struct {
	param string            // the target parameter, as service discovery lists it
	nodes []string          // the nodes it samples
	srv   *redistest.Server // a redis-server target's server; nil for the Cluster
	c     redis.UniversalClient
	// expires holds every key written, true when it has a TTL.
	expires map[string]bool
	// changed is when the last write to it was answered.
	changed time.Time
}

// shardCounts are a target's lock and key figures, summed over its nodes.
type shardCounts struct{ locks, locksNoTTL, keys, keysNoTTL int }

func (tg *shardTarget) want() shardCounts {
	var c shardCounts
	for k, expires := range tg.expires {
		c.keys++
		if !expires {
			c.keysNoTTL++
		}
		if strings.HasPrefix(k, "lock:") {
			c.locks++
			if !expires {
				c.locksNoTTL++
			}
		}
	}
	return c
}

// set writes key, with an hour's TTL when expires.
func (tg *shardTarget) set(t *testing.T, key string, expires bool) {
	t.Helper()
	var ttl time.Duration
	if expires {
		ttl = time.Hour
	}
	if err := tg.c.Set(context.Background(), key, "holder-of-"+key, ttl).Err(); err != nil {
		t.Fatalf("%s: SET %s: %v", tg.param, key, err)
	}
	tg.expires[key] = expires
}

func (tg *shardTarget) del(t *testing.T, key string) {
	t.Helper()
	if err := tg.c.Del(context.Background(), key).Err(); err != nil {
		t.Fatalf("%s: DEL %s: %v", tg.param, key, err)
	}
	delete(tg.expires, key)
}

// seed writes the i-th target's keys: locks with and without a TTL,
// cache keys with and without one.
func (tg *shardTarget) seed(t *testing.T, i int) {
	t.Helper()
	for j := range 1 + i%3 {
		tg.set(t, fmt.Sprintf("lock:orders:%d", j), true)
	}
	for j := range i % 2 {
		tg.set(t, fmt.Sprintf("lock:jobs:%d", j), false)
	}
	for j := range 2 + i%4 {
		tg.set(t, fmt.Sprintf("cache:item:%d", j), true)
	}
}

func newStandaloneTarget(t *testing.T, i int) *shardTarget {
	t.Helper()
	srv := redistest.Start(t)
	tg := &shardTarget{param: "redis://" + srv.Addr, nodes: []string{srv.Addr}, srv: srv, expires: map[string]bool{},
		c: redistest.NewClient(t, &redis.Options{Addr: srv.Addr, ClientName: testClientName})}
	tg.set(t, "lock:anchor", true)
	tg.set(t, "cache:anchor", false)
	tg.seed(t, i)
	return tg
}

func newClusterTarget(t *testing.T, i int) *shardTarget {
	t.Helper()
	cl := redistest.StartCluster(t, 3)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ClientName: testClientName})
	t.Cleanup(func() { _ = c.Close() })
	tg := &shardTarget{param: "redis://" + cl.Addrs()[0], nodes: cl.Addrs(), c: c, expires: map[string]bool{}}
	// A lock and a key on each master.
	for _, prefix := range []string{"lock:anchor:", "cache:anchor:"} {
		missing := map[string]bool{}
		for _, a := range tg.nodes {
			missing[a] = true
		}
		for k := 0; len(missing) > 0; k++ {
			key := prefix + strconv.Itoa(k)
			m, err := c.MasterForKey(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			if a := m.Options().Addr; missing[a] {
				tg.set(t, key, prefix == "lock:anchor:")
				delete(missing, a)
			}
		}
	}
	tg.seed(t, i)
	return tg
}

// writeTargets writes the file service discovery reads, replacing it
// whole (a rename, so Prometheus never reads it half written).
func writeTargets(t *testing.T, dir string, targets []*shardTarget) {
	t.Helper()
	var params []string
	for _, tg := range targets {
		params = append(params, tg.param)
	}
	tmp := filepath.Join(dir, "targets.yml.tmp")
	writeJSON(t, tmp, []any{map[string]any{"targets": params}})
	if err := os.Rename(tmp, filepath.Join(dir, "targets.yml")); err != nil {
		t.Fatal(err)
	}
}

// shardScrape is what one scrape of a target said: its lock and key
// figures summed over its nodes, which nodes served them, when each node's
// figures were taken, and whether notifications keep its lock figures
// exact.
type shardScrape struct {
	at       time.Time
	counts   shardCounts
	served   map[string]map[string]bool    // family → node → its value series present
	stamps   map[string]map[string]float64 // family → node → data_timestamp_seconds
	notified map[string]bool
}

// fresh reports whether the scrape serves family's figures of every node
// of tg, each taken at or after tg's last change.
func (s *shardScrape) fresh(tg *shardTarget, family string) bool {
	since := float64(tg.changed.UnixNano()) / 1e9
	for _, n := range tg.nodes {
		at, ok := s.stamps[family][n]
		if !ok || !s.served[family][n] || at < since {
			return false
		}
	}
	return true
}

// exact reports whether the scrape's figures of family are tg's truth.
func (s *shardScrape) exact(tg *shardTarget, family string) bool {
	want := tg.want()
	if family == "locks" {
		return s.counts.locks == want.locks && s.counts.locksNoTTL == want.locksNoTTL
	}
	return s.counts.keys == want.keys && s.counts.keysNoTTL == want.keysNoTTL
}

func (s *shardScrape) allNotified(tg *shardTarget) bool {
	for _, n := range tg.nodes {
		if !s.notified[n] {
			return false
		}
	}
	return true
}

// shardScrapes returns every scrape of the probe jobs since since, by
// target parameter, oldest first.
func shardScrapes(ctx context.Context, api promv1.API, since time.Time) (map[string][]*shardScrape, error) {
	expr := fmt.Sprintf(`{__name__=~"cachewatch_exporter_(locks_held|locks_without_ttl|keys_sampled|keys_without_ttl|data_timestamp_seconds|lock_notifications)",job=~"%s.*"}[%ds]`,
		shardJobPrefix, int(math.Ceil(time.Since(since).Seconds()))+1)
	m, err := matrix(ctx, api, expr)
	if err != nil {
		return nil, err
	}
	byTarget := map[string]map[model.Time]*shardScrape{}
	for _, series := range m {
		target, node := string(series.Metric["target"]), string(series.Metric["node"])
		if byTarget[target] == nil {
			byTarget[target] = map[model.Time]*shardScrape{}
		}
		for _, p := range series.Values {
			if p.Timestamp.Time().Before(since) {
				continue
			}
			s := byTarget[target][p.Timestamp]
			if s == nil {
				s = &shardScrape{at: p.Timestamp.Time(), notified: map[string]bool{},
					served: map[string]map[string]bool{"locks": {}, "keys": {}},
					stamps: map[string]map[string]float64{"locks": {}, "keys": {}}}
				byTarget[target][p.Timestamp] = s
			}
			v := float64(p.Value)
			switch series.Metric["__name__"] {
			case "cachewatch_exporter_locks_held":
				s.counts.locks += int(v)
				s.served["locks"][node] = true
			case "cachewatch_exporter_locks_without_ttl":
				s.counts.locksNoTTL += int(v)
			case "cachewatch_exporter_keys_sampled":
				s.counts.keys += int(v)
				s.served["keys"][node] = true
			case "cachewatch_exporter_keys_without_ttl":
				s.counts.keysNoTTL += int(v)
			case "cachewatch_exporter_data_timestamp_seconds":
				if f := string(series.Metric["family"]); s.stamps[f] != nil {
					s.stamps[f][node] = v
				}
			case "cachewatch_exporter_lock_notifications":
				s.notified[node] = v == 1
			}
		}
	}
	out := map[string][]*shardScrape{}
	for target, scrapes := range byTarget {
		for _, s := range scrapes {
			out[target] = append(out[target], s)
		}
		sort.Slice(out[target], func(i, j int) bool { return out[target][i].at.Before(out[target][j].at) })
	}
	return out, nil
}

// shardLag is how long after a target's last change Prometheus scraped
// its lock and its key figures exact (and taken after the change).
type shardLag struct{ locks, keys time.Duration }

// awaitExact waits until every target's lock and key figures, taken after
// its last change, have been scraped exact, and returns how long after the
// change each first was. Then it checks every scrape since from: figures
// taken after the change are exact, whenever they are scraped (lock
// figures while notifications keep them exact on every node: a SCAN pass
// in progress may miss a lock written meanwhile, as documented).
func awaitExact(t *testing.T, api promv1.API, targets []*shardTarget, from time.Time) map[*shardTarget]shardLag {
	t.Helper()
	ctx := context.Background()
	lags := map[*shardTarget]shardLag{}
	found := map[*shardTarget]map[string]bool{}
	err := poll.Check(ctx, dataTimeout, time.Second, func() error {
		all, err := shardScrapes(ctx, api, from)
		if err != nil {
			return err
		}
		var pending []string
		for _, tg := range targets {
			if found[tg] == nil {
				found[tg] = map[string]bool{}
			}
			for _, family := range []string{"locks", "keys"} {
				if found[tg][family] {
					continue
				}
				var last *shardScrape
				for _, s := range all[tg.param] {
					last = s
					if s.fresh(tg, family) && s.exact(tg, family) {
						found[tg][family] = true
						lag := lags[tg]
						if family == "locks" {
							lag.locks = s.at.Sub(tg.changed)
						} else {
							lag.keys = s.at.Sub(tg.changed)
						}
						lags[tg] = lag
						break
					}
				}
				if !found[tg][family] {
					pending = append(pending, fmt.Sprintf("%s %s: last scraped %+v, want %+v", tg.param, family, describe(last), tg.want()))
				}
			}
		}
		if len(pending) > 0 {
			return fmt.Errorf("%d figures not exact yet:\n  %s", len(pending), strings.Join(pending, "\n  "))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	all, err := shardScrapes(ctx, api, from)
	if err != nil {
		t.Fatal(err)
	}
	judged := 0
	for _, tg := range targets {
		for _, s := range all[tg.param] {
			for _, family := range []string{"locks", "keys"} {
				if !s.fresh(tg, family) || family == "locks" && !s.allNotified(tg) {
					continue
				}
				judged++
				if !s.exact(tg, family) {
					t.Errorf("%s: the scrape at %s served %s figures taken after the change at %s that are not exact: %+v, want %+v",
						tg.param, s.at.Format(time.StampMilli), family, tg.changed.Format(time.StampMilli), s.counts, tg.want())
				}
			}
		}
	}
	if judged == 0 {
		t.Error("no scrape served figures taken after the change")
	}
	return lags
}

func describe(s *shardScrape) string {
	if s == nil {
		return "nothing"
	}
	return fmt.Sprintf("%+v at %s, taken at %v", s.counts, s.at.Format(time.StampMilli), s.stamps)
}

// exactlyOnce checks, over the run since since, that every target was
// scraped by one job only, the one the hashmod of its parameter names,
// that its series came from that job alone, and that the replicas sampled
// every target once between them; it returns each target's replica.
func exactlyOnce(t *testing.T, api promv1.API, targets []*shardTarget, replicas []string, modulus int, since time.Time) (owners map[string]int, ok bool) {
	t.Helper()
	wrong := 0
	errorf := func(format string, args ...any) {
		t.Helper()
		wrong++
		t.Errorf(format, args...)
	}
	ctx := context.Background()
	window := fmt.Sprintf("%ds", int(math.Ceil(time.Since(since).Seconds()))+1)
	probes := fmt.Sprintf(`job=~"%s.*"`, shardJobPrefix)
	owners = map[string]int{}
	perJob := make([]int, len(replicas))
	for _, s := range vector(t, api, fmt.Sprintf(`last_over_time(up{%s}[%s])`, probes, window)) {
		param := string(s.Metric["instance"])
		i, err := strconv.Atoi(strings.TrimPrefix(string(s.Metric["job"]), shardJobPrefix))
		if err != nil || i >= len(replicas) {
			t.Fatalf("scraped by job %s", s.Metric["job"])
		}
		if prev, ok := owners[param]; ok {
			errorf("%s scraped by %s%d and %s%d", param, shardJobPrefix, prev, shardJobPrefix, i)
		}
		owners[param] = i
		perJob[i]++
		if want := shardOf(param, modulus); i != want {
			errorf("%s scraped by %s%d, but its hash names replica %d", param, shardJobPrefix, i, want)
		}
	}
	for _, tg := range targets {
		if _, ok := owners[tg.param]; !ok {
			errorf("%s never scraped", tg.param)
		}
	}
	if len(owners) != len(targets) {
		errorf("%d targets scraped, want the %d listed", len(owners), len(targets))
	}

	// Every target's series from one job: the exporter's up per (target, job).
	byTarget := vector(t, api, fmt.Sprintf(`count by (target) (count by (target, job) (last_over_time(cachewatch_exporter_up{%s}[%s])))`, probes, window))
	for _, s := range byTarget {
		if s.Value != 1 {
			errorf("%s: series from %v jobs", s.Metric["target"], s.Value)
		}
	}
	if len(byTarget) != len(targets) {
		errorf("series of %d targets, want %d", len(byTarget), len(targets))
	}

	// Every target sampled once: by its replica, by no other.
	if most := scalar(ctx, api, fmt.Sprintf(`max_over_time(sum(cachewatch_exporter_probe_targets{job=%q})[%s:1s])`, shardSelfJob, window)); most != float64(len(targets)) {
		errorf("the replicas sampled at most %v targets at once, want %d", most, len(targets))
	}
	sampled := make([]int, len(replicas))
	for i, addr := range replicas {
		sampled[i] = probeTargets(t, addr)
		if sampled[i] != perJob[i] {
			errorf("replica %d samples %d targets, its job scrapes %d", i, sampled[i], perJob[i])
		}
	}
	if refused := scalar(ctx, api, `sum(cachewatch_exporter_probe_refused_total)`); refused != 0 {
		errorf("%v probes refused", refused)
	}
	t.Logf("%d targets scraped, %d wrongly; targets sampled per replica %v", len(owners), wrong, sampled)
	return owners, wrong == 0
}

// probeTargets reads cachewatch_exporter_probe_targets from the replica at
// addr.
func probeTargets(t *testing.T, addr string) int {
	t.Helper()
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s/metrics: %v", addr, err)
	}
	f := fams["cachewatch_exporter_probe_targets"]
	if f == nil || len(f.GetMetric()) != 1 || f.GetType() != dto.MetricType_GAUGE {
		t.Fatalf("%s/metrics: cachewatch_exporter_probe_targets is %v", addr, f)
	}
	return int(f.GetMetric()[0].GetGauge().GetValue())
}

// scrapeDurations returns the probe jobs' scrape durations since since.
func scrapeDurations(t *testing.T, api promv1.API, since time.Time) []time.Duration {
	t.Helper()
	m, err := matrix(context.Background(), api, fmt.Sprintf(`scrape_duration_seconds{job=~"%s.*"}[%ds]`,
		shardJobPrefix, int(time.Since(since).Seconds())))
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Duration
	for _, s := range m {
		for _, p := range s.Values {
			out = append(out, time.Duration(float64(p.Value)*float64(time.Second)))
		}
	}
	if len(out) == 0 {
		t.Fatal("no scrape durations")
	}
	slices.Sort(out)
	return out
}

// removeTarget takes gone out of service discovery and waits until its
// replica owner stops sampling it and its connections close, while the
// other targets stay sampled. It returns how long that took after the
// removal and after Prometheus's last probe of it, and checks the latter
// is at least the idle timeout.
func removeTarget(t *testing.T, api promv1.API, gone *shardTarget, targets []*shardTarget, replicas []string, owner int, sdDir string) (afterRemoval, afterLastProbe time.Duration) {
	t.Helper()
	before := make([]int, len(replicas))
	for i, addr := range replicas {
		before[i] = probeTargets(t, addr)
	}
	watch := redistest.NewClient(t, &redis.Options{Addr: gone.srv.Addr, ClientName: testClientName})
	if n := redistest.OtherClients(t, watch, testClientName); n == 0 {
		t.Fatalf("%s: no exporter connection before its removal", gone.param)
	}
	var rest []*shardTarget
	for _, tg := range targets {
		if tg != gone {
			rest = append(rest, tg)
		}
	}
	writeTargets(t, sdDir, rest)
	removed := time.Now()
	err := poll.Check(context.Background(), shardIdle+3*time.Minute, 100*time.Millisecond, func() error {
		if n := probeTargets(t, replicas[owner]); n != before[owner]-1 {
			return fmt.Errorf("replica %d samples %d targets, %d before %s was removed", owner, n, before[owner], gone.param)
		}
		if n := redistest.OtherClients(t, watch, testClientName); n != 0 {
			return fmt.Errorf("%s: %d exporter connections", gone.param, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for i, addr := range replicas {
		if n := probeTargets(t, addr); i != owner && n != before[i] {
			t.Errorf("replica %d samples %d targets, %d before %s was removed", i, n, before[i], gone.param)
		}
	}
	m, err := matrix(context.Background(), api, fmt.Sprintf(`up{instance=%q}[%ds]`, gone.param, int(time.Since(removed).Seconds())+int(shardIdle.Seconds())))
	if err != nil || len(m) != 1 || len(m[0].Values) == 0 {
		t.Fatalf("the scrapes of %s: %v %v", gone.param, m, err)
	}
	lastProbe := m[0].Values[len(m[0].Values)-1].Timestamp.Time()
	afterRemoval, afterLastProbe = stopped.Sub(removed), stopped.Sub(lastProbe)
	if afterLastProbe < shardIdle {
		t.Errorf("%s: its sampler stopped %v after its last probe, before the idle timeout %v", gone.param, afterLastProbe, shardIdle)
	}
	if n, err := query(context.Background(), api, fmt.Sprintf(`up{instance=%q}`, gone.param)); err != nil || n != 0 {
		t.Errorf("%s still scraped after its removal (%d series, %v)", gone.param, n, err)
	}
	t.Logf("%s left service discovery: its sampler stopped and its connections closed %v later, %v after its last probe (idle timeout %v)",
		gone.param, afterRemoval.Round(100*time.Millisecond), afterLastProbe.Round(100*time.Millisecond), shardIdle)
	return afterRemoval, afterLastProbe
}

// vector runs expr now, failing t on an error or a result that is not a
// vector.
func vector(t *testing.T, api promv1.API, expr string) model.Vector {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, _, _, err := api.Query(ctx, expr, time.Now())
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		t.Fatalf("%s: a %s, not a vector", expr, v.Type())
	}
	return vec
}

// scalar runs expr now and returns its one value, NaN without one.
func scalar(ctx context.Context, api promv1.API, expr string) float64 {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, _, _, err := api.Query(ctx, expr, time.Now())
	if vec, ok := v.(model.Vector); err == nil && ok && len(vec) == 1 {
		return float64(vec[0].Value)
	}
	return math.NaN()
}

// matrix runs the range selection expr now.
func matrix(ctx context.Context, api promv1.API, expr string) (model.Matrix, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, _, _, err := api.Query(ctx, expr, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", expr, err)
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("%s: a %s, not a matrix", expr, v.Type())
	}
	return m, nil
}
