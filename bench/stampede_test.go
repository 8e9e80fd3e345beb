package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// BenchmarkStampede: concurrent callers in real processes (this test
// binary re-executed as workers, each with its own go-redis client and
// cache) on hot keys whose source is slow. Each iteration runs a cold miss
// on new keys, waits until the values are past their fresh TTL (1 s), and
// runs the same crowd again on the expired-but-stale keys. Every variant
// runs every shape (stampedeShapes): 4, 16, 32 and 64 processes, 1 or 100 hot
// keys, callers released at once or arriving over 200 ms, a 50 or 400 ms
// loader, and a loader that fails on the stale keys, or on the cold ones
// (then there is no stale crowd, and the cold figures are the errors').
//
//	go test -run x -bench '^BenchmarkStampede$' -benchtime 5x ./bench/
//	go test -run x -bench '^BenchmarkStampede$/p16-k1/' -benchtime 5x ./bench/
//
// Reported per shape and variant: loader-calls/refresh (loader calls per
// key per refresh, mean over both phases; 1.00 means one source call per
// key per refresh across all processes), cold-loader-calls and
// stale-loader-calls (per key, per phase), the callers' cold and stale
// p50/p99 in ms, failed callers per phase, and cold-rt/proc-key and
// stale-rt/proc-key: commands the processes sent Redis (a go-redis hook;
// the pub/sub connection's SUBSCRIBE/UNSUBSCRIBE not included) per process
// per key. Every variant sees the same callers, Redis, keys, 1 s freshness
// and loader; ns/op is reported as 0 because the wall time is mostly the
// deliberate waits between phases.
//
// For diagnosing a slow shape (docs/benchmarks.md, "Diagnosing a stampede
// regression"): CACHEWATCH_STAMPEDE_TIMELINE=1 prints each crowd's
// timeline to stderr: per process, when its callers started and ended,
// when its loads ran (wall clock, shared by the processes of one machine),
// its CPU time, garbage collections and bytes allocated.
// CACHEWATCH_STAMPEDE_PROFILE=dir makes every worker write a CPU and a
// block profile of its run to dir (<shape>.<variant>.<worker>.cpu/.block;
// CACHEWATCH_STAMPEDE_NOBLOCK=1 leaves block profiling off).
// CACHEWATCH_STAMPEDE_TRACE=dir makes every worker write a Go execution
// trace of each measured crowd (not the warm-up) to dir
// (<shape>.<variant>.<worker>.crowd<n>.trace; odd n cold, even n stale),
// for go tool trace (-pprof=sched: how long goroutines waited to run).
// CACHEWATCH_STAMPEDE_LOG=debug sends cachewatch's log to stderr.
// Every worker runs a garbage collection before each crowd, outside its
// timing (collectGarbage).
func BenchmarkStampede(b *testing.B) {
	srv := redistest.Start(b)
	for _, sh := range stampedeShapes {
		b.Run(sh.Name, func(b *testing.B) {
			for _, v := range stampedeVariants {
				b.Run(v.Name, func(b *testing.B) { benchStampede(b, srv.Addr, sh, v) })
			}
		})
	}
}

// stampedeShape is one form of the stampede.
type stampedeShape struct {
	Name      string
	Procs     int
	Keys      int           // hot keys fetched at once
	PerKey    int           // callers per key per process
	Spread    time.Duration // callers arrive uniformly over this window (0: at once)
	Load      time.Duration // the loader's time
	FailStale bool          // the loader fails on the stale phase
	FailCold  bool          // the loader fails on the cold phase (then there is no stale one)
}

var stampedeShapes = []stampedeShape{
	{Name: "p4-k1", Procs: 4, Keys: 1, PerKey: 250, Load: 50 * time.Millisecond},
	{Name: "p16-k1", Procs: 16, Keys: 1, PerKey: 63, Load: 50 * time.Millisecond},
	{Name: "p32-k1", Procs: 32, Keys: 1, PerKey: 32, Load: 50 * time.Millisecond},
	{Name: "p4-k100", Procs: 4, Keys: 100, PerKey: 10, Load: 50 * time.Millisecond},
	{Name: "p16-k100", Procs: 16, Keys: 100, PerKey: 4, Load: 50 * time.Millisecond},
	{Name: "p64-k1", Procs: 64, Keys: 1, PerKey: 16, Load: 50 * time.Millisecond},
	{Name: "p64-k100", Procs: 64, Keys: 100, PerKey: 2, Load: 50 * time.Millisecond},
	{Name: "p4-k1-spread200ms", Procs: 4, Keys: 1, PerKey: 250, Spread: 200 * time.Millisecond, Load: 50 * time.Millisecond},
	{Name: "p4-k1-load400ms", Procs: 4, Keys: 1, PerKey: 100, Load: 400 * time.Millisecond},
	{Name: "p4-k1-stalefail", Procs: 4, Keys: 1, PerKey: 250, Load: 50 * time.Millisecond, FailStale: true},
	{Name: "p4-k1-coldfail", Procs: 4, Keys: 1, PerKey: 250, Load: 50 * time.Millisecond, FailCold: true},
}

