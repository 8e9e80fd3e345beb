package exporter_test

import (
	"bufio"
	"bytes"
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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/internal/sampler"
	"github.com/cachewatch/cachewatch/internal/figures"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/internal/syncbuf"
)

// The long run of the never-true probe, opt-in: a throwaway redis-server
// with CACHEWATCH_EXPORTER_PROBE_KEYS keys (DEBUG POPULATE, plus 20,000
// locks lock:order:N, 2,000 without TTL) and notify-keyspace-events "";
// `cachewatch exporter` with its defaults, scraped every second over HTTP
// for CACHEWATCH_EXPORTER_PROBE_DURATION (default 10m) while a writer
// changes locks lock:probe:N (about 20 writes a second) and, once the
// figures are exact, adds 1,000 locks without TTL and later deletes 500 of
// them. Another process GETs a random key every millisecond. It reports
// the time to the first exact figures, every scrape's age after that, how
// soon the 1,000 and the 500 showed, the scrapes showing a figure never
// true at its timestamp, the server's CPU during the sync and after, and
// the other client's GET p99 while the exporter runs over its p99 while
// the exporter is stopped (SIGSTOP), in alternating 5 s windows, in the
// steady state and during a second sync; the machine's load beside them.
// CACHEWATCH_EXPORTER_PROBE_FLAGS adds exporter flags to the defaults, to
// measure a variant the same way. CACHEWATCH_EXPORTER_PROBE_VARIANTS runs
// other exporters beside it, "|"-separated, each its flags after an
// optional "@binary" (another build; an empty one: the same exporter
// again; "-": none, windows in which nothing runs, the measurement's own
// spread): one exporter at a time runs, a window with none before each
// exporter's, in rotating order, and each exporter's p99 is compared with
// the stopped windows' in the same run.
// CACHEWATCH_EXPORTER_PROBE_PAIRS sets the number of those rounds. The
// exporters sync side by side, each slowed by the others' SCAN time:
// give the steady phase the time (CACHEWATCH_EXPORTER_PROBE_DURATION=6m at
// 10,000,000 keys and three exporters).
//
//	CACHEWATCH_EXPORTER_PROBE_KEYS=10000000 go test -run TestLockProbeAtScale -v -timeout 1h ./exporter
const (
	probeKeysEnv     = "CACHEWATCH_EXPORTER_PROBE_KEYS"
	probeDurationEnv = "CACHEWATCH_EXPORTER_PROBE_DURATION"
	probeGetLoopEnv  = "CACHEWATCH_EXPORTER_PROBE_GETLOOP"
	probeFlagsEnv    = "CACHEWATCH_EXPORTER_PROBE_FLAGS" // flags added to the defaults, space-separated
	probeVariantsEnv = "CACHEWATCH_EXPORTER_PROBE_VARIANTS"
	probePairsEnv    = "CACHEWATCH_EXPORTER_PROBE_PAIRS"
	probeLocks       = 20_000
	probeNoTTL       = 2_000
	probeWindowLen   = 5 * time.Second
)

func TestLockProbeAtScale(t *testing.T) {
	keys, _ := strconv.Atoi(os.Getenv(probeKeysEnv))
	if keys == 0 {
		t.Skipf("opt-in: %s=10000000 [%s=10m]; TestLockFiguresTrueAtTheirTimestamp is its CI-sized version", probeKeysEnv, probeDurationEnv)
	}
	duration := 10 * time.Minute
	if d, err := time.ParseDuration(os.Getenv(probeDurationEnv)); err == nil {
		duration = d
	}
	bin := filepath.Join(t.TempDir(), "cachewatch")
	metrictest.RunTool(t, "go", "build", "-o", bin, "github.com/cachewatch/cachewatch/cmd/cachewatch")
	srv := redistest.Start(t)
	admin := redistest.NewClient(t, &redis.Options{Addr: srv.Addr, ReadTimeout: 5 * time.Minute})
	log := &truthLog{}
	ctx := context.Background()
	must(t, admin.Do(ctx, "DEBUG", "POPULATE", keys-probeLocks, "key", 10).Err())
	seedLocks(t, admin, log, "lock:order:", probeLocks, probeNoTTL, 0)
	getLoop := startProbeGetLoop(t, srv.Addr, keys-probeLocks)
	p := &longProbe{t: t, bin: bin, addr: srv.Addr, admin: admin, log: log, interval: exporter.DefaultOptions().Sample.Interval, keys: keys, gets: getLoop}
	p.logf("%d keys loaded; load %s", keys, figures.LoadAvg())
	time.Sleep(15 * time.Second)
	p.steadyPhase(duration)
	pairs := max(4, int(duration/(25*time.Second)))
	if n, err := strconv.Atoi(os.Getenv(probePairsEnv)); err == nil && n > 0 {
		pairs = n
	}
	p.alternate("steady state", pairs, nil)
	if len(p.variants) > 0 { // a second sync beside other exporters would measure them too
		p.stopVariants()
		p.stop()
		getLoop.stop(t)
		return
	}
	p.stop()
	p.start()
	p.alternate("second sync", 60, p.exact)
	p.stop()
	getLoop.stop(t)
	p.logf("load at the end %s", figures.LoadAvg())
}

