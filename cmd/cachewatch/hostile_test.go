package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cachewatch/cachewatch/internal/childproc"
	"github.com/cachewatch/cachewatch/internal/hostileredis"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// childArgs, set in the environment, makes the test binary run the
// cachewatch command it holds (arguments separated by the unit separator, 0x1f) instead of its
// tests: a process of its own, whose memory can be measured.
const childArgs = "CACHEWATCH_TEST_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" { // the docs' shell blocks call the binary as cachewatch
		main()
	}
	if args := os.Getenv(childArgs); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		code := run(ctx, strings.Split(args, "\x1f"), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// memoryLimit is the Helm chart's memory limit for the exporter.
const memoryLimit = 256 << 20

// One exporter process samples a healthy Redis and an endpoint per hostile
// reply (to INFO; and a 100 MB reply to the read of a lock's value): it
// does not panic, its peak RSS stays under the chart's memory limit,
// /metrics answers, the healthy target is up, and each hostile one reports
// up 0 with its error counted.
func TestExporterProcessSurvivesHostileReplies(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an exporter process")
	}
	healthy := redistest.Start(t)
	targets := map[string]string{"healthy": healthy.Addr}
	for _, m := range hostileredis.Modes {
		targets[slug(m.Name)] = hostileredis.Start(t, m.Mode, "INFO").Addr
	}
	targets["lock-value-100mb"] = hostileredis.Start(t, hostileredis.RealHuge, "GETRANGE").Addr
	p := startExporterProcess(t, targets)
	for name := range targets {
		if name != "healthy" {
			p.waitForErrors(t, name)
		}
	}
	body, took := p.scrape(t)
	for name := range targets {
		want := 0.0
		if name == "healthy" {
			want = 1
		}
		if got := metrictest.Sum(t, parsed(t, body), "cachewatch_exporter_up", "target", name); got != want {
			t.Errorf("up{target=%q} = %v, want %v", name, got, want)
		}
	}
	rss := p.peakRSS(t)
	if rss >= memoryLimit {
		t.Errorf("peak RSS %d MiB, over the chart's limit of %d MiB", rss>>20, memoryLimit>>20)
	}
	p.stop(t)
	t.Logf("%d targets: peak RSS %.1f MiB, /metrics answered in %s", len(targets), float64(rss)/(1<<20), took)
}

// With CACHEWATCH_HOSTILE_EACH=1, each hostile reply is measured on its
// own: an exporter process per reply, its peak RSS and scrape time logged
// (go test -v -run TestExporterProcessPerHostileReply ./cmd/cachewatch).
func TestExporterProcessPerHostileReply(t *testing.T) {
	if os.Getenv("CACHEWATCH_HOSTILE_EACH") == "" {
		t.Skip("set CACHEWATCH_HOSTILE_EACH=1 to measure each hostile reply in its own exporter process")
	}
	for _, c := range []struct {
		name    string
		mode    hostileredis.Mode
		command string
	}{
		{"huge header", hostileredis.HugeHeader, "INFO"}, {"claimed 4 GiB", hostileredis.ClaimedAbsent, "INFO"},
		{"100 MB INFO", hostileredis.RealHuge, "INFO"}, {"100 MB lock value", hostileredis.RealHuge, "GETRANGE"},
		{"not RESP", hostileredis.Garbage, "INFO"}, {"mid-reply close", hostileredis.MidReplyClose, "INFO"},
		{"looping cursor", hostileredis.LoopingCursor, "SCAN"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := startExporterProcess(t, map[string]string{"hostile": hostileredis.Start(t, c.mode, c.command).Addr})
			p.waitForErrors(t, "hostile")
			time.Sleep(3 * time.Second) // a few more samples (backoff 1 s, 2 s): measuring, not ordering
			body, took := p.scrape(t)
			up := metrictest.Sum(t, parsed(t, body), "cachewatch_exporter_up", "target", "hostile")
			p.stop(t)
			t.Logf("%s: up %v, errors %s; peak RSS %.1f MiB; /metrics in %s; exit %s", c.name, up,
				errorSeries(body), float64(p.rss)/(1<<20), took, p.exit)
		})
	}
}

func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ' ' {
			return '-'
		}
		return r
	}, strings.ToLower(s))
}

func errorSeries(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "cachewatch_exporter_sample_errors_total{") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "; ")
}

// exporterProcess is the test binary running `cachewatch exporter`.
type exporterProcess struct {
	cmd    *exec.Cmd
	listen string
	stderr bytes.Buffer
	exited chan struct{}
	exit   string
	rss    uint64
}

func startExporterProcess(t *testing.T, targets map[string]string) *exporterProcess {
	t.Helper()
	var file strings.Builder
	file.WriteString("targets:\n")
	for name, addr := range targets {
		fmt.Fprintf(&file, "  - name: %s\n    addrs: [%q]\n    mode: standalone\n", name, addr)
	}
	path := filepath.Join(t.TempDir(), "targets.yml")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &exporterProcess{listen: freeListenAddr(t), exited: make(chan struct{})}
	args := []string{"exporter", "--targets.file", path, "--web.listen-address", p.listen, "--sample.interval", "1s",
		"--locks.notifications", "off", "--log.level", "error"}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), childArgs+"="+strings.Join(args, "\x1f"))
	p.cmd.Stderr = &p.stderr
	if err := childproc.Start(p.cmd); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.exit = fmt.Sprint(err)
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// waitForErrors waits until /metrics counts a sample error of target.
func (p *exporterProcess) waitForErrors(t *testing.T, target string) {
	t.Helper()
	err := poll.Check(context.Background(), poll.Bound, 100*time.Millisecond, func() error {
		select {
		case <-p.exited:
			return fmt.Errorf("the exporter exited (%s): %s", p.exit, p.stderr.String())
		default:
		}
		body, err := p.get()
		if err != nil {
			return err
		}
		if metrictest.Sum(t, parsed(t, body), "cachewatch_exporter_sample_errors_total", "target", target) == 0 {
			return fmt.Errorf("no sample error counted for target %s", target)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// parsed is a gatherer of a scraped exposition.
func parsed(t *testing.T, body string) prometheus.Gatherer {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		out := make([]*dto.MetricFamily, 0, len(fams))
		for _, f := range fams {
			out = append(out, f)
		}
		return out, nil
	})
}

func (p *exporterProcess) get() (string, error) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + p.listen + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("/metrics answered %d", resp.StatusCode)
	}
	return string(b), err
}

// scrape reads /metrics and how long it took.
func (p *exporterProcess) scrape(t *testing.T) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	body, err := p.get()
	if err != nil {
		t.Fatalf("scrape: %v (exporter: %s)", err, p.stderr.String())
	}
	return body, time.Since(start)
}

// peakRSS reads the process's peak resident set size (VmHWM).
func (p *exporterProcess) peakRSS(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		t.Skipf("no /proc to read the peak RSS from: %v", err)
	}
	defer f.Close()
	for s := bufio.NewScanner(f); s.Scan(); {
		if v, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/<pid>/status")
	return 0
}

// stop ends the exporter (SIGTERM), failing the test if it had exited by
// itself — a panic — and records its peak RSS first.
func (p *exporterProcess) stop(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		if p.rss == 0 {
			t.Errorf("the exporter exited by itself (%s): %s", p.exit, p.stderr.String())
		}
		return
	default:
	}
	p.rss = p.peakRSS(t)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(poll.Bound):
		_ = p.cmd.Process.Kill()
		t.Errorf("the exporter did not stop on SIGTERM")
	}
}