func benchStampede(b *testing.B, addr string, sh stampedeShape, v stampedeVariant) {
	ws := startStampedeWorkers(b, v.Name, sh, addr, nil)
	ws.run(b, "warmup:"+v.Name, sh) // dial the pools, load code paths
	if sh.Keys > 1 {
		// A cold start on 100 keys can time reads out (dialling the
		// pools on a busy machine) and open cachewatch's circuit
		// breaker: let it close before measuring.
		time.Sleep(stampedeWarmupCalm)
	}
	var total stampedeRound
	for i := 0; i < b.N; i++ {
		key := fmt.Sprintf("stampede:%s:%s:%d:%d", sh.Name, v.Name, time.Now().UnixNano(), i)
		total.add(ws.refresh(b, key, sh))
	}
	total.report(b, sh)
}

// stampedeRound is what one or more iterations measured: each crowd's
// callers' latencies and failures, and the loader calls and commands from
// its start until it settled.
type stampedeRound struct {
	cold, stale                                []time.Duration
	coldCalls, staleCalls, coldCmds, staleCmds int64
	coldFailed, staleFailed                    int
}

func (r *stampedeRound) add(o stampedeRound) {
	r.cold, r.stale = append(r.cold, o.cold...), append(r.stale, o.stale...)
	r.coldCalls, r.staleCalls = r.coldCalls+o.coldCalls, r.staleCalls+o.staleCalls
	r.coldCmds, r.staleCmds = r.coldCmds+o.coldCmds, r.staleCmds+o.staleCmds
	r.coldFailed, r.staleFailed = r.coldFailed+o.coldFailed, r.staleFailed+o.staleFailed
}

// refresh runs one iteration on key: the cold crowd and, once the values
// are past their freshness, the stale one (not for a shape whose loader
// fails on the cold crowd: there is nothing to serve stale).
func (ws stampedeWorkers) refresh(b *testing.B, key string, sh stampedeShape) (r stampedeRound) {
	before := ws.counts(b)
	settle := stampedeSettle // background writes and refreshes finish
	if sh.FailCold {
		ws.setFail(b, true)
		settle += sh.Load // and loads that outlive their callers
	}
	r.cold, r.coldFailed = ws.run(b, key, sh)
	time.Sleep(settle)
	afterCold := ws.counts(b)
	r.coldCalls, r.coldCmds = afterCold.calls-before.calls, afterCold.cmds-before.cmds
	if sh.FailCold {
		ws.setFail(b, false)
		return r
	}
	time.Sleep(stampedeFresh) // the values are now past their fresh TTL
	if sh.FailStale {
		ws.setFail(b, true)
	}
	r.stale, r.staleFailed = ws.run(b, key, sh)
	time.Sleep(stampedeSettle + sh.Load)
	afterStale := ws.counts(b)
	ws.setFail(b, false)
	r.staleCalls, r.staleCmds = afterStale.calls-afterCold.calls, afterStale.cmds-afterCold.cmds
	return r
}

// report reports the iterations' figures (see BenchmarkStampede).
func (r stampedeRound) report(b *testing.B, sh stampedeShape) {
	n := float64(b.N)
	perKey := n * float64(sh.Keys)
	perProcKey := perKey * float64(sh.Procs)
	b.ReportMetric(0, "ns/op") // wall time here is mostly deliberate waiting
	phases := 2.0
	if sh.FailCold {
		phases = 1
	}
	b.ReportMetric(float64(r.coldCalls+r.staleCalls)/(phases*perKey), "loader-calls/refresh")
	b.ReportMetric(float64(r.coldCalls)/perKey, "cold-loader-calls")
	b.ReportMetric(p99ms(r.cold), "cold-p99-ms")
	b.ReportMetric(pct(r.cold, 50), "cold-p50-ms")
	b.ReportMetric(float64(r.coldFailed)/n, "cold-failed")
	b.ReportMetric(float64(r.coldCmds)/perProcKey, "cold-rt/proc-key")
	if sh.FailCold {
		return
	}
	b.ReportMetric(float64(r.staleCalls)/perKey, "stale-loader-calls")
	b.ReportMetric(p99ms(r.stale), "stale-p99-ms")
	b.ReportMetric(pct(r.stale, 50), "stale-p50-ms")
	b.ReportMetric(float64(r.staleFailed)/n, "stale-failed")
	b.ReportMetric(float64(r.staleCmds)/perProcKey, "stale-rt/proc-key")
}

