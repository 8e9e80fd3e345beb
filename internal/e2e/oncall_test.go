package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/cmd/cachewatch/demo"
	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/instrument"
	"github.com/cachewatch/cachewatch/internal/childproc"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Job names of the on-call test's scrape targets.
const (
	outageJob     = "orders-api"
	contentionJob = "billing-worker"
	demoJob       = "demo"
)

// The on-call scenarios' timing: windows and `for:` durations cut so that
// each scenario runs in a minute or two; the Prometheus behaviour they
// exercise (latches, staleness, inhibition) does not depend on them.
const (
	onCallRateWindow = 30 * time.Second
	onCallFor        = 10 * time.Second
	// hold is how long a scenario watches for a notification that must not
	// come (a resolution while the harm goes on): several evaluation and
	// notification rounds.
	hold = 40 * time.Second
	// demoRun is how long the demo's protected phase runs.
	demoRun = 150 * time.Second
)

// TestOnCall judges the generated alerts as on-call outcomes against a real
// Prometheus and Alertmanager, with four scenarios at once:
//
//   - a source outage that outlasts the hard TTL pages and keeps paging,
//     through the errors that follow the stale phase, until the loader
//     recovers;
//   - killing the exporter while a lock without TTL pages sends no resolved
//     notification and escalates, and the page ends only when the lock does;
//   - the demo's fleet on cachewatch (a try-once job lock included) pages
//     nobody;
//   - a warning whose critical fires is inhibited.
func TestOnCall(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: runs Redis, Prometheus, Alertmanager and four scenarios for about three minutes; skipped with -short")
	}
	bins := findBinaries(t)
	began := time.Now()
	live, demoRedis := redistest.Start(t), redistest.Start(t)

	hook := startWebhook(t)
	_, amAddr := startAlertmanager(t, bins.alertmanager, alertmanagerConfig(t, hook.srv.URL))
	cfg := onCallConfig(t)
	rules, _, _ := generatedRules(t, t.TempDir(), cfg)

	outage := startOutageService(t, live.Addr)
	contention := startContentionService(t, live.Addr)
	demoAddr := startDemo(t, demoRedis.Addr)
	exp := startPlainExporter(t, live.Addr)

	_, api := startPrometheus(t, bins.prometheus, rules, amAddr, []scrapeJob{
		{name: outageJob, targets: []string{outage.addr}},
		{name: contentionJob, targets: []string{contention.addr}},
		{name: demoJob, targets: []string{demoAddr}},
		{name: exporterJob, targets: []string{exp.addr}},
	})
	waitTargetsUp(t, context.Background(), api, 4)
	t.Logf("on-call stack up after %v", time.Since(began).Round(time.Second))

	var wg sync.WaitGroup
	for name, scenario := range map[string]func(*testing.T){
		"source outage past the hard TTL pages until the loader recovers": func(t *testing.T) { outageScenario(t, hook, outage) },
		"a dead exporter is no recovery and escalates":                    func(t *testing.T) { blindExporterScenario(t, hook, exp, live.Addr) },
		"a critical inhibits its warning":                                 func(t *testing.T) { inhibitionScenario(t, hook, amAddr, contention) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, scenario)
		}()
	}
	wg.Wait()
	t.Run("the demo's fleet on cachewatch pages nobody", func(t *testing.T) { quietScenario(t, hook) })
	t.Run("every dashboard query finds the data the scenarios produced", func(t *testing.T) { panelsFindData(t, api) })
	t.Logf("on-call: elapsed %v", time.Since(began).Round(time.Second))
}