// longProbe is the state of the long run.
type longProbe struct {
	t        *testing.T
	bin      string
	addr     string
	admin    *redis.Client
	log      *truthLog
	interval time.Duration
	keys     int
	gets     *probeGetLoop

	cmd *exec.Cmd
	// variants are the exporters of CACHEWATCH_EXPORTER_PROBE_VARIANTS
	// (nil for "-").
	variants []*exec.Cmd
	stderr   *syncbuf.Buffer
	port     string
	began    time.Time
	// windows are the alternating windows: [start, end) and which
	// exporter ran.
	windows []probeWindow
	lines   []string
}

type probeWindow struct {
	start, end time.Time
	// exporter is the one that ran: 0 none, 1 the exporter under test,
	// 2… the variants.
	exporter int
	phase    string
	cpu      time.Duration // the server's CPU time over the window
}

func (p *longProbe) logf(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	p.lines = append(p.lines, line)
	p.t.Log(line)
}

// start runs `cachewatch exporter` with its defaults.
func (p *longProbe) start() {
	p.port = freePort(p.t)
	p.stderr = &syncbuf.Buffer{}
	args := []string{"exporter", "--redis.addr", p.addr, "--web.listen-address", "127.0.0.1:" + p.port}
	p.cmd = exec.Command(p.bin, append(args, strings.Fields(os.Getenv(probeFlagsEnv))...)...)
	p.cmd.Stderr = p.stderr
	p.began = time.Now()
	must(p.t, p.cmd.Start())
	if p.variants == nil {
		p.startVariants()
	}
}

// freePort is a TCP port free on the loopback a moment ago.
func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startVariants starts the exporters of CACHEWATCH_EXPORTER_PROBE_VARIANTS.
func (p *longProbe) startVariants() {
	env := os.Getenv(probeVariantsEnv)
	if env == "" {
		return
	}
	for _, v := range strings.Split(env, "|") {
		if strings.TrimSpace(v) == "-" {
			p.variants = append(p.variants, nil)
			p.logf("exporter %d: none", len(p.variants)+1)
			continue
		}
		bin, flags := p.bin, strings.Fields(v)
		if len(flags) > 0 && strings.HasPrefix(flags[0], "@") {
			bin, flags = flags[0][1:], flags[1:]
		}
		args := []string{"exporter", "--redis.addr", p.addr, "--web.listen-address", "127.0.0.1:" + freePort(p.t)}
		c := exec.Command(bin, append(args, flags...)...)
		c.Stderr = os.Stderr
		must(p.t, c.Start())
		p.variants = append(p.variants, c)
		p.logf("exporter %d: %s %s", len(p.variants)+1, bin, strings.Join(flags, " "))
	}
}

// stopVariants stops the variants' exporters.
func (p *longProbe) stopVariants() {
	for _, c := range p.variants {
		if c == nil {
			continue
		}
		_ = c.Process.Signal(syscall.SIGCONT)
		_ = c.Process.Signal(syscall.SIGTERM)
		_ = c.Wait()
	}
}

