package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/crowd"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// BenchmarkStampede: 1000 concurrent callers in 4 real processes (this test
// binary re-executed as workers, each with its own go-redis client and
// cache), on one hot key whose source takes 50 ms. Each iteration runs a
// cold miss on a new key, waits until the value is past its fresh TTL
// (1 s), and runs the same crowd again on the expired-but-stale key.
//
//	go test -run x -bench BenchmarkStampede -benchtime 5x ./bench/
//
// Reported per variant: loader-calls/refresh (mean over both phases;
// 1.00 means one source call per refresh across all processes),
// cold-loader-calls and stale-loader-calls (per phase), and the callers'
// cold-p99-ms and stale-p99-ms (p50 too). Every variant sees the same
// callers, Redis, key, 1 s freshness and loader; ns/op is reported as 0
// because the wall time is mostly the deliberate waits between phases.
func BenchmarkStampede(b *testing.B) {
	const (
		callers = 1000
		procs   = 4
	)
	srv := redistest.Start(b)
	for _, v := range stampedeVariants {
		b.Run(v.Name, func(b *testing.B) {
			ws := startStampedeWorkers(b, v.Name, srv.Addr, procs)
			ws.run(b, "warmup:"+v.Name, callers) // dial the pools, load code paths
			var cold, stale []time.Duration
			var coldCalls, staleCalls int64
			for i := 0; i < b.N; i++ {
				key := fmt.Sprintf("stampede:%s:%d:%d", v.Name, time.Now().UnixNano(), i)
				before := ws.calls(b)
				cold = append(cold, ws.run(b, key, callers)...)
				time.Sleep(stampedeSettle) // background writes and refreshes finish
				afterCold := ws.calls(b)
				time.Sleep(stampedeFresh) // the value is now past its fresh TTL
				stale = append(stale, ws.run(b, key, callers)...)
				time.Sleep(stampedeSettle)
				afterStale := ws.calls(b)
				coldCalls += afterCold - before
				staleCalls += afterStale - afterCold
			}
			n := float64(b.N)
			b.ReportMetric(0, "ns/op") // wall time here is mostly deliberate waiting
			b.ReportMetric(float64(coldCalls+staleCalls)/(2*n), "loader-calls/refresh")
			b.ReportMetric(float64(coldCalls)/n, "cold-loader-calls")
			b.ReportMetric(float64(staleCalls)/n, "stale-loader-calls")
			b.ReportMetric(p99ms(cold), "cold-p99-ms")
			b.ReportMetric(p99ms(stale), "stale-p99-ms")
			b.ReportMetric(pct(cold, 50), "cold-p50-ms")
			b.ReportMetric(pct(stale, 50), "stale-p50-ms")
		})
	}
}

const (
	stampedeLoad   = 50 * time.Millisecond
	stampedeSettle = 200 * time.Millisecond
	workerEnv      = "CACHEWATCH_STAMPEDE_WORKER" // variant name
	workerRedisEnv = "CACHEWATCH_STAMPEDE_REDIS"
	workerPrefix   = "STAMPEDE "
)

func p99ms(d []time.Duration) float64 { return pct(d, 99) }

// pct returns the p-th percentile of d in milliseconds.
func pct(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[(len(d)*p-1)/100]) / float64(time.Millisecond)
}

// runCallers releases n callers of fetch at once on key and returns each
// one's latency and how many failed.
func runCallers(fetch fetcher, key string, n int) ([]time.Duration, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return crowd.Run(n, func() error {
		_, err := fetch(ctx, key)
		return err
	})
}

// stampedeLoader is the slow source; calls counts its invocations.
func stampedeLoader(calls *atomic.Int64) loader {
	return func(ctx context.Context) (string, error) {
		calls.Add(1)
		time.Sleep(stampedeLoad)
		return "value", nil
	}
}

// TestStampedeWorker is not a test: it is the worker process that
// BenchmarkStampede starts (this binary re-executed with workerEnv set).
// It reads commands on stdin — "run KEY N", "calls" — and answers each with
// one JSON line on stdout.
func TestStampedeWorker(t *testing.T) {
	name := os.Getenv(workerEnv)
	if name == "" {
		t.Skip("runs only as a BenchmarkStampede worker process")
	}
	v, err := variantByName(name)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(workerRedisEnv)})
	defer rdb.Close()
	var calls atomic.Int64
	fetch, closeFn := v.Build(rdb, stampedeLoader(&calls))
	defer closeFn()
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		var reply any
		switch {
		case len(f) == 3 && f[0] == "run":
			n, _ := strconv.Atoi(f[2])
			lat, failed := runCallers(fetch, f[1], n)
			us := make([]int64, len(lat))
			for i, d := range lat {
				us[i] = d.Microseconds()
			}
			reply = map[string]any{"lat_us": us, "failed": failed}
		case len(f) == 1 && f[0] == "calls":
			reply = map[string]any{"calls": calls.Load()}
		default:
			t.Fatalf("worker: bad command %q", in.Text())
		}
		line, _ := json.Marshal(reply)
		fmt.Fprintf(out, "%s%s\n", workerPrefix, line)
		out.Flush()
	}
}