const (
	stampedeWarmupCalm = 6 * time.Second // > CacheOptions.BreakerHalfOpenAfter's default
	stampedeSettle     = 200 * time.Millisecond
	workerEnv          = "CACHEWATCH_STAMPEDE_WORKER" // variant name
	workerRedisEnv     = "CACHEWATCH_STAMPEDE_REDIS"
	workerLoadEnv      = "CACHEWATCH_STAMPEDE_LOAD"
	workerShapeEnv     = "CACHEWATCH_STAMPEDE_SHAPE"
	workerIndexEnv     = "CACHEWATCH_STAMPEDE_INDEX"
	workerMortalEnv    = "CACHEWATCH_STAMPEDE_MORTAL" // the fleet's first loader call of a persist run dies
	workerPrefix       = "STAMPEDE "
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

// runCallers has perKey callers of fetch on each of nkeys keys (key:0 …
// key:nkeys-1; key itself when nkeys is 1) start within spread of each
// other (at once when 0), and returns each one's latency (from its own
// start) and how many failed.
func runCallers(fetch fetcher, key string, nkeys, perKey int, spread time.Duration) ([]time.Duration, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := make([]string, nkeys)
	for i := range names {
		names[i] = key
		if nkeys > 1 {
			names[i] = key + ":" + strconv.Itoa(i)
		}
	}
	n := nkeys * perKey
	lat := make([]time.Duration, n)
	starts := make([]time.Time, n)
	var failed atomic.Int64
	// The callers are started here rather than by a helper, and each
	// writes only its own slots: a lock taken by every caller as it ends,
	// or a deeper stack (one more frame) around the call, moves the stale
	// p99 of a path that takes no lock from 0.001 to 0.003–0.006 ms.
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range lat {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if spread > 0 {
				time.Sleep(time.Duration(rand.Int64N(int64(spread))))
			}
			t0 := time.Now()
			if _, err := fetch(ctx, names[i%nkeys]); err != nil {
				failed.Add(1)
			}
			lat[i] = time.Since(t0)
			starts[i] = t0
		}()
	}
	close(start)
	wg.Wait()
	for i, t0 := range starts {
		tl.caller(t0, t0.Add(lat[i]))
	}
	return lat, int(failed.Load())
}

// errStaleFail is the loader's error while a shape fails it on purpose.
var errStaleFail = errors.New("bench: source down")

// stampedeLoader is the slow source; calls counts its invocations, and it
// fails while fail is set.
func stampedeLoader(calls *atomic.Int64, took time.Duration, fail *atomic.Bool) loader {
	return func(ctx context.Context) (string, error) {
		calls.Add(1)
		t0 := time.Now()
		time.Sleep(took)
		tl.load(t0, time.Now())
		if fail != nil && fail.Load() {
			return "", errStaleFail
		}
		return "value", nil
	}
}

// TestStampedeWorker is not a test: it is the worker process that
// BenchmarkStampede starts (this binary re-executed with workerEnv set).
// It reads commands on stdin — "run KEY NKEYS PERKEY SPREAD_US", "gc",
// "counts", "fail 0|1", and BenchmarkStampedeHolderDeath's "persist KEY
// PERKEY" — and answers each with one JSON line on stdout.
func TestStampedeWorker(t *testing.T) {
	name := os.Getenv(workerEnv)
	if name == "" {
		t.Skip("runs only as a BenchmarkStampede worker process")
	}
	v, err := variantByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if stop := profileWorker(t); stop != nil {
		defer stop()
	}
	addr := os.Getenv(workerRedisEnv)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	w := &workerProc{t: t}
	rdb.AddHook(&w.cmds)
	took, _ := time.ParseDuration(os.Getenv(workerLoadEnv))
	load := stampedeLoader(&w.calls, took, &w.fail)
	if os.Getenv(workerMortalEnv) != "" {
		load = mortalLoader(rdb, load, took)
	}
	var closeFn func()
	w.fetch, closeFn = v.Build(stampedeProc{rdb: rdb, addr: addr, cmds: &w.cmds}, load)
	defer closeFn()
	out := bufio.NewWriter(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		line, _ := json.Marshal(w.handle(strings.Fields(in.Text())))
		fmt.Fprintf(out, "%s%s\n", workerPrefix, line)
		out.Flush()
	}
}

