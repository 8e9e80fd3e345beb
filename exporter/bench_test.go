package exporter_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

const benchLocks = 10_000

// benchKeys is 1,000,000 unless CACHEWATCH_BENCH_KEYS says otherwise (for
// tuning runs only; recorded figures use the full size).
var benchKeys = func() int {
	if n, err := strconv.Atoi(os.Getenv("CACHEWATCH_BENCH_KEYS")); err == nil && n > benchLocks {
		return n
	}
	return 1_000_000
}()

// BenchmarkSample runs the exporter as in production — Run with default
// options, its 15 s interval — on a 1,000,000-key keyspace (10,000 of them
// locks) while another client (a separate process) runs GETs in a loop, until
// the whole-keyspace pass has covered every key. It compares that client's
// GET latency while the exporter runs with idle windows of 15 s before it
// starts and after it stops.
// Run it once: go test -run x -bench BenchmarkSample -benchtime 1x ./exporter/
// (CACHEWATCH_BENCH=COUNT[/SHARE[/MINSLEEP]],… picks the lock-pass SCAN
// COUNTs, the shares of the interval the lock pass is spread over and how
// far ahead of schedule the passes get before they sleep, run in the order
// given, so A/B runs can be interleaved: 25/0.8/0s,25/0.8/2ms,…; default
// the defaults).
//
// Reported: locks_s (from start until exact lock figures for every lock were
// published), lock_pass_s (duration of the first lock pass), lock_pass_max_s
// and lock_passes (the longest of the lock passes seen, and how many
// completed before the keyspace was covered: one per interval), cover_s (from start
// until the whole keyspace was covered; the target is ≤ 120), heap_MB
// (exporter heap in use at the end), GET p50/p99 idle and while the
// exporter runs in ms, p99_ratio (running ÷ idle; the target is ≤ 1.25),
// exporter_cpu_pct (this process's CPU time while the exporter ran, % of one
// core) and redis_cmd_pct (the server's time in commands other than the
// other client's GETs, INFO commandstats, % of the run).
func BenchmarkSample(b *testing.B) {
	srv := redistest.Start(b)
	load(b, srv.Client(b))
	for _, c := range benchConfigs() {
		b.Run(fmt.Sprintf("lock_scan_count=%d/share=%g/min_sleep=%v", c.count, c.share, c.minSleep), func(b *testing.B) {
			for b.Loop() {
				benchCover(b, srv.Addr, c)
			}
		})
	}
}

// benchConfig is one measured variant of the lock pass.
type benchConfig struct {
	count int     // SCAN … MATCH COUNT
	share float64 // fraction of the interval the pass is spread over
	// minSleep is how far ahead of schedule a paced pass gets before it
	// sleeps.
	minSleep time.Duration
}