// stop sends SIGTERM and checks that nothing above info was logged on
// stopping and that notify-keyspace-events is back to "".
func (p *longProbe) stop() {
	must(p.t, p.cmd.Process.Signal(syscall.SIGCONT))
	logged := p.stderr.Len()
	must(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
	err := p.cmd.Wait()
	tail := p.stderr.String()[logged:]
	for _, line := range strings.Split(tail, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			p.t.Errorf("logged on SIGTERM: %s", line)
		}
	}
	v := p.admin.ConfigGet(context.Background(), "notify-keyspace-events").Val()["notify-keyspace-events"]
	p.logf("SIGTERM: exit %v, %d lines logged on stopping, notify-keyspace-events %q after", err, strings.Count(tail, "\n"), v)
	if v != "" {
		p.t.Errorf("notify-keyspace-events %q after the exporter stopped, want \"\" back", v)
	}
}

// scrape reads the exporter's lock figures over HTTP (none when the scrape
// fails or shows none).
func (p *longProbe) scrape() (lockFigures, time.Time) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://127.0.0.1:" + p.port + "/metrics")
	if err != nil {
		return nil, time.Time{}
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		p.t.Errorf("scrape: %v", err)
		return nil, time.Time{}
	}
	list := make([]*dto.MetricFamily, 0, len(fams))
	for _, f := range fams {
		list = append(list, f)
	}
	return scrapedLocks(list, p.addr)
}

// exact reports whether the exporter shows lock figures, checking them.
func (p *longProbe) exact() bool {
	seen, at := p.scrape()
	shown := len(seen) > 0
	if shown {
		if good, why := checkAt(p.log.snapshot(), seen, at, sampler.DefaultLongHeld); !good {
			p.t.Errorf("figures never true at %v: %s", at, why)
		}
	}
	return shown
}