// workerProc is a worker process's state.
type workerProc struct {
	t     *testing.T
	fetch fetcher
	cmds  cmdCounter
	calls atomic.Int64 // loader calls
	fail  atomic.Bool  // the loader fails
}

// handle runs one command and returns its reply.
func (w *workerProc) handle(f []string) any {
	switch {
	case len(f) == 5 && f[0] == "run":
		nkeys, _ := strconv.Atoi(f[2])
		perKey, _ := strconv.Atoi(f[3])
		spread, _ := strconv.Atoi(f[4])
		tl.reset()
		stopTrace := traceCrowd(w.t, f[1])
		lat, failed := runCallers(w.fetch, f[1], nkeys, perKey, time.Duration(spread)*time.Microsecond)
		stopTrace()
		us := make([]int64, len(lat))
		for i, d := range lat {
			us[i] = d.Microseconds()
		}
		return map[string]any{"lat_us": us, "failed": failed, "tl": tl.snapshot()}
	case len(f) == 3 && f[0] == "persist":
		perKey, _ := strconv.Atoi(f[2])
		return persist(w.fetch, f[1], perKey, &w.calls)
	case len(f) == 1 && f[0] == "gc":
		runtime.GC()
	case len(f) == 1 && f[0] == "counts":
		return map[string]any{"calls": w.calls.Load(), "cmds": w.cmds.n.Load()}
	case len(f) == 2 && f[0] == "fail":
		w.fail.Store(f[1] == "1")
	default:
		w.t.Fatalf("worker: bad command %q", strings.Join(f, " "))
	}
	return map[string]any{}
}

// profileWorker starts a CPU profile and block profiling when
// CACHEWATCH_STAMPEDE_PROFILE names a directory; the returned function
// writes both. CACHEWATCH_STAMPEDE_NOBLOCK=1 leaves block profiling off:
// it costs CPU of its own, which shows in the CPU profile.
func profileWorker(t *testing.T) func() {
	dir := os.Getenv("CACHEWATCH_STAMPEDE_PROFILE")
	if dir == "" {
		return nil
	}
	base := filepath.Join(dir, os.Getenv(workerShapeEnv)+"."+os.Getenv(workerEnv)+"."+os.Getenv(workerIndexEnv))
	cpu, err := os.Create(base + ".cpu")
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		t.Fatal(err)
	}
	if os.Getenv("CACHEWATCH_STAMPEDE_NOBLOCK") == "" {
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	}
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		if f, err := os.Create(base + ".block"); err == nil {
			_ = pprof.Lookup("block").WriteTo(f, 0)
			f.Close()
		}
	}
}

// crowdsTraced counts the worker's traced crowds (CACHEWATCH_STAMPEDE_TRACE).
var crowdsTraced int

// traceCrowd starts an execution trace of the crowd on key when
// CACHEWATCH_STAMPEDE_TRACE names a directory (the warm-up is not traced);
// the returned function ends it.
func traceCrowd(t *testing.T, key string) (stop func()) {
	dir := os.Getenv("CACHEWATCH_STAMPEDE_TRACE")
	if dir == "" || strings.HasPrefix(key, "warmup:") {
		return func() {}
	}
	crowdsTraced++
	name := fmt.Sprintf("%s.%s.%s.crowd%d.trace", os.Getenv(workerShapeEnv), os.Getenv(workerEnv), os.Getenv(workerIndexEnv), crowdsTraced)
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if err := trace.Start(f); err != nil {
		t.Fatal(err)
	}
	return func() {
		trace.Stop()
		f.Close()
	}
}

// stampedeWorkers are the worker processes of one variant.
type stampedeWorkers []*stampedeWorker

type stampedeWorker struct {
	in   io.WriteCloser
	out  *bufio.Scanner
	cmd  *exec.Cmd
	once sync.Once
}

// stop ends the worker (closing its input ends its loop) and waits for it.
func (w *stampedeWorker) stop() {
	w.once.Do(func() { w.in.Close(); _ = w.cmd.Wait() })
}

// stop ends every worker.
func (ws stampedeWorkers) stop() {
	for _, w := range ws {
		w.stop()
	}
}

