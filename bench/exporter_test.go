package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// The keyspace of BenchmarkExporterLocks, as in the probe that measured the
// previous design: locks lock:order:N (exporterNoTTL of them without
// expiry), exporterSync keys sharing one expiry second, the rest written by
// DEBUG POPULATE (key:N, no TTL).
const (
	exporterLocks = 20_000
	exporterNoTTL = 2_000
	exporterSync  = 200_000
	// exporterIdle is each idle window of the other client, before the
	// exporter starts and after it stops.
	exporterIdle = 15 * time.Second
)

// exporterVariant is one exporter design measured.
type exporterVariant struct {
	name string
	// notify turns keyspace notifications on in the server for the run.
	notify bool
	opts   func(addr string) exporter.Options
}

var exporterVariants = map[string]exporterVariant{
	// previous: the lock pass over half the interval whatever it costs the
	// server, no notifications (the design before the lock index).
	"previous": {name: "previous", opts: func(addr string) exporter.Options {
		return exporter.Options{Target: exporter.Target{Addrs: []string{addr}}, Locks: exporter.LockOptions{Notifications: exporter.NotifyOff, ScanBudget: 1}}
	}},
	// scan: SCAN passes alone, within the default budget.
	"scan": {name: "scan", opts: func(addr string) exporter.Options {
		return exporter.Options{Target: exporter.Target{Addrs: []string{addr}}, Locks: exporter.LockOptions{Notifications: exporter.NotifyOff}}
	}},
	// notify: the defaults, on a server that publishes keyspace events.
	"notify": {name: "notify", notify: true, opts: func(addr string) exporter.Options {
		return exporter.Options{Target: exporter.Target{Addrs: []string{addr}}}
	}},
	"redis_exporter": {name: "redis_exporter"},
}

