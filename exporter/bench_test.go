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

// BenchmarkSample covers a 1,000,000-key keyspace (10,000 of them locks)
// while another client (a separate process) runs GETs in a loop, and
// compares that client's latency during samples with idle windows of the
// same length between them.
// Run it once: go test -run x -bench BenchmarkSample -benchtime 1x ./exporter/
// (CACHEWATCH_BENCH=keys_per_second/batch,… picks the settings measured).
//
// Reported: cover_s (sampling time to cover every key), samples (samples
// needed; ×interval is the wall-clock coverage in production), heap_MB
// (exporter heap in use after the pass), GET p50/p99 idle and while sampling
// in ms, and p99_ratio (sampling ÷ idle; the target is ≤ 1.25).
func BenchmarkSample(b *testing.B) {
	srv := redistest.Start(b)
	load(b, srv.Client(b))
	for _, c := range benchConfigs() {
		name := fmt.Sprintf("keys_per_second=%g/batch=%d", c.kps, c.batch)
		switch {
		case c.kps < 0:
			name = fmt.Sprintf("unpaced/batch=%d", c.batch)
		case c.kps == 0:
			name = fmt.Sprintf("default_pace=%d/batch=%d", exporter.DefaultKeysPerSecond, c.batch)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				benchCover(b, srv.Addr, c.kps, c.batch)
			}
		})
	}
}

type benchConfig struct {
	kps   float64
	batch int
}

// benchConfigs are the sampler settings measured: CACHEWATCH_BENCH as a
// comma list of keys_per_second/batch (-1 unpaced, 0 the default pace), or
// unpaced and the defaults.
func benchConfigs() []benchConfig {
	env := os.Getenv("CACHEWATCH_BENCH")
	if env == "" {
		env = "-1/100,0/100" // unpaced, and the default pacing
	}
	var out []benchConfig
	for _, f := range strings.Split(env, ",") {
		kps, batch, _ := strings.Cut(f, "/")
		k, err1 := strconv.ParseFloat(kps, 64)
		n, err2 := strconv.Atoi(batch)
		if err1 == nil && err2 == nil && n > 0 {
			out = append(out, benchConfig{k, n})
		}
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

func benchCover(b *testing.B, addr string, kps float64, batch int) {
	ctx := context.Background()
	e, err := exporter.New(exporter.Options{Target: exporter.Target{Addrs: []string{addr}}, KeysPerSecond: kps,
		Batch: batch, ScanCount: batch})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	other := startGetLoop(b, addr)

	// Samples alternate with idle windows of the same length, so idle and
	// sampling latencies come from the same minutes of the same run.
	var windows [][2]int64 // sampling windows, Unix ns
	var cover time.Duration
	samples := 0
	time.Sleep(time.Second) // the other client warms up (idle)
	for {
		start := time.Now()
		s := e.Sample(ctx)[0]
		windows = append(windows, [2]int64{start.UnixNano(), time.Now().UnixNano()})
		samples++
		cover += s.Duration
		if !s.Up {
			b.Fatalf("sample failed: %v", s.Err)
		}
		if s.ScanCycles == 1 {
			break
		}
		time.Sleep(s.Duration)
	}
	time.Sleep(time.Second)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	idle, busy := other.stop(b, windows)
	snap := e.Snapshots()[0]
	if snap.Pass == nil || snap.Pass.Keys < uint64(benchKeys*99/100) {
		b.Fatalf("pass incomplete: %+v", snap.Pass)
	}
	b.ReportMetric(cover.Seconds(), "cover_s")
	b.ReportMetric(float64(samples), "samples")
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap_MB")
	b.ReportMetric(pct(idle, 50), "idle_p50_ms")
	b.ReportMetric(pct(idle, 99), "idle_p99_ms")
	b.ReportMetric(pct(busy, 50), "sampling_p50_ms")
	b.ReportMetric(pct(busy, 99), "sampling_p99_ms")
	b.ReportMetric(pct(busy, 99)/pct(idle, 99), "p99_ratio")
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