// startStampedeWorkers starts sh.Procs workers of variant, with env added
// to their environment; they end when the benchmark does, or at stop.
func startStampedeWorkers(b testing.TB, variant string, sh stampedeShape, addr string, env []string) stampedeWorkers {
	b.Helper()
	var ws stampedeWorkers
	for i := 0; i < sh.Procs; i++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestStampedeWorker$", "-test.count=1")
		cmd.Env = append(os.Environ(), workerEnv+"="+variant, workerRedisEnv+"="+addr,
			workerLoadEnv+"="+sh.Load.String(), workerShapeEnv+"="+sh.Name, workerIndexEnv+"="+strconv.Itoa(i))
		cmd.Env = append(cmd.Env, env...)
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
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		w := &stampedeWorker{in: in, out: sc, cmd: cmd}
		b.Cleanup(w.stop)
		ws = append(ws, w)
	}
	return ws
}

// send gives every worker cmd at (nearly) the same moment and decodes each
// one's reply.
func (ws stampedeWorkers) send(b testing.TB, cmd string, reply func(i int, line []byte)) {
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

// run has every worker run the shape's callers on key (or its keys) and
// returns their latencies and how many failed.
func (ws stampedeWorkers) run(b testing.TB, key string, sh stampedeShape) ([]time.Duration, int) {
	b.Helper()
	var lat []time.Duration
	var failed int
	var tls []timeline
	defer func() { printTimelines(key, tls) }()
	ws.collectGarbage(b)
	ws.send(b, fmt.Sprintf("run %s %d %d %d", key, sh.Keys, sh.PerKey, sh.Spread.Microseconds()), func(i int, line []byte) {
		var r struct {
			LatUS  []int64  `json:"lat_us"`
			Failed int      `json:"failed"`
			TL     timeline `json:"tl"`
		}
		if err := json.Unmarshal(line, &r); err != nil {
			b.Fatal(err)
		}
		tls = append(tls, r.TL)
		failed += r.Failed
		for _, us := range r.LatUS {
			lat = append(lat, time.Duration(us)*time.Microsecond)
		}
	})
	return lat, failed
}

// collectGarbage has every worker run a garbage collection, all of them
// done before any crowd starts: run calls it before each crowd, outside the
// crowd's timing.
//
// Why: a worker allocates only in its crowds, so every collection starts in
// one, and which one repeats from round to round: it follows from the
// variant's allocations per crowd and its heap's size, not from chance (on
// p4-k100 without it, cachewatch's workers collected in 10 of 24 cold
// crowds and sturdyc's in none of theirs, but in 11 of 24 stale ones). In a
// service, collections are paced by everything it allocates, not by its
// stampedes. The collections go before the "run" command, not in it: a
// worker still collecting while the others' callers start would take their
// cores (16 and more processes). The variants' allocations per crowd are
// still shown by CACHEWATCH_STAMPEDE_TIMELINE.
func (ws stampedeWorkers) collectGarbage(b testing.TB) {
	b.Helper()
	ws.send(b, "gc", func(int, []byte) {})
}

// setFail makes every worker's loader fail (or succeed again).
func (ws stampedeWorkers) setFail(b testing.TB, fail bool) {
	b.Helper()
	arg := "0"
	if fail {
		arg = "1"
	}
	ws.send(b, "fail "+arg, func(int, []byte) {})
}

// workerCounts are the loader calls and Redis commands made so far,
// summed over the workers.
type workerCounts struct{ calls, cmds int64 }

func (ws stampedeWorkers) counts(b testing.TB) workerCounts {
	b.Helper()
	var total workerCounts
	ws.send(b, "counts", func(_ int, line []byte) {
		var r struct{ Calls, Cmds int64 }
		if err := json.Unmarshal(line, &r); err != nil {
			b.Fatal(err)
		}
		total.calls += r.Calls
		total.cmds += r.Cmds
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
	want := map[string]int64{"cachewatch": 1, "cachewatch-nocopies": 1, "go-redis-cache": 2, "sturdyc": 2, "singleflight-get": 2, "pubsub-floor": 1, "rueidisaside": 1}
	for _, v := range stampedeVariants {
		t.Run(v.Name, func(t *testing.T) {
			var calls atomic.Int64
			var fetches []fetcher
			for p := 0; p < 2; p++ { // two "processes": separate clients and caches
				p := stampedeProc{rdb: srv.Client(t), addr: srv.Addr, cmds: &cmdCounter{}}
				fetch, closeFn := v.Build(p, stampedeLoader(&calls, 50*time.Millisecond, nil))
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
					_, n := runCallers(fetch, key, 1, 20, 0)
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