// onCallConfig is the default configuration with the rate window and every
// `for:` cut, and the demo's own exporter selected besides the real one.
func onCallConfig(t *testing.T) alerts.Config {
	t.Helper()
	cfg := alerts.DefaultConfig()
	cfg.RateWindow = model.Duration(onCallRateWindow)
	cfg.EventWindow = model.Duration(time.Minute)
	cfg.ExporterSelector = `job=~"` + exporterJob + `|` + demoJob + `"`
	for _, k := range cfg.Keys() {
		if strings.HasSuffix(k, "_for") {
			if err := cfg.Set(k, onCallFor.String()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// outageScenario: the loader fails for good; the stale phase pages
// (stale-forever), the hard TTL passes and callers get errors (a second
// page), and neither page resolves until the loader recovers.
func outageScenario(t *testing.T, hook *webhook, s *outageService) {
	const group = "product:*"
	is := labelsOf(outageJob, group)
	s.failing.Store(true)
	cause := time.Now()
	t.Logf("loader failing from now; values expire %v after their last load", s.hardTTL)
	stale := waitNotified(t, hook, "CachewatchStaleForever", "firing", is, cause)
	t.Logf("CachewatchStaleForever paged %s after the loader failed", since(cause, stale))
	errs := waitNotified(t, hook, "CachewatchCacheErrors", "firing", is, cause)
	t.Logf("CachewatchCacheErrors paged %s after the loader failed (callers got %d errors by then)", since(cause, errs), s.errors.Load())
	if errs.received.Sub(cause) < s.hardTTL {
		t.Errorf("callers got errors before the hard TTL passed: the stale phase served nothing")
	}
	holdQuiet(t, hook, "CachewatchStaleForever", "resolved", is, cause)
	recovered := time.Now()
	s.failing.Store(false)
	for _, name := range []string{"CachewatchStaleForever", "CachewatchCacheErrors"} {
		a := waitNotified(t, hook, name, "resolved", is, recovered)
		t.Logf("%s resolved %s after the loader recovered", name, since(recovered, a))
	}
	for _, a := range hook.all() {
		if a.Labels["job"] == outageJob && a.receiver != alerts.ReceiverPage && a.Labels["severity"] == alerts.SeverityCritical {
			t.Errorf("critical %s went to %s, not the pager", a.Labels["alertname"], a.receiver)
		}
	}
}

// blindExporterScenario: a lock without TTL pages; the exporter dies: the
// page stays and the exporter being down is critical; the exporter comes
// back while the lock is still there: the page stays; the lock is removed:
// the page resolves.
func blindExporterScenario(t *testing.T, hook *webhook, exp *restartable, redisAddr string) {
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "lock:nottl:orders", "crashed-owner", 0).Err(); err != nil {
		t.Fatal(err)
	}
	cause := time.Now()
	is := map[string]string{"job": exporterJob, "key_group": "lock:nottl:orders"}
	page := waitNotified(t, hook, "CachewatchLocksWithoutTTL", "firing", is, cause)
	t.Logf("CachewatchLocksWithoutTTL paged %s after the lock was written", since(cause, page))

	killed := time.Now()
	exp.stop()
	down := waitNotified(t, hook, "CachewatchExporterDown", "firing", map[string]string{"job": exporterJob, "severity": alerts.SeverityCritical}, killed)
	t.Logf("CachewatchExporterDown paged (critical) %s after the exporter was killed", since(killed, down))
	holdQuiet(t, hook, "CachewatchLocksWithoutTTL", "resolved", is, cause)

	restarted := time.Now()
	exp.restart(t)
	up := waitNotified(t, hook, "CachewatchExporterDown", "resolved", map[string]string{"job": exporterJob}, restarted)
	t.Logf("CachewatchExporterDown resolved %s after the exporter restarted; the lock is still there", since(restarted, up))
	holdQuiet(t, hook, "CachewatchLocksWithoutTTL", "resolved", is, cause)
	fixed := time.Now()
	if err := rdb.Unlink(ctx, "lock:nottl:orders").Err(); err != nil {
		t.Fatal(err)
	}
	a := waitNotified(t, hook, "CachewatchLocksWithoutTTL", "resolved", is, fixed)
	t.Logf("CachewatchLocksWithoutTTL resolved %s after the lock was removed", since(fixed, a))
}

// inhibitionScenario: nearly every first attempt of waiting callers on one
// lock is busy, far past both thresholds: the critical pages; the warning
// of the same alert and labels fires too, but Alertmanager holds it,
// inhibited, and it never reaches the ticket queue.
func inhibitionScenario(t *testing.T, hook *webhook, am string, s *contentionService) {
	is := labelsOf(contentionJob, "lock:ledger:*")
	critical := waitNotified(t, hook, "CachewatchLockContentionHigh", "firing", withLabel(is, "severity", alerts.SeverityCritical), s.started)
	t.Logf("CachewatchLockContentionHigh critical paged %s after the contention began", since(s.started, critical))
	err := poll.Check(context.Background(), alertTimeout, time.Second, func() error {
		return inhibited(am, "CachewatchLockContentionHigh", withLabel(is, "severity", alerts.SeverityWarning))
	})
	if err != nil {
		t.Fatal(err)
	}
	holdQuiet(t, hook, "CachewatchLockContentionHigh", "firing", withLabel(is, "severity", alerts.SeverityWarning), s.started)
}

// inhibited tells whether Alertmanager at am holds the alert named
// alertname with labels want, suppressed by an inhibition.
func inhibited(am, alertname string, want map[string]string) error {
	url := "http://" + am + "/api/v2/alerts?filter=" + neturl.QueryEscape(fmt.Sprintf("alertname=%q", alertname))
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var got []struct {
		Labels map[string]string `json:"labels"`
		Status struct {
			State       string   `json:"state"`
			InhibitedBy []string `json:"inhibitedBy"`
		} `json:"status"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		return err
	}
	for _, a := range got {
		if hasLabels(a.Labels, want) {
			if a.Status.State == "suppressed" && len(a.Status.InhibitedBy) > 0 {
				return nil
			}
			return fmt.Errorf("%s %v is %s, inhibited by %v", alertname, want, a.Status.State, a.Status.InhibitedBy)
		}
	}
	return fmt.Errorf("Alertmanager holds no %s %v", alertname, want)
}

// quietScenario: over the demo's whole protected phase, nothing of the
// demo's pages.
func quietScenario(t *testing.T, hook *webhook) {
	deadline := demoStarted.Add(demoRun)
	for time.Now().Before(deadline) {
		time.Sleep(time.Until(deadline))
	}
	var tickets []string
	for _, a := range hook.all() {
		if a.Labels["job"] != demoJob || a.Status != "firing" {
			continue
		}
		if a.receiver == alerts.ReceiverPage {
			t.Errorf("the demo's fleet on cachewatch paged: %s %v", a.Labels["alertname"], a.Labels)
		} else {
			tickets = append(tickets, a.Labels["alertname"])
		}
	}
	t.Logf("demo's protected phase over %v: no page; tickets: %v", demoRun, tickets)
}

// selectorRE finds the vector selectors of cachewatch metrics in a query.
var selectorRE = regexp.MustCompile(`cachewatch_[a-z0-9_]+(?:\{[^}]*\})?`)

// panelsFindData runs every dashboard query against the Prometheus that
// scraped the scenarios: none may fail, and none may come back empty while
// every series it selects exists (the data are there, the query misses
// them).
func panelsFindData(t *testing.T, api promv1.API) {
	ctx := context.Background()
	checked := 0
	for _, p := range dashboards.Queries() {
		e := panelExpr(t, p)
		n, err := query(ctx, api, e)
		if err != nil {
			t.Errorf("%s / %s: %v\n  %s", p.Board, p.Panel, err, e)
			continue
		}
		if n > 0 {
			checked++
			continue
		}
		if allSelected(ctx, t, api, selectorRE.FindAllString(e, -1)) {
			t.Errorf("%s / %s returns nothing, though every series it selects exists:\n  %s", p.Board, p.Panel, e)
		}
	}
	t.Logf("%d panel queries returned data; none missed data that exists", checked)
}

// allSelected tells whether every selector has at least one series.
func allSelected(ctx context.Context, t *testing.T, api promv1.API, selectors []string) bool {
	if len(selectors) == 0 {
		return false
	}
	for _, sel := range selectors {
		if n, err := query(ctx, api, "count("+sel+")"); err != nil || n == 0 {
			return false
		}
	}
	return true
}

func withLabel(base map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for bk, bv := range base {
		out[bk] = bv
	}
	return out
}

func labelsOf(job, group string) map[string]string {
	return map[string]string{"job": job, "key_group": group}
}

func since(from time.Time, a webhookAlert) string {
	return a.received.Sub(from).Round(time.Second).String()
}

// waitNotified waits (generously: the machine may be busy) for a
// notification of alertname with status whose labels include want,
// received after from, and fails t if none comes.
func waitNotified(t *testing.T, hook *webhook, alertname, status string, want map[string]string, from time.Time) webhookAlert {
	t.Helper()
	var got webhookAlert
	err := poll.Check(context.Background(), alertTimeout, time.Second, func() error {
		var ok bool
		if got, ok = hook.first(alertname, status, want, from); !ok {
			return fmt.Errorf("no %s notification of %s %v", status, alertname, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v; received: %v", err, hook.summary())
	}
	return got
}

// holdQuiet watches for hold and fails t if a notification of alertname
// with status and labels want arrives after from.
func holdQuiet(t *testing.T, hook *webhook, alertname, status string, want map[string]string, from time.Time) {
	t.Helper()
	end := time.Now().Add(hold)
	for time.Now().Before(end) {
		if a, ok := hook.first(alertname, status, want, from); ok {
			t.Fatalf("%s %s at %s: %v", alertname, status, a.received.Format(time.TimeOnly), a.Labels)
		}
		time.Sleep(time.Second)
	}
}

// outageService is a service whose loader can be made to fail: callers
// fetch one product all the time through an instrumented Cache.
type outageService struct {
	addr    string
	hardTTL time.Duration
	failing atomic.Bool
	errors  atomic.Int64
}

func startOutageService(t *testing.T, redisAddr string) *outageService {
	s := &outageService{hardTTL: 20 * time.Second}
	reg := prometheus.NewRegistry()
	cw := newInstrumented(t, reg, redisAddr, "orders")
	products, err := instrument.NewCache[string](cw, instrument.CacheOptions{
		FreshTTL: time.Second, HardTTL: s.hardTTL, FailureHoldoff: 200 * time.Millisecond, RedisTimeout: liveTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { products.Close() })
	load := func(context.Context) (string, error) {
		if s.failing.Load() {
			return "", errors.New("database unavailable")
		}
		return "product 1", nil
	}
	background(t, 4, 50*time.Millisecond, func(ctx context.Context) {
		if _, err := products.Fetch(ctx, "product:1", load); err != nil {
			s.errors.Add(1)
		}
	})
	s.addr = serve(t, reg)
	return s
}

// contentionService: eight workers wait for one ledger lock each in turn.
type contentionService struct {
	addr    string
	started time.Time
}

func startContentionService(t *testing.T, redisAddr string) *contentionService {
	reg := prometheus.NewRegistry()
	cw := newInstrumented(t, reg, redisAddr, "billing")
	s := &contentionService{started: time.Now()}
	opts := instrument.LockOptions{TTL: 2 * time.Second,
		Backoff: instrument.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond, Retries: 100}}
	background(t, 8, time.Millisecond, func(ctx context.Context) {
		l, err := cw.Lock(ctx, "lock:ledger:7", opts)
		if err != nil {
			return
		}
		time.Sleep(40 * time.Millisecond)
		_ = l.Release(ctx)
	})
	s.addr = serve(t, reg)
	return s
}

// demoStarted is when the demo's protected phase began.
var demoStarted time.Time

// startDemo runs the demo's fleet on cachewatch (no unprotected phase) on
// its own Redis for demoRun, serving its metrics, as
// `cachewatch demo --phase cachewatch` does.
func startDemo(t *testing.T, redisAddr string) string {
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	demoStarted = time.Now()
	go func() {
		_, err := demo.Run(ctx, demo.Options{RedisURL: "redis://" + redisAddr, Duration: demoRun + time.Minute,
			Phase: demo.PhaseCachewatch, Registry: reg})
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("demo: %v", err)
		}
	})
	return serve(t, reg)
}

// restartable is a `cachewatch exporter` process that can be killed and
// started again on the same address.
type restartable struct {
	addr string
	p    *process
	bin  string
	args []string
}

func startPlainExporter(t *testing.T, redisAddr string) *restartable {
	bin := buildCachewatch(t, t.TempDir())
	r := &restartable{bin: bin}
	var port int
	r.p, port = startOnFreePort(t, "exporter", bin, func(port int) []string {
		r.args = []string{"exporter", "--redis.addr=" + redisAddr, "--redis.mode=standalone",
			"--web.listen-address=" + loopback(port), "--sample.interval=1s", "--keygroup.min-keys=1", "--log.level=error"}
		return r.args
	}, func(port int) error { return httpOK("http://" + loopback(port) + "/metrics") })
	r.addr = loopback(port)
	return r
}

func (r *restartable) stop() { r.p.stop() }

func (r *restartable) restart(t *testing.T) {
	t.Helper()
	p := &process{name: "exporter", log: r.p.log + ".restarted", done: make(chan struct{})}
	p.cmd = exec.Command(r.bin, r.args...)
	if err := childproc.Start(p.cmd); err != nil {
		t.Fatalf("restart exporter: %v", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	if err := waitReady(p, 0, func(int) error { return httpOK("http://" + r.addr + "/metrics") }); err != nil {
		t.Fatalf("restart exporter: %v", err)
	}
	t.Cleanup(p.stop)
	r.p = p
}

// newInstrumented is an instrumented client named name over a new go-redis
// client of the Redis at addr, reporting to reg.
func newInstrumented(t *testing.T, reg *prometheus.Registry, addr, name string) *instrument.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	cw, err := instrument.New(rdb, instrument.Options{Registerer: reg, Name: name, Logger: quiet, KeyGroups: keygrouptest.Named(t)})
	if err != nil {
		t.Fatal(err)
	}
	return cw
}

// background runs f in n goroutines, each every d, until the test ends.
func background(t *testing.T, n int, d time.Duration, f func(context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			every(ctx, d, func(ctx context.Context) {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				f(ctx)
			})
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// serve serves reg's /metrics on a loopback port until the test ends.
func serve(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}