// benchConfigs are the variants measured: CACHEWATCH_BENCH as a comma list
// of COUNT[/SHARE[/MINSLEEP]], or the defaults.
func benchConfigs() []benchConfig {
	var out []benchConfig
	for _, f := range strings.Split(os.Getenv("CACHEWATCH_BENCH"), ",") {
		count, share, _ := strings.Cut(f, "/")
		share, minSleep, _ := strings.Cut(share, "/")
		c := benchConfig{share: exporter.LockPassShare, minSleep: exporter.MinPaceSleep}
		var err error
		if minSleep != "" {
			if c.minSleep, err = time.ParseDuration(minSleep); err != nil || c.minSleep < 0 {
				continue
			}
		}
		if c.count, err = strconv.Atoi(count); err != nil || c.count <= 0 {
			continue
		}
		if share != "" {
			if c.share, err = strconv.ParseFloat(share, 64); err != nil || c.share <= 0 || c.share > 1 {
				continue
			}
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		out = []benchConfig{{exporter.DefaultLockScanCount, exporter.LockPassShare, exporter.MinPaceSleep}}
	}
	return out
}

// load writes benchKeys keys with pipelined SET … PX: locks with a 1h TTL
// (outliving the run) and an owner token, cache entries with TTLs spread
// over the second hour, and one key in ten without TTL.
func load(b *testing.B, rdb *redis.Client) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	pipe := rdb.Pipeline()
	for i := 0; i < benchKeys; i++ {
		switch {
		case i < benchLocks:
			pipe.Set(ctx, "lock:order:"+strconv.Itoa(i), "tok-"+strconv.Itoa(i), time.Hour)
		case i%10 == 0:
			pipe.Set(ctx, "session:"+strconv.Itoa(i), "v", 0)
		default:
			pipe.Set(ctx, "cache:user:"+strconv.Itoa(i), "v", time.Hour+time.Duration(rng.IntN(3600))*time.Second)
		}
		if pipe.Len() == 10000 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	if n := rdb.DBSize(ctx).Val(); n != int64(benchKeys) {
		b.Fatalf("loaded %d keys", n)
	}
}

func benchCover(b *testing.B, addr string, c benchConfig) {
	const idle = 15 * time.Second
	e, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{addr}}, LockScanCount: c.count})
	if err != nil {
		b.Fatal(err)
	}
	exporter.SetLockPassShare(e, c.share)
	exporter.SetMinPaceSleep(e, c.minSleep)
	other := startGetLoop(b, addr)
	time.Sleep(idle) // the other client alone
	ctx, cancel := context.WithCancel(context.Background())
	stats := redis.NewClient(&redis.Options{Addr: addr})
	defer stats.Close()
	usecBefore := commandUsec(b, stats)
	cpuBefore := cpuTime()
	start := time.Now()
	ran := make(chan error, 1)
	go func() { ran <- e.Run(ctx) }()
	var locksAt, coverAt time.Duration
	var lockPass, lockPassMax time.Duration
	var lockPasses int
	var lastLocks time.Time
	for coverAt == 0 {
		time.Sleep(100 * time.Millisecond)
		s := e.Snapshots()[0]
		if s.Pass != nil && locksAt == 0 && !s.Pass.LocksComplete.IsZero() {
			locksAt = time.Since(start)
			if g := s.Pass.Groups["lock:order:*"]; g == nil || g.Locks != benchLocks {
				b.Fatalf("lock figures not exact: %+v", g)
			}
			lockPass = s.Pass.LocksComplete.Sub(s.Pass.LocksStarted)
		}
		if s.Pass != nil && !s.Pass.LocksComplete.IsZero() && !s.Pass.LocksComplete.Equal(lastLocks) {
			lastLocks = s.Pass.LocksComplete
			lockPasses++
			lockPassMax = max(lockPassMax, s.Pass.LocksComplete.Sub(s.Pass.LocksStarted))
		}
		if s.ScanCycles >= 1 {
			coverAt = time.Since(start)
		}
		if time.Since(start) > 10*time.Minute {
			b.Fatal("the keyspace was not covered in 10 minutes")
		}
	}
	stop := time.Now()
	cpu := cpuTime() - cpuBefore
	usec := commandUsec(b, stats) - usecBefore
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	cancel()
	<-ran
	time.Sleep(idle) // the other client alone again
	idleLat, busy := other.stop(b, [][2]int64{{start.UnixNano(), stop.UnixNano()}})
	snap := e.Snapshots()[0]
	if snap.Pass == nil || snap.Pass.Keys < uint64(benchKeys*99/100) || snap.Coverage != 1 {
		b.Fatalf("pass incomplete: %+v", snap.Pass)
	}
	b.ReportMetric(locksAt.Seconds(), "locks_s")
	b.ReportMetric(lockPass.Seconds(), "lock_pass_s")
	b.ReportMetric(lockPassMax.Seconds(), "lock_pass_max_s")
	b.ReportMetric(float64(lockPasses), "lock_passes")
	b.ReportMetric(coverAt.Seconds(), "cover_s")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap_MB")
	b.ReportMetric(100*cpu.Seconds()/stop.Sub(start).Seconds(), "exporter_cpu_pct")
	b.ReportMetric(100*float64(usec)/1e6/stop.Sub(start).Seconds(), "redis_cmd_pct")
	b.ReportMetric(pct(idleLat, 50), "idle_p50_ms")
	b.ReportMetric(pct(idleLat, 99), "idle_p99_ms")
	b.ReportMetric(pct(busy, 50), "running_p50_ms")
	b.ReportMetric(pct(busy, 99), "running_p99_ms")
	b.ReportMetric(pct(busy, 99)/pct(idleLat, 99), "p99_ratio")
}