// redisCPU is the server's CPU time (INFO cpu).
func redisCPU(t testing.TB, rdb *redis.Client) time.Duration {
	var total float64
	for _, line := range strings.Split(rdb.Info(context.Background(), "cpu").Val(), "\r\n") {
		k, v, _ := strings.Cut(line, ":")
		if k == "used_cpu_sys" || k == "used_cpu_user" {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

func pct(d, over time.Duration) float64 { return 100 * d.Seconds() / over.Seconds() }

// probeGetLoop is the other client, a process of its own.
type probeGetLoop struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out string
}

func startProbeGetLoop(t *testing.T, addr string, keys int) *probeGetLoop {
	out := filepath.Join(t.TempDir(), "latencies")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockProbeGetLoop$", "-test.count=1")
	cmd.Env = append(os.Environ(), probeGetLoopEnv+"="+addr+","+out+","+strconv.Itoa(keys))
	in, err := cmd.StdinPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	return &probeGetLoop{cmd: cmd, in: in, out: out}
}

// getRecord is one GET: when it started and how long it took.
type getRecord struct {
	at  time.Time
	lat time.Duration
}

// stop ends the loop.
func (g *probeGetLoop) stop(t *testing.T) {
	must(t, g.in.Close())
	must(t, g.cmd.Wait())
}

// records reads the GETs recorded so far (the loop writes them out every
// second).
func (g *probeGetLoop) records(t *testing.T) []getRecord {
	b, err := os.ReadFile(g.out)
	must(t, err)
	out := make([]getRecord, 0, len(b)/16)
	for ; len(b) >= 16; b = b[16:] {
		out = append(out, getRecord{time.Unix(0, int64(binary.LittleEndian.Uint64(b))), time.Duration(binary.LittleEndian.Uint64(b[8:]))})
	}
	return out
}

// TestLockProbeGetLoop is the other client of TestLockProbeAtScale; it
// runs only in the process that test starts. Every millisecond it GETs a
// random key and records (start Unix ns, latency ns) until its stdin
// closes.
func TestLockProbeGetLoop(t *testing.T) {
	env := os.Getenv(probeGetLoopEnv)
	if env == "" {
		t.Skip("only run by TestLockProbeAtScale")
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
	ctx := context.Background()
	var rec [16]byte
	flushed := time.Now()
	for next := time.Now(); !stop.Load(); {
		next = next.Add(time.Millisecond)
		key := "key:" + strconv.Itoa(rng.IntN(keys))
		start := time.Now()
		_ = c.Get(ctx, key).Err()
		binary.LittleEndian.PutUint64(rec[:8], uint64(start.UnixNano()))
		binary.LittleEndian.PutUint64(rec[8:], uint64(time.Since(start)))
		_, _ = w.Write(rec[:])
		if time.Since(flushed) > time.Second {
			_, flushed = w.Flush(), time.Now()
		}
		time.Sleep(time.Until(next))
	}
	must(t, w.Flush())
	must(t, f.Close())
}

// p99 is the 99th percentile of the GETs that started in the windows.
func p99(gets []getRecord, windows []probeWindow) (time.Duration, int) {
	var lat []time.Duration
	for _, g := range gets {
		for _, w := range windows {
			if !g.at.Before(w.start) && g.at.Before(w.end) {
				lat = append(lat, g.lat)
				break
			}
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, len(lat)*99/100)], len(lat)
}

// steadyRun is what the steady phase measured.
type steadyRun struct {
	firstExact, end            time.Time
	cpuStart, cpuExact, cpuEnd time.Duration
	checked, violations        int
	ages                       []time.Duration
	added, deleted             time.Time // when the 1,000 were acknowledged, and the 500 deletions
	addShown, delShown         time.Duration
}

// steadyPhase runs the exporter for d, scraping every second and checking
// every scrape, while the writer runs; once the figures are exact it adds
// 1,000 locks without TTL, and deletes 500 of them a minute later.
func (p *longProbe) steadyPhase(d time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bursts := make(chan []lockOp)
	acked := make(chan time.Time, 1)
	go p.write(ctx, bursts, acked)
	r := &steadyRun{cpuStart: redisCPU(p.t, p.admin)}
	p.logf("steady phase: exporter started; load %s", figures.LoadAvg())
	p.start()
	for tick := time.NewTicker(time.Second); time.Since(p.began) < d; <-tick.C {
		p.scrapeOnce(r)
		if n := len(r.ages); time.Since(p.began)%time.Minute < time.Second {
			p.progress(r, n)
		}
		switch {
		case r.firstExact.IsZero():
		case r.added.IsZero() && time.Since(r.firstExact) > 30*time.Second:
			bursts <- burstOps(0, 1000, 's')
			r.added = <-acked
		case r.deleted.IsZero() && r.addShown > 0 && time.Since(r.added) > time.Minute:
			bursts <- burstOps(0, 500, 'd')
			r.deleted = <-acked
		}
	}
	r.end, r.cpuEnd = time.Now(), redisCPU(p.t, p.admin)
	p.steadyReport(r)
}

// write runs the writer (about 20 requests a second) and the bursts it is
// handed, one request at a time: the truth log needs them in order.
func (p *longProbe) write(ctx context.Context, bursts <-chan []lockOp, acked chan<- time.Time) {
	w := newLockWriter(redistest.NewClient(p.t, &redis.Options{Addr: p.addr}), p.log, "lock:probe:", 1000, 9)
	for ctx.Err() == nil {
		var err error
		select {
		case ops := <-bursts:
			err = w.send(ctx, ops)
			acked <- ops[len(ops)-1].acked
		default:
			err = w.step(ctx)
		}
		if err != nil && ctx.Err() == nil {
			p.t.Errorf("writer: %v", err)
			return
		}
		time.Sleep(time.Duration(1+w.rng.IntN(100)) * time.Millisecond)
	}
}

// burstOps are writes of lock:burst:from…to-1: SETs without TTL or DELs.
func burstOps(from, to int, kind byte) []lockOp {
	ops := make([]lockOp, 0, to-from)
	for i := from; i < to; i++ {
		ops = append(ops, lockOp{key: "lock:burst:" + strconv.Itoa(i), kind: kind, expireAt: -1})
	}
	return ops
}

// scrapeOnce scrapes, checks the figures against the truth at their time,
// and notes their age and when the bursts showed.
func (p *longProbe) scrapeOnce(r *steadyRun) {
	seen, at := p.scrape()
	now := time.Now()
	if len(seen) == 0 {
		if !r.firstExact.IsZero() {
			p.logf("scrape at +%v shows no lock figures", now.Sub(p.began).Round(time.Second))
		}
		return
	}
	r.checked++
	if good, why := checkAt(p.log.snapshot(), seen, at, sampler.DefaultLongHeld); !good {
		if r.violations++; r.violations <= 5 {
			p.logf("VIOLATION at +%v: figures of %v never true then: %s", now.Sub(p.began).Round(time.Millisecond), at, why)
		}
	}
	if r.firstExact.IsZero() {
		r.firstExact, r.cpuExact = now, redisCPU(p.t, p.admin)
		p.logf("first exact figures scraped %.1f s after the exporter started, stamped +%.1f s; load %s",
			now.Sub(p.began).Seconds(), at.Sub(p.began).Seconds(), figures.LoadAvg())
	}
	r.ages = append(r.ages, now.Sub(at))
	burst := seen[`locks_held{key_group="lock:burst:*"}`]
	if !r.added.IsZero() && r.addShown == 0 && burst == 1000 && !at.Before(r.added) {
		r.addShown = now.Sub(r.added)
	}
	if !r.deleted.IsZero() && r.delShown == 0 && burst == 500 && !at.Before(r.deleted) {
		r.delShown = now.Sub(r.deleted)
	}
}

// progress logs, once a minute, the figures' latest age, the server's time
// per key SCAN visits so far (its own accounting; COUNT 25) and the load.
func (p *longProbe) progress(r *steadyRun, n int) {
	age := time.Duration(0)
	if n > 0 {
		age = r.ages[n-1]
	}
	calls, usec := scanStats(p.admin)
	c := time.Duration(float64(usec) * 1000 / float64(max(calls, 1)) / sampler.DefaultLockScanCount)
	p.logf("+%v: %d scrapes with figures, last age %v; SCAN %d calls, %v per key visited (c*N/B at the 20 %% budget: %.0f s); load %s",
		time.Since(p.began).Round(time.Second), n, age.Round(time.Millisecond), calls, c,
		c.Seconds()*float64(p.keys)/sampler.DefaultLockScanBudget, figures.LoadAvg())
}

// scanStats reads the server's SCAN calls and time (INFO commandstats).
func scanStats(rdb *redis.Client) (calls, usec int64) {
	for _, line := range strings.Split(rdb.Info(context.Background(), "commandstats").Val(), "\r\n") {
		rest, ok := strings.CutPrefix(line, "cmdstat_scan:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
	}
	return calls, usec
}

func (p *longProbe) steadyReport(r *steadyRun) {
	if r.firstExact.IsZero() {
		p.t.Errorf("no exact lock figures in %v", r.end.Sub(p.began))
		return
	}
	ages := slices.Clone(r.ages)
	slices.Sort(ages)
	over := 0
	for _, a := range ages {
		if a > 2*p.interval {
			over++
		}
	}
	p.logf("first exact: %.1f s after start (arithmetic floor c*N/B at the measured c: see INFO commandstats)", r.firstExact.Sub(p.began).Seconds())
	p.logf("scrapes after the first exact: %d, age median %v, p99 %v, max %v; %d older than 2 intervals",
		len(ages), ages[len(ages)/2].Round(time.Millisecond), ages[len(ages)*99/100].Round(time.Millisecond), ages[len(ages)-1].Round(time.Millisecond), over)
	p.logf("+1,000 locks without TTL shown %.1f s after acknowledged; -500 shown %.1f s after", r.addShown.Seconds(), r.delShown.Seconds())
	p.logf("never-true probe: %d scrapes checked, %d violations, %d writes logged", r.checked, r.violations, len(p.log.snapshot()))
	p.logf("redis CPU: %.1f %% of a core during the sync (%v), %.1f %% after (%v); exporter CPU %.1f %%; load %s",
		pct(r.cpuExact-r.cpuStart, r.firstExact.Sub(p.began)), r.firstExact.Sub(p.began).Round(time.Second),
		pct(r.cpuEnd-r.cpuExact, r.end.Sub(r.firstExact)), r.end.Sub(r.firstExact).Round(time.Second),
		pct(procCPU(p.cmd.Process.Pid), r.end.Sub(p.began)), figures.LoadAvg())
	if r.violations > 0 || over > 0 || r.addShown == 0 || r.addShown > 2*p.interval || r.delShown == 0 || r.delShown > 2*p.interval {
		p.t.Errorf("acceptance not met: see above")
	}
}

// alternate stops (SIGSTOP) and continues the exporter in windows of
// probeWindowLen, pairs times or until done reports true (checked after each
// running window), noting the server's CPU over each window.
func (p *longProbe) alternate(phase string, pairs int, done func() bool) {
	p.logf("%s: alternating windows; load %s", phase, figures.LoadAvg())
	procs := append([]*exec.Cmd{p.cmd}, p.variants...)
	for i, c := range procs {
		if c != nil && exited(c.Process.Pid) {
			p.t.Fatalf("exporter %d exited before the windows (its log is above)", i+1)
		}
	}
	for i := 0; i < pairs; i++ {
		var order []int // a stopped window before each exporter's
		for j := range procs {
			order = append(order, 0, 1+(i+j)%len(procs))
		}
		for _, ran := range order {
			for j, c := range procs {
				if c != nil && j+1 != ran {
					must(p.t, c.Process.Signal(syscall.SIGSTOP))
				}
			}
			if ran > 0 && procs[ran-1] != nil {
				must(p.t, procs[ran-1].Process.Signal(syscall.SIGCONT))
			}
			w := probeWindow{start: time.Now(), exporter: ran, phase: phase}
			cpu := redisCPU(p.t, p.admin)
			time.Sleep(probeWindowLen)
			w.end, w.cpu = time.Now(), redisCPU(p.t, p.admin)-cpu
			p.windows = append(p.windows, w)
		}
		if done != nil && done() {
			p.logf("%s: exact after %d pairs of windows", phase, i+1)
			break
		}
	}
	p.report(phase)
}

// report compares the other client's GET p99 and the server's CPU between
// the windows of a phase where the exporter ran and those where it was
// stopped.
func (p *longProbe) report(phase string) {
	time.Sleep(2 * time.Second) // the GET loop writes its records out every second
	gets := p.gets.records(p.t)
	var run, stopped []probeWindow
	var runCPU, stopCPU, runT, stopT time.Duration
	for _, w := range p.windows {
		switch {
		case w.phase != phase:
		case w.exporter > 0:
			run, runCPU, runT = append(run, w), runCPU+w.cpu, runT+w.end.Sub(w.start)
		default:
			stopped, stopCPU, stopT = append(stopped, w), stopCPU+w.cpu, stopT+w.end.Sub(w.start)
		}
	}
	if len(p.variants) > 0 {
		p.reportEach(phase, gets, run, stopped)
	}
	pr, nr := p99(gets, run)
	ps, ns := p99(gets, stopped)
	p.logf("%s: GET p99 %v while the exporter ran (%d GETs, %d windows), %v while it was stopped (%d GETs): ratio %.2f; redis CPU %.1f %% / %.1f %%",
		phase, pr, nr, len(run), ps, ns, float64(pr)/float64(max(ps, 1)), pct(runCPU, runT), pct(stopCPU, stopT))
	if out := os.Getenv("CACHEWATCH_EXPORTER_PROBE_REPORT"); out != "" {
		must(p.t, os.WriteFile(out, []byte(strings.Join(p.lines, "\n")+"\n"), 0o644))
	}
}

// exited reports whether process pid has exited (a zombie, not waited for
// yet).
func exited(pid int) bool {
	f := procStat(pid)
	return len(f) == 0 || f[0] == "Z"
}

// procCPU is another process's user and system CPU time (/proc/PID/stat).
func procCPU(pid int) time.Duration {
	f := procStat(pid)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ = 100
}

// procStat is the fields of /proc/PID/stat after the command name (the
// state first); nil once the process is gone.
func procStat(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	return strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
}

// reportEach compares each exporter's windows of a phase with the stopped
// ones.
func (p *longProbe) reportEach(phase string, gets []getRecord, run, stopped []probeWindow) {
	ps, _ := p99(gets, stopped)
	for e := 1; e <= 1+len(p.variants); e++ {
		var ws []probeWindow
		var cpu, took time.Duration
		for _, w := range run {
			if w.exporter == e {
				ws, cpu, took = append(ws, w), cpu+w.cpu, took+w.end.Sub(w.start)
			}
		}
		pe, n := p99(gets, ws)
		p.logf("%s: exporter %d: GET p99 %v (%d GETs, %d windows), stopped %v: ratio %.2f; redis CPU %.1f %%",
			phase, e, pe, n, len(ws), ps, float64(pe)/float64(max(ps, 1)), pct(cpu, took))
	}
}