// BenchmarkExporterLocks measures how soon and how often the exporter's lock
// figures are exact on a large keyspace, and what that costs the server and
// its other clients. For each keyspace size and variant, interleaved over
// rounds: another client (a separate process) GETs a random key every
// millisecond (and takes a short lock every 20th); after 15 s of it alone,
// the exporter runs as in production (Run, 15 s interval) until its lock
// figures have been exact and then refreshed at least twice, and at least a
// minute; 15 s alone again follow.
//
//	go test -run '^$' -bench BenchmarkExporterLocks -benchtime 1x -timeout 3h
//
// CACHEWATCH_BENCH_EXPORTER_KEYS: comma-separated sizes (default 1000000);
// CACHEWATCH_BENCH_EXPORTER_VARIANTS: previous, scan, notify, redis_exporter
// (default all; redis_exporter needs CACHEWATCH_REDIS_EXPORTER, the path of
// a redis_exporter binary, run with --count-keys db0=lock:order:* and scraped
// every 15 s); CACHEWATCH_BENCH_EXPORTER_ROUNDS (default 1).
//
// Reported: exact_s (from start until the lock figures matched the seeded
// truth; for redis_exporter the first scrape that counted every lock), the
// steady state from then on (steady_redis_cpu_pct, steady_p99_ms and
// steady_p99_ratio against the idle p99),
// refresh_s (the largest age of the lock figures seen after that: how old
// they get between refreshes; for redis_exporter the longest scrape or the
// scrape interval), redis_cpu_pct and idle_redis_cpu_pct (the server's CPU,
// % of one core, while the exporter ran and in the idle windows),
// sampler_cmd_pct (the server's time in commands other than the client's
// GET and SET, % of the run), exporter_cpu_pct, and the other client's GET
// p50/p99 idle and while the exporter ran, with p99_ratio.
func BenchmarkExporterLocks(b *testing.B) {
	sizes := envList("CACHEWATCH_BENCH_EXPORTER_KEYS", "1000000")
	variants := envList("CACHEWATCH_BENCH_EXPORTER_VARIANTS", "previous,scan,notify,redis_exporter")
	rounds, _ := strconv.Atoi(os.Getenv("CACHEWATCH_BENCH_EXPORTER_ROUNDS"))
	for _, size := range sizes {
		keys, err := strconv.Atoi(size)
		if err != nil || keys < exporterLocks+exporterSync {
			b.Fatalf("bad size %q", size)
		}
		srv := redistest.Start(b, "--enable-debug-command", "yes")
		loader := redistest.NewClient(b, &redis.Options{Addr: srv.Addr, ReadTimeout: 5 * time.Minute})
		loadExporterKeyspace(b, loader, keys)
		for r := 1; r <= max(rounds, 1); r++ {
			for _, name := range variants {
				v, ok := exporterVariants[name]
				if !ok {
					b.Fatalf("unknown variant %q", name)
				}
				if name == "redis_exporter" && os.Getenv("CACHEWATCH_REDIS_EXPORTER") == "" {
					continue
				}
				b.Run(fmt.Sprintf("keys=%d/%s/round=%d", keys, name, r), func(b *testing.B) {
					for b.Loop() {
						benchExporterRun(b, srv, keys, v)
					}
				})
			}
		}
	}
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

// loadExporterKeyspace writes the benchmark's keyspace: DEBUG POPULATE for
// the bulk, pipelined SETs for the locks and the synchronised keys.
func loadExporterKeyspace(b *testing.B, rdb *redis.Client, keys int) {
	ctx := context.Background()
	must(b, rdb.Do(ctx, "DEBUG", "POPULATE", keys-exporterLocks-exporterSync, "key", 10).Err())
	at := time.Now().Add(time.Hour).Truncate(time.Second).UnixMilli()
	pipe := rdb.Pipeline()
	for i := range exporterLocks {
		ttl := time.Hour
		if i < exporterNoTTL {
			ttl = 0
		}
		pipe.Set(ctx, "lock:order:"+strconv.Itoa(i), "tok-"+strconv.Itoa(i), ttl)
	}
	for i := range exporterSync {
		pipe.Do(ctx, "SET", "sync:item:"+strconv.Itoa(i), "v", "PXAT", at)
		if pipe.Len() >= 10_000 {
			_, err := pipe.Exec(ctx)
			must(b, err)
		}
	}
	_, err := pipe.Exec(ctx)
	must(b, err)
	if n := rdb.DBSize(ctx).Val(); n != int64(keys) {
		b.Fatalf("loaded %d keys, want %d", n, keys)
	}
}

// exporterRun is what one run measured.
type exporterRun struct {
	exact, refresh time.Duration
	refreshes      int
	exporterCPU    time.Duration
	// exactAt is when the figures were first exact, and redisCPUAt the
	// server's CPU time then: the steady state is measured from there.
	exactAt    time.Time
	redisCPUAt time.Duration
}

// lockNotifyFlags are the notify-keyspace-events classes the exporter's lock
// index follows (the ones exporter.NotifyEnable would turn on).
const lockNotifyFlags = "Kg$xe"

func benchExporterRun(b *testing.B, srv *redistest.Server, keys int, v exporterVariant) {
	ctx := context.Background()
	admin := srv.Client(b)
	flags := ""
	if v.notify {
		flags = lockNotifyFlags
	}
	must(b, admin.ConfigSet(ctx, "notify-keyspace-events", flags).Err())
	other := startExporterGetLoop(b, srv.Addr, keys)
	c0 := redisCPU(b, admin)
	time.Sleep(exporterIdle)
	usecBefore, c1 := samplerUsec(b, admin), redisCPU(b, admin)
	start := time.Now()
	var run exporterRun
	if v.name == "redis_exporter" {
		run = runRedisExporter(b, srv.Addr, admin)
	} else {
		run = runCachewatch(b, v.opts(srv.Addr), admin)
	}
	stop := time.Now()
	wall := stop.Sub(start)
	usec, c2 := samplerUsec(b, admin)-usecBefore, redisCPU(b, admin)
	time.Sleep(exporterIdle)
	cpu, idleCPU := c2-c1, c1-c0+redisCPU(b, admin)-c2
	idle, busy := other.stop(b, start, stop)
	if !run.exactAt.IsZero() { // the steady state: from the first exact figures on
		_, steady := other.split(b, run.exactAt, stop)
		b.ReportMetric(100*(c2-run.redisCPUAt).Seconds()/stop.Sub(run.exactAt).Seconds(), "steady_redis_cpu_pct")
		b.ReportMetric(quantileMs(steady, 99), "steady_p99_ms")
		b.ReportMetric(quantileMs(steady, 99)/quantileMs(idle, 99), "steady_p99_ratio")
	}
	b.ReportMetric(run.exact.Seconds(), "exact_s")
	b.ReportMetric(run.refresh.Seconds(), "refresh_s")
	b.ReportMetric(float64(run.refreshes), "refreshes")
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "redis_cpu_pct")
	b.ReportMetric(100*idleCPU.Seconds()/(2*exporterIdle).Seconds(), "idle_redis_cpu_pct")
	b.ReportMetric(100*float64(usec)/1e6/wall.Seconds(), "sampler_cmd_pct")
	b.ReportMetric(100*run.exporterCPU.Seconds()/wall.Seconds(), "exporter_cpu_pct")
	b.ReportMetric(quantileMs(idle, 50), "idle_p50_ms")
	b.ReportMetric(quantileMs(idle, 99), "idle_p99_ms")
	b.ReportMetric(quantileMs(busy, 50), "running_p50_ms")
	b.ReportMetric(quantileMs(busy, 99), "running_p99_ms")
	b.ReportMetric(quantileMs(busy, 99)/quantileMs(idle, 99), "p99_ratio")
}