// cpuTime is the user and system CPU time of this process (the exporter;
// the other client is another process).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commandUsec is the server's time in commands other than GET (the other
// client's) and INFO, from INFO commandstats, in microseconds.
func commandUsec(b *testing.B, c *redis.Client) int64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_get" || name == "cmdstat_info" {
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

// getLoopEnv makes the test binary run the other client's GET loop
// (TestGetLoopProcess) instead of tests: another process, as other clients
// are, so the exporter's own CPU and GC do not count as Redis latency.
const getLoopEnv = "CACHEWATCH_BENCH_GETLOOP"

type getLoopProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out string
}

func startGetLoop(b *testing.B, addr string) *getLoopProc {
	out := filepath.Join(b.TempDir(), "latencies")
	cmd := exec.Command(os.Args[0], "-test.run=^TestGetLoopProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), getLoopEnv+"="+addr+","+out+","+strconv.Itoa(benchKeys))
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return &getLoopProc{cmd: cmd, in: in, out: out}
}

// stop ends the loop (closing its stdin) and splits its latencies (ms,
// sorted) by whether each GET started inside a sampling window.
func (p *getLoopProc) stop(b *testing.B, windows [][2]int64) (idle, busy []float64) {
	p.in.Close()
	if err := p.cmd.Wait(); err != nil {
		b.Fatalf("GET loop: %v", err)
	}
	f, err := os.Open(p.out)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var rec [16]byte
	w := 0
	for {
		if _, err := io.ReadFull(r, rec[:]); err != nil {
			break
		}
		start, lat := int64(binary.LittleEndian.Uint64(rec[:8])), float64(binary.LittleEndian.Uint64(rec[8:]))/1e6
		for w < len(windows) && windows[w][1] < start {
			w++
		}
		if w < len(windows) && start >= windows[w][0] {
			busy = append(busy, lat)
		} else {
			idle = append(idle, lat)
		}
	}
	slices.Sort(idle)
	slices.Sort(busy)
	return idle, busy
}

// TestGetLoopProcess is the other client of BenchmarkSample; it runs only
// in the child process the benchmark starts. It GETs random keys until its
// stdin closes and writes (start Unix ns, latency ns) records.
func TestGetLoopProcess(t *testing.T) {
	env := os.Getenv(getLoopEnv)
	if env == "" {
		t.Skip("only run by BenchmarkSample")
	}
	parts := strings.Split(env, ",")
	keys, _ := strconv.Atoi(parts[2])
	c := redis.NewClient(&redis.Options{Addr: parts[0], PoolSize: 1})
	defer c.Close()
	f, err := os.Create(parts[1])
	must(t, err)
	w := bufio.NewWriter(f)
	var stop atomic.Bool
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop.Store(true) }()
	rng := rand.New(rand.NewPCG(3, 4))
	key := make([]byte, 0, 32)
	var rec [16]byte
	ctx := context.Background()
	for !stop.Load() {
		key = strconv.AppendInt(append(key[:0], "cache:user:"...), int64(benchLocks+rng.IntN(keys-benchLocks)), 10)
		start := time.Now()
		_ = c.Get(ctx, string(key)).Err()
		binary.LittleEndian.PutUint64(rec[:8], uint64(start.UnixNano()))
		binary.LittleEndian.PutUint64(rec[8:], uint64(time.Since(start)))
		_, _ = w.Write(rec[:])
	}
	must(t, w.Flush())
	must(t, f.Close())
}

func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p/100))]
}
