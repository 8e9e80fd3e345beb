package probe_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/internal/figures"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Opt-in: the cost of one exporter probed for many targets.
const (
	scaleTargetsEnv  = "CACHEWATCH_PROBE_TARGETS"
	scaleIntervalEnv = "CACHEWATCH_PROBE_INTERVAL"
	scaleRounds      = 3
)

// TestProbeAtScale runs `cachewatch exporter --probe.modules-file` against
// N throwaway redis-servers, probed as one Prometheus job at the interval
// would probe them (each target once per interval, the probes spread over
// it), beside a single-target exporter of one more redis-server. It reports
// the probe latency p50/p99, the exporter's CPU and RSS per target, and the
// Redis-side cost of a probed target against the single-target one's.
func TestProbeAtScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(scaleTargetsEnv))
	if n == 0 {
		t.Skipf("opt-in: %s=500 [%s=30s] go test -run TestProbeAtScale -v -timeout 1h ./exporter/probe", scaleTargetsEnv, scaleIntervalEnv)
	}
	interval := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv(scaleIntervalEnv)); err == nil {
		interval = d
	}
	bin := filepath.Join(t.TempDir(), "cachewatch")
	metrictest.RunTool(t, "go", "build", "-o", bin, "github.com/cachewatch/cachewatch/cmd/cachewatch")
	// The servers run their background tasks once a second (hz 1, the
	// default is 10): hundreds of them share the exporter's cores here, as
	// they would not in production, and their timers would be what the
	// probe latency measures.
	targets := make([]*redistest.Server, n)
	for i := range targets {
		targets[i] = redistest.Start(t, "--hz", "1")
	}
	solo := redistest.Start(t, "--hz", "1")
	modules := filepath.Join(t.TempDir(), "modules.yml")
	if err := os.WriteFile(modules, []byte("modules:\n  default: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	every := interval.String()
	prober, probeAddr := startExporter(t, bin, "--probe.modules-file", modules, "--sample.interval", every)
	startExporter(t, bin, "--redis.addr", solo.Addr, "--sample.interval", every)
	baseRSS := rssOf(t, prober)
	t.Logf("%d redis-servers up; exporter RSS before any probe %.1f MiB; load %s", n, mib(baseRSS), figures.LoadAvg())

	probeAll(t, probeAddr, targets, 0) // starts every sampler, each probe waiting for its first sample
	cpu0, at0 := cpuOf(t, prober), time.Now()
	cost0 := redisCosts(t, targets[0], solo)
	var took []time.Duration
	for range scaleRounds {
		took = append(took, probeAll(t, probeAddr, targets, interval)...)
	}
	cpu, window := cpuOf(t, prober)-cpu0, time.Since(at0)
	cost := redisCosts(t, targets[0], solo)
	rss := rssOf(t, prober)
	slices.Sort(took)
	t.Logf("%d targets, %d probes over %s at a %s interval: probe p50 %s, p99 %s, max %s; load %s", n, len(took),
		window.Round(time.Second), interval, figures.Quantile(took, 0.5), figures.Quantile(took, 0.99), figures.Quantile(took, 1), figures.LoadAvg())
	t.Logf("exporter CPU %.2f%% of a core (%.3f ms/s per target); RSS %.1f MiB (%.2f MiB per target over the %.1f MiB before any probe)",
		100*cpu.Seconds()/window.Seconds(), 1000*cpu.Seconds()/window.Seconds()/float64(n), mib(rss), mib(rss-baseRSS)/float64(n), mib(baseRSS))
	for i, who := range []string{"a probed target", "the single-target exporter's"} {
		t.Logf("Redis-side cost of %s: %.0f commands, %.0f µs of server time per interval",
			who, float64(cost[i].calls-cost0[i].calls)*interval.Seconds()/window.Seconds(), float64(cost[i].usec-cost0[i].usec)*interval.Seconds()/window.Seconds())
	}
}

// startExporter runs the exporter with args and waits for its /metrics.
func startExporter(t *testing.T, bin string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(bin, append([]string{"exporter", "--web.listen-address", addr}, args...)...)
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	poll.Until(t, "the exporter to serve /metrics", func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err == nil {
			_ = resp.Body.Close()
		}
		return err == nil
	})
	return cmd, addr
}

// probeAll probes every target once, the probes spread evenly over spread
// (all at once, 16 at a time, when 0), and returns each probe's time.
func probeAll(t *testing.T, addr string, targets []*redistest.Server, spread time.Duration) []time.Duration {
	t.Helper()
	took := make([]time.Duration, len(targets))
	var wg sync.WaitGroup
	slots := make(chan struct{}, 16)
	start := time.Now()
	for i, s := range targets {
		if spread > 0 {
			time.Sleep(time.Until(start.Add(spread * time.Duration(i) / time.Duration(len(targets)))))
		} else {
			slots <- struct{}{}
		}
		wg.Go(func() {
			defer func() {
				if spread == 0 {
					<-slots
				}
			}()
			began := time.Now()
			body, code := get200(addr, s.Addr)
			took[i] = time.Since(began)
			if code != http.StatusOK || !strings.Contains(body, "cachewatch_exporter_up") {
				t.Errorf("probe of %s: %d", s.Addr, code)
			}
		})
	}
	wg.Wait()
	if spread > 0 {
		time.Sleep(time.Until(start.Add(spread)))
	}
	return took
}

func get200(addr, target string) (string, int) {
	resp, err := http.Get("http://" + addr + "/probe?target=" + url.QueryEscape(target))
	if err != nil {
		return err.Error(), 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

// redisCost is a server's count of commands served and their time.
type redisCost struct{ calls, usec int64 }

// redisCosts reads each server's commands and their time (INFO
// commandstats), less the INFO that reads them.
func redisCosts(t *testing.T, servers ...*redistest.Server) []redisCost {
	out := make([]redisCost, len(servers))
	for i, s := range servers {
		c := redistest.NewClient(t, &redis.Options{Addr: s.Addr})
		info := c.Info(context.Background(), "commandstats").Val()
		for _, line := range strings.Split(info, "\r\n") {
			if !strings.HasPrefix(line, "cmdstat_") || strings.HasPrefix(line, "cmdstat_info:") {
				continue
			}
			_, fields, _ := strings.Cut(line, ":")
			for _, f := range strings.Split(fields, ",") {
				k, v, _ := strings.Cut(f, "=")
				n, _ := strconv.ParseFloat(v, 64)
				switch k {
				case "calls":
					out[i].calls += int64(n)
				case "usec":
					out[i].usec += int64(n)
				}
			}
		}
		_ = c.Close()
	}
	return out
}

// cpuOf is the process's user and system CPU time so far.
func cpuOf(t *testing.T, cmd *exec.Cmd) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b)[strings.LastIndexByte(string(b), ')')+2:])
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * time.Second / 100 // USER_HZ
}

// rssOf is the process's resident set size in bytes.
func rssOf(t *testing.T, cmd *exec.Cmd) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