// stampedeWorkers are the worker processes of one variant.
type stampedeWorkers []*stampedeWorker

type stampedeWorker struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

func startStampedeWorkers(b *testing.B, variant, addr string, n int) stampedeWorkers {
	b.Helper()
	var ws stampedeWorkers
	for i := 0; i < n; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStampedeWorker$", "-test.count=1")
		cmd.Env = append(os.Environ(), workerEnv+"="+variant, workerRedisEnv+"="+addr)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { in.Close(); _ = cmd.Wait() })
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		ws = append(ws, &stampedeWorker{in: in, out: sc})
	}
	return ws
}

// send gives every worker cmd at (nearly) the same moment and decodes each
// one's reply.
func (ws stampedeWorkers) send(b *testing.B, cmd string, reply func(i int, line []byte)) {
	b.Helper()
	for _, w := range ws {
		if _, err := io.WriteString(w.in, cmd+"\n"); err != nil {
			b.Fatal(err)
		}
	}
	for i, w := range ws {
		for {
			if !w.out.Scan() {
				b.Fatalf("worker %d ended: %v", i, w.out.Err())
			}
			if line, ok := strings.CutPrefix(w.out.Text(), workerPrefix); ok {
				reply(i, []byte(line))
				break
			}
		}
	}
}

// run has callers (split evenly over the workers) fetch key at once and
// returns their latencies.
func (ws stampedeWorkers) run(b *testing.B, key string, callers int) []time.Duration {
	b.Helper()
	var lat []time.Duration
	ws.send(b, fmt.Sprintf("run %s %d", key, callers/len(ws)), func(i int, line []byte) {
		var r struct {
			LatUS  []int64 `json:"lat_us"`
			Failed int     `json:"failed"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			b.Fatal(err)
		}
		if r.Failed > 0 {
			b.Errorf("worker %d: %d of its callers failed", i, r.Failed)
		}
		for _, us := range r.LatUS {
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
	})
	return lat
}

// calls returns the loader calls made so far, summed over the workers.
func (ws stampedeWorkers) calls(b *testing.B) int64 {
	b.Helper()
	var total int64
	ws.send(b, "calls", func(_ int, line []byte) {
		var r struct{ Calls int64 }
		if err := json.Unmarshal(line, &r); err != nil {
			b.Fatal(err)
		}
		total += r.Calls
	})
	return total
}

// TestStampedeVariantsServe runs every variant's code path once, in
// process, so the benchmark's contenders stay correct (CI runs tests, not
// benchmarks): all callers get the value, and the coalescing variants make
// the number of loader calls they promise on a cold key.
func TestStampedeVariantsServe(t *testing.T) {
	srv := redistest.Start(t)
	// lock-then-poll has no bound: without a double check after the lock, a
	// caller that read the key before the value landed refreshes again.
	want := map[string]int64{"cachewatch": 1, "cachewatch-nocopies": 1, "go-redis-cache": 2, "sturdyc": 2, "singleflight-get": 2}
	for _, v := range stampedeVariants {
		t.Run(v.Name, func(t *testing.T) {
			var calls atomic.Int64
			var fetches []fetcher
			for p := 0; p < 2; p++ { // two "processes": separate clients and caches
				fetch, closeFn := v.Build(srv.Client(t), stampedeLoader(&calls))
				t.Cleanup(closeFn)
				fetches = append(fetches, fetch)
			}
			key := "smoke:" + v.Name
			var wg sync.WaitGroup
			var failed atomic.Int64
			for _, fetch := range fetches {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, n := runCallers(fetch, key, 20)
					failed.Add(int64(n))
				}()
			}
			wg.Wait()
			if failed.Load() > 0 {
				t.Fatalf("%d callers failed", failed.Load())
			}
			if w, ok := want[v.Name]; ok && calls.Load() > w {
				t.Fatalf("%d loader calls for 40 callers in 2 processes, want at most %d", calls.Load(), w)
			}
			if calls.Load() < 1 {
				t.Fatal("loader never called on a cold key")
			}
		})
	}
}