// runCachewatch runs the exporter until its lock figures were exact and
// then refreshed twice, and for at least a minute after they were exact.
func runCachewatch(b *testing.B, opts exporter.Options, admin *redis.Client) exporterRun {
	e, err := exporter.New(opts)
	must(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	cpuBefore := ownCPU()
	start := time.Now()
	go func() { defer close(ran); _ = e.Run(ctx) }()
	var run exporterRun
	var asOf time.Time
	for {
		time.Sleep(100 * time.Millisecond)
		now := time.Now()
		s := e.Snapshots()[0]
		var locks, noTTL uint64
		if s.Pass != nil && s.Pass.Groups["lock:order:*"] != nil {
			locks, noTTL = s.Pass.Groups["lock:order:*"].Locks, s.Pass.Groups["lock:order:*"].LocksNoTTL
		}
		if run.exact == 0 && s.Pass != nil && exactLocks(s.Pass.LocksAsOf, locks, noTTL) {
			run.exact, asOf = now.Sub(start), s.Pass.LocksAsOf
			run.exactAt, run.redisCPUAt = now, redisCPU(b, admin)
		}
		if run.exact > 0 && s.Pass != nil && !s.Pass.LocksAsOf.IsZero() {
			run.refresh = max(run.refresh, now.Sub(s.Pass.LocksAsOf))
			if s.Pass.LocksAsOf.After(asOf) {
				asOf = s.Pass.LocksAsOf
				run.refreshes++
			}
		}
		if run.exact > 0 && run.refreshes >= 2 && now.Sub(start) > run.exact+time.Minute {
			break
		}
		if now.Sub(start) > 20*time.Minute {
			b.Logf("stopped after 20 minutes: exact after %v, %d refreshes", run.exact, run.refreshes)
			break
		}
	}
	run.exporterCPU = ownCPU() - cpuBefore
	cancel()
	<-ran
	return run
}

// exactLocks reports whether the served lock figures match the seeded
// locks: the lock group's count and count without TTL, of a pass whose
// lock figures have a time (asOf not zero).
func exactLocks(asOf time.Time, locks, noTTL uint64) bool {
	return !asOf.IsZero() && locks == exporterLocks && noTTL == exporterNoTTL
}

var keysCount = regexp.MustCompile(`(?m)^redis_keys_count\{db="db0",key="lock:order:\*"\} (\d+)`)

// runRedisExporter runs redis_exporter counting the lock keys and scrapes
// it every 15 s, as Prometheus would, four times after the first exact
// count.
func runRedisExporter(b *testing.B, addr string, admin *redis.Client) exporterRun {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(b, err)
	listen := l.Addr().String()
	l.Close()
	cmd := exec.Command(os.Getenv("CACHEWATCH_REDIS_EXPORTER"), "--redis.addr", "redis://"+addr,
		"--count-keys", "db0=lock:order:*", "--web.listen-address", listen)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	must(b, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	start := time.Now()
	var run exporterRun
	client := &http.Client{Timeout: 5 * time.Minute}
	for scrape := 0; ; scrape++ {
		due := start.Add(time.Duration(scrape) * 15 * time.Second)
		time.Sleep(time.Until(due))
		began := time.Now()
		resp, err := client.Get("http://" + listen + "/metrics")
		if err != nil {
			if scrape < 3 { // still starting
				continue
			}
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(began)
		m := keysCount.FindSubmatch(body)
		if run.exact == 0 && m != nil && string(m[1]) == strconv.Itoa(exporterLocks) {
			run.exact = time.Since(start)
			run.exactAt, run.redisCPUAt = time.Now(), redisCPU(b, admin)
		} else if run.exact > 0 {
			run.refreshes++
		}
		run.refresh = max(run.refresh, took, 15*time.Second)
		if run.refreshes >= 4 || time.Since(start) > 20*time.Minute {
			break
		}
	}
	run.exporterCPU = procCPU(cmd.Process.Pid)
	return run
}

// redisCPU is the server's CPU time (INFO cpu).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	raw, err := rdb.Info(context.Background(), "cpu").Result()
	must(b, err)
	var total float64
	for _, line := range strings.Split(raw, "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// samplerUsec is the server's time in commands other than the other
// client's GET and SET (INFO commandstats), in microseconds.
func samplerUsec(b *testing.B, rdb *redis.Client) int64 {
	raw, err := rdb.Info(context.Background(), "commandstats").Result()
	must(b, err)
	var total int64
	for _, line := range strings.Split(raw, "\r\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_get" || name == "cmdstat_set" {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

// ownCPU is this process's user and system CPU time.
func ownCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU is another process's user and system CPU time (/proc/PID/stat).
func procCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
}

// exporterGetLoopEnv makes the test binary run the other client
// (TestExporterBenchGetLoop) instead of tests.
const exporterGetLoopEnv = "CACHEWATCH_BENCH_EXPORTER_GETLOOP"

type exporterGetLoop struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out string
}

func startExporterGetLoop(b *testing.B, addr string, keys int) *exporterGetLoop {
	out := filepath.Join(b.TempDir(), "latencies")
	cmd := exec.Command(os.Args[0], "-test.run=^TestExporterBenchGetLoop$", "-test.count=1")
	cmd.Env = append(os.Environ(), exporterGetLoopEnv+"="+addr+","+out+","+strconv.Itoa(keys-exporterLocks-exporterSync))
	in, err := cmd.StdinPipe()
	must(b, err)
	cmd.Stderr = os.Stderr
	must(b, cmd.Start())
	return &exporterGetLoop{cmd: cmd, in: in, out: out}
}

// stop ends the loop and splits its GET latencies (sorted) by whether each
// started while the exporter ran.
func (p *exporterGetLoop) stop(b *testing.B, start, stop time.Time) (idle, busy []time.Duration) {
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		b.Fatalf("GET loop: %v", err)
	}
	return p.split(b, start, stop)
}

// split reads the loop's GET latencies (sorted): those that started within
// [start, stop], and the others.
func (p *exporterGetLoop) split(b *testing.B, start, stop time.Time) (outside, within []time.Duration) {
	f, err := os.Open(p.out)
	must(b, err)
	defer f.Close()
	r := bufio.NewReader(f)
	var rec [16]byte
	for {
		if _, err := io.ReadFull(r, rec[:]); err != nil {
			break
		}
		at, lat := int64(binary.LittleEndian.Uint64(rec[:8])), time.Duration(binary.LittleEndian.Uint64(rec[8:]))
		if at >= start.UnixNano() && at <= stop.UnixNano() {
			within = append(within, lat)
		} else {
			outside = append(outside, lat)
		}
	}
	slices.Sort(outside)
	slices.Sort(within)
	return outside, within
}

// TestExporterBenchGetLoop is the other client of BenchmarkExporterLocks;
// it runs only in the process the benchmark starts. Every millisecond it
// GETs a random key, and every 20th time also takes a lock for 2 s; it
// writes (start Unix ns, GET latency ns) records until its stdin closes.
func TestExporterBenchGetLoop(t *testing.T) {
	env := os.Getenv(exporterGetLoopEnv)
	if env == "" {
		t.Skip("only run by BenchmarkExporterLocks")
	}
	parts := strings.Split(env, ",")
	keys, _ := strconv.Atoi(parts[2])
	c := redis.NewClient(&redis.Options{Addr: parts[0], PoolSize: 1})
	defer c.Close()
	f, err := os.Create(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	var stop atomic.Bool
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop.Store(true) }()
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	var rec [16]byte
	next := time.Now()
	for i := 0; !stop.Load(); i++ {
		next = next.Add(time.Millisecond)
		key := "key:" + strconv.Itoa(rng.IntN(keys))
		start := time.Now()
		_ = c.Get(ctx, key).Err()
		binary.LittleEndian.PutUint64(rec[:8], uint64(start.UnixNano()))
		binary.LittleEndian.PutUint64(rec[8:], uint64(time.Since(start)))
		_, _ = w.Write(rec[:])
		if i%20 == 0 {
			_ = c.SetNX(ctx, "lock:churn:"+strconv.Itoa(i%500), "tok", 2*time.Second).Err()
		}
		time.Sleep(time.Until(next))
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func quantileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return float64(sorted[min(len(sorted)-1, int(float64(len(sorted))*p/100))]) / 1e6
}
