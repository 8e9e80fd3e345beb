package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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
	ordersJob   = "orders-api"       // a hook-only service whose Redis is killed
	paymentsJob = "payments-api"     // another, whose Redis is killed after
	catalogJob  = "catalog-api"      // a service on the instrumented cache whose loader fails
	nightlyJob  = "nightly-job"      // a run-once job of four instances that skip when busy
	ledgerJob   = "ledger-worker"    // four workers waiting for one lock
	demoSafeJob = "demo-cachewatch"  // the demo's fleet on cachewatch
	demoOldJob  = "demo-unprotected" // the demo's fleet before cachewatch
)

// LongOnCallEnv, set to 1, makes TestOnCall run every acceptance case in
// real time with the shipped settings: an hour-long history is not
// needed, but 30 minutes of it before a 10-second blip are. The 1h
// tier reads a younger service's blip as a larger share of its window:
// 10 s of failure after 13 minutes is 1.3 % of the lookups at the
// nominal pace and more when successes run slower than failures on a
// busy machine, over the 1.44 % that pages at 14.4 times a 99.9 %
// objective's budget. The slow observations (10 minutes of a run-once
// job, a resolution within 10 minutes of a recovery, a ticket's 10-minute
// `for:`) take as long as they say. It runs about 80 minutes. By default
// the test runs the page tiers' cases in about 5 minutes and leaves the
// long observations to the promtool unit tests of package alerts, which
// run the same shipped durations on synthetic series.
const LongOnCallEnv = "CACHEWATCH_ONCALL_LONG"

// onCallPlan is when each cause happens (from the start of the services)
// and how long the quiet cases are watched.
type onCallPlan struct {
	long                     bool
	ordersKill, paymentsKill time.Duration
	blipAt                   time.Duration // 0: no blip
	failAt, failFor          time.Duration // failFor 0: the failure lasts
	watch                    time.Duration // the run-once job, the waiting workers, the demo
	exporterHold             time.Duration // how long a dead exporter's pages must stay
}

func planOnCall() onCallPlan {
	if os.Getenv(LongOnCallEnv) == "1" {
		return onCallPlan{long: true, ordersKill: 14 * time.Minute, paymentsKill: 14*time.Minute + 45*time.Second,
			blipAt: 30 * time.Minute, failAt: 39 * time.Minute, failFor: 8 * time.Minute,
			watch: 14 * time.Minute, exporterHold: 7 * time.Minute}
	}
	return onCallPlan{ordersKill: 15 * time.Second, paymentsKill: 60 * time.Second, failAt: 15 * time.Second,
		watch: 4 * time.Minute, exporterHold: 90 * time.Second}
}

// onCallRedis are the servers the on-call services use.
type onCallRedis struct {
	orders, payments, shared, demoSafe, demoOld *redistest.Server
}

// TestOnCall judges the generated alerts, with their shipped `for:`
// durations, thresholds and Alertmanager routing (only the receivers'
// URLs pointed at the test's webhook), as on-call outcomes against a real
// Prometheus and Alertmanager, every case at once:
//
//   - Redis killed under a hook-only service at 20 commands a second: one
//     page (CachewatchRedisUnreachable) delivered within 3 minutes; the
//     service's job removed from scraping: the page resolves;
//   - a second client's Redis killed after the first's: its page delivered
//     within group_wait of firing, as the first's;
//   - the exporter cannot reach a node: one page; the exporter killed: the
//     page stays (blindness is no recovery);
//   - the loader of an instrumented cache fails for good: one page
//     (CachewatchCacheAvailabilityBudgetBurn) within 4 minutes, kept while
//     callers get errors (with LongOnCallEnv also: 10 s of failure first
//     pages nobody, and the page resolves within 10 minutes of recovery);
//   - a run-once job whose four instances skip when the lock is busy,
//     hooked with no configuration: no alert of it ever pending, let alone
//     paging; waiting workers on one lock: their contention ticket's
//     condition holds (with LongOnCallEnv: the ticket is delivered);
//   - the demo's fleet on cachewatch pages nobody; the fleet before
//     cachewatch pages only for harm (budget burns), never a cause.
//
// It logs, per case, when the page fired, was delivered and resolved,
// counted from the cause, and how many pages the incident made.
func TestOnCall(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: runs Redis, Prometheus, Alertmanager and the on-call cases for about five minutes; skipped with -short")
	}
	t.Parallel()
	bins := findBinaries(t)
	plan := planOnCall()
	quietLogs()
	began := time.Now()
	r := onCallRedis{redistest.Start(t), redistest.Start(t), redistest.Start(t), redistest.Start(t), redistest.Start(t)}

	hook := startWebhook(t)
	_, amAddr := startAlertmanager(t, bins.alertmanager, shippedAlertmanagerConfig(t, hook.srv.URL))
	cfg := alerts.DefaultConfig()
	cfg.ExporterSelector = `job=~"` + exporterJob + `|demo-.+"`
	rules := writeRules(t, t.TempDir(), cfg)

	catalog := startCatalog(t, r.shared.Addr)
	exp := startPlainExporter(t, r.payments.Addr)
	jobs := []scrapeJob{
		{ordersJob, []string{startHookOnly(t, r.orders.Addr, "orders")}},
		{paymentsJob, []string{startHookOnly(t, r.payments.Addr, "payments")}},
		{catalogJob, []string{catalog.addr}},
		{nightlyJob, []string{startRunOnceJob(t, r.shared.Addr)}},
		{ledgerJob, []string{startWaitingWorkers(t, r.shared.Addr)}},
		{demoSafeJob, []string{startDemoPhase(t, r.demoSafe.Addr, demo.PhaseCachewatch, plan.watch+time.Minute)}},
		{demoOldJob, []string{startDemoPhase(t, r.demoOld.Addr, demo.PhaseUnprotected, plan.watch+time.Minute)}},
		{exporterJob, []string{exp.addr}},
	}
	prom := startPrometheusServer(t, bins.prometheus, rules, amAddr, 5*time.Second, jobs)
	waitTargetsUp(t, context.Background(), prom.api, len(jobs))
	start := time.Now()
	t.Logf("on-call stack up after %v; long run: %v", start.Sub(began).Round(time.Second), plan.long)

	oc := &onCall{t: t, hook: hook, prom: prom, am: amAddr, plan: plan, start: start, jobs: jobs}
	var wg sync.WaitGroup
	for name, c := range map[string]func(*testing.T){
		"Redis killed under a hook-only service: one page, and it resolves once the job leaves service discovery": func(t *testing.T) { oc.redisKilled(t, r.orders) },
		"a second client failing after the first: both pages delivered within group_wait of firing":               func(t *testing.T) { oc.secondClient(t, r.payments) },
		"the exporter's page for a node it cannot reach stays while the exporter is dead":                         func(t *testing.T) { oc.blindExporter(t, exp) },
		"a failing loader pages once, within 4 minutes, and keeps paging while callers get errors":                func(t *testing.T) { oc.loaderFailure(t, catalog) },
		"a run-once job that skips when busy alerts nobody; waiting workers get their contention ticket":          func(t *testing.T) { oc.runOnceAndWaiting(t) },
		"the demo: its fleet on cachewatch pages nobody, the fleet before it pages only for harm":                 func(t *testing.T) { oc.demoPages(t) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(name, c)
		}()
	}
	wg.Wait()
	t.Run("every dashboard query finds the data the cases produced", func(t *testing.T) { panelsFindData(t, prom.api) })
	t.Logf("on-call: elapsed %v; notifications:%s", time.Since(began).Round(time.Second), hook.summary())
}

// onCall is the shared state of TestOnCall's cases.
type onCall struct {
	t     *testing.T
	hook  *webhook
	prom  *promServer
	am    string
	plan  onCallPlan
	start time.Time

	mu   sync.Mutex
	jobs []scrapeJob
}

// at waits until d after the start of the services.
func (oc *onCall) at(d time.Duration) time.Time {
	time.Sleep(time.Until(oc.start.Add(d)))
	return time.Now()
}

// pageBound bounds the waits for pages and resolutions: generous, as CI is
// a busy 2-core machine; the acceptance bounds are asserted on the
// figures.
const pageBound = 12 * time.Minute

// figure logs one case's on-call outcome, each time counted from cause:
// fired (Prometheus's firing time), delivered (the webhook's receipt),
// resolved (the resolved notification's receipt, if any).
func figure(t *testing.T, name string, cause time.Time, fired, delivered, resolved time.Time, pages int) {
	t.Helper()
	s := func(x time.Time) string {
		if x.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.0fs", x.Sub(cause).Seconds())
	}
	t.Logf("FIGURE %s: fired %s, delivered %s, resolved %s, pages per incident %d", name, s(fired), s(delivered), s(resolved), pages)
}

// pagesOf are the page notifications (distinct firing alerts) of job since
// from.
func (oc *onCall) pagesOf(job string, from time.Time) []webhookAlert {
	return oc.hook.firing(from, func(a webhookAlert) bool {
		return a.receiver == alerts.ReceiverPage && a.Labels["job"] == job
	})
}

// redisKilled kills the Redis of a hook-only service: one page within 3
// minutes and no other for the incident; then the service's job leaves
// service discovery: the page resolves.
func (oc *onCall) redisKilled(t *testing.T, srv *redistest.Server) {
	cause := oc.at(oc.plan.ordersKill)
	srv.Kill()
	want := map[string]string{"job": ordersJob, "client": "orders"}
	page := waitFor(t, oc.hook, "CachewatchRedisUnreachable", "firing", want, cause, pageBound)
	if d := page.received.Sub(cause); d > 3*time.Minute {
		t.Errorf("Redis unreachable delivered %v after the kill, want within 3 minutes", d.Round(time.Second))
	}
	// Watch past the burn-rate page's own `for:` (2m) and group_wait: it
	// is inhibited, not delivered.
	time.Sleep(time.Until(cause.Add(3 * time.Minute)))
	pages := oc.pagesOf(ordersJob, cause)
	if len(pages) != 1 {
		t.Errorf("%d pages for one killed Redis, want 1:%s", len(pages), oc.hook.summary())
	}
	// The harm pages too, as a burn of the Redis availability budget, but
	// Alertmanager holds it: the unreachable page explains it.
	if err := inhibited(oc.am, "CachewatchRedisAvailabilityBudgetBurn", map[string]string{"job": ordersJob}); err != nil {
		t.Logf("the Redis availability burn of %s: %v", ordersJob, err)
	} else {
		t.Logf("the Redis availability burn of %s fires and is inhibited by the unreachable page", ordersJob)
	}
	removed := time.Now()
	oc.dropJob(t, ordersJob)
	resolved := waitFor(t, oc.hook, "CachewatchRedisUnreachable", "resolved", want, removed, pageBound)
	t.Logf("the job left service discovery: its page resolved %v later", resolved.received.Sub(removed).Round(time.Second))
	figure(t, "Redis killed under a hook-only service (20 commands/s)", cause, page.StartsAt, page.received, time.Time{}, len(pages))
	figure(t, "a job removed from scraping", removed, time.Time{}, time.Time{}, resolved.received, 0)
	oc.withinGroupWait(t, page)
}

// secondClient kills a second client's Redis after the first's: its page
// is delivered within group_wait of firing too, not held back by a group
// already notified.
func (oc *onCall) secondClient(t *testing.T, srv *redistest.Server) {
	cause := oc.at(oc.plan.paymentsKill)
	srv.Kill()
	page := waitFor(t, oc.hook, "CachewatchRedisUnreachable", "firing", map[string]string{"job": paymentsJob, "client": "payments"}, cause, pageBound)
	time.Sleep(time.Until(cause.Add(3 * time.Minute)))
	figure(t, "a second client failing after the first", cause, page.StartsAt, page.received, time.Time{}, len(oc.pagesOf(paymentsJob, cause)))
	oc.withinGroupWait(t, page)
}

// groupWait is the shipped Alertmanager's group_wait; slack covers
// Prometheus's send and Alertmanager's dispatch on a busy machine.
const (
	groupWait = 30 * time.Second
	slack     = 20 * time.Second
)

func (oc *onCall) withinGroupWait(t *testing.T, page webhookAlert) {
	t.Helper()
	if d := page.received.Sub(page.StartsAt); d > groupWait+slack {
		t.Errorf("%s %v delivered %v after it fired, want within group_wait (%v)", page.Labels["alertname"], page.Labels, d.Round(time.Second), groupWait)
	} else {
		t.Logf("%s of %s delivered %v after it fired (group_wait %v)", page.Labels["alertname"], page.Labels["job"], d.Round(time.Second), groupWait)
	}
}

// blindExporter: the exporter pages for the node it cannot reach (the
// payments Redis, killed); then the exporter dies: the page stays.
func (oc *onCall) blindExporter(t *testing.T, exp *restartable) {
	cause := oc.at(oc.plan.paymentsKill)
	want := map[string]string{"job": exporterJob}
	page := waitFor(t, oc.hook, "CachewatchRedisNodeUnreachable", "firing", want, cause, pageBound)
	killed := time.Now()
	exp.stop()
	if oc.plan.long {
		down := waitFor(t, oc.hook, "CachewatchExporterDown", "firing", map[string]string{"job": exporterJob, "severity": alerts.SeverityCritical}, killed, pageBound)
		t.Logf("the dead exporter paged (critical: a page it fed was firing) %v after it died", down.received.Sub(killed).Round(time.Second))
	}
	holdQuietFor(t, oc.hook, "CachewatchRedisNodeUnreachable", "resolved", want, killed, oc.plan.exporterHold)
	t.Logf("the exporter dead for %v: its page stayed", oc.plan.exporterHold)
	figure(t, "the exporter cannot reach a node", cause, page.StartsAt, page.received, time.Time{}, len(oc.pagesOf(exporterJob, cause)))
}

// loaderFailure: the catalog's loader fails. With the long plan, 10
// seconds of it first, after 30 minutes of history: no page.
func (oc *onCall) loaderFailure(t *testing.T, s *catalogService) {
	want := map[string]string{"job": catalogJob, "alertname": "CachewatchCacheAvailabilityBudgetBurn"}
	if oc.plan.blipAt > 0 {
		blip := oc.at(oc.plan.blipAt)
		s.failing.Store(true)
		time.Sleep(10 * time.Second)
		s.failing.Store(false)
		watchUntil := blip.Add(oc.plan.failAt - oc.plan.blipAt - 30*time.Second)
		oc.neverPending(t, `ALERTS{job="`+catalogJob+`", severity="critical"}`, watchUntil)
		figure(t, "10 s of total loader failure", blip, time.Time{}, time.Time{}, time.Time{}, len(oc.pagesOf(catalogJob, blip)))
	}
	cause := oc.at(oc.plan.failAt)
	s.failing.Store(true)
	page := waitFor(t, oc.hook, "CachewatchCacheAvailabilityBudgetBurn", "firing", want, cause, pageBound)
	if d := page.received.Sub(cause); d > 4*time.Minute {
		t.Errorf("the cache availability page delivered %v after the loader failed, want within 4 minutes", d.Round(time.Second))
	}
	hold := time.Minute
	if oc.plan.failFor > 0 {
		hold = time.Until(cause.Add(oc.plan.failFor))
	}
	holdQuietFor(t, oc.hook, "CachewatchCacheAvailabilityBudgetBurn", "resolved", want, cause, hold)
	t.Logf("kept paging while callers got errors (%d by then)", s.errors.Load())
	var resolved time.Time
	if oc.plan.failFor > 0 {
		recovered := time.Now()
		s.failing.Store(false)
		r := waitFor(t, oc.hook, "CachewatchCacheAvailabilityBudgetBurn", "resolved", want, recovered, pageBound)
		resolved = r.received
		if d := resolved.Sub(recovered); d > 10*time.Minute {
			t.Errorf("resolved %v after the loader recovered, want within 10 minutes", d.Round(time.Second))
		}
		t.Logf("resolved %v after the loader recovered", d(resolved.Sub(recovered)))
		// The 6h tier's short window (30m) holds the outage for half an
		// hour: watch it out, no second page.
		time.Sleep(time.Until(recovered.Add(31 * time.Minute)))
	}
	pages := oc.pagesOf(catalogJob, cause)
	if len(pages) != 1 {
		t.Errorf("%d pages for one loader outage, want 1:%s", len(pages), oc.hook.summary())
	}
	figure(t, "sustained total loader failure (10 lookups/s)", cause, page.StartsAt, page.received, resolved, len(pages))
}

// runOnceAndWaiting watches the run-once job and the waiting workers: no
// alert of the job is ever pending, the hook reports its busy attempts as
// try-once; the workers' contention ticket's condition holds (and, with
// the long plan, the ticket is delivered after its shipped 10 minutes).
func (oc *onCall) runOnceAndWaiting(t *testing.T) {
	ctx := context.Background()
	until := oc.start.Add(oc.plan.watch)
	contention := `ALERTS{alertname="CachewatchLockContentionHigh", job="` + ledgerJob + `"}`
	var pendingAt time.Time
	for time.Now().Before(until) {
		if n, err := query(ctx, oc.prom.api, `ALERTS{job="`+nightlyJob+`"}`); err != nil || n > 0 {
			t.Fatalf("the run-once job has %d alerts pending or firing (err %v):%s", n, err, oc.hook.summary())
		}
		if pendingAt.IsZero() {
			if n, _ := query(ctx, oc.prom.api, contention); n > 0 {
				pendingAt = time.Now()
				t.Logf("the waiting workers' contention ticket pending %v after they started", pendingAt.Sub(oc.start).Round(time.Second))
			}
		}
		time.Sleep(5 * time.Second)
	}
	for q, want := range map[string]bool{
		`sum(cachewatch_lock_attempts_total{job="` + nightlyJob + `", mode="try_once", attempt="first", result="busy"}) > 0`: true,
		`sum(cachewatch_lock_attempts_total{job="` + nightlyJob + `", mode="wait", result="busy"}) > 0`:                      false,
		`sum(cachewatch_lock_attempts_total{job="` + nightlyJob + `", attempt="retry"}) > 0`:                                 false,
		`sum(cachewatch_lock_attempts_total{job="` + ledgerJob + `", mode="wait", attempt="first", result="busy"}) > 0`:      true,
	} {
		if n, err := query(ctx, oc.prom.api, q); err != nil || (n > 0) != want {
			t.Errorf("%s: %d series (err %v), want any: %v", q, n, err, want)
		}
	}
	t.Logf("FIGURE a run-once job of four instances skipping when busy: no alert pending or firing in %v, pages 0, tickets 0", oc.plan.watch.Round(time.Second))
	if pendingAt.IsZero() {
		t.Errorf("the waiting workers' contention never pended")
	}
	if oc.plan.long {
		ticket := waitFor(t, oc.hook, "CachewatchLockContentionHigh", "firing", map[string]string{"job": ledgerJob}, oc.start, pageBound)
		t.Logf("FIGURE waiting workers on one lock: ticket delivered %v after they started, to %s", ticket.received.Sub(oc.start).Round(time.Second), ticket.receiver)
	}
}

// demoPages: over the demo's run, its fleet on cachewatch pages nobody,
// and every page of the fleet before cachewatch names harm to callers.
func (oc *onCall) demoPages(t *testing.T) {
	time.Sleep(time.Until(oc.start.Add(oc.plan.watch)))
	for _, a := range oc.pagesOf(demoSafeJob, oc.start) {
		t.Errorf("the demo's fleet on cachewatch paged: %s %v", a.Labels["alertname"], a.Labels)
	}
	harm := oc.pagesOf(demoOldJob, oc.start)
	for _, a := range harm {
		if !strings.HasSuffix(a.Labels["alertname"], "BudgetBurn") && !slices.Contains(harmCertain, a.Labels["alertname"]) {
			t.Errorf("the unprotected demo paged for a cause, not a harm: %s %v", a.Labels["alertname"], a.Labels)
		}
	}
	var tickets []string
	for _, a := range oc.hook.firing(oc.start, func(a webhookAlert) bool {
		return a.receiver == alerts.ReceiverTicket && (a.Labels["job"] == demoOldJob || a.Labels["job"] == demoSafeJob)
	}) {
		tickets = append(tickets, a.Labels["job"]+" "+a.Labels["alertname"])
	}
	t.Logf("FIGURE the demo over %v: the fleet on cachewatch 0 pages; the fleet before it %d pages (%v), all harm; tickets %v",
		oc.plan.watch.Round(time.Second), len(harm), names(harm), tickets)
}

// harmCertain are the pages on a state that harms without a burn.
var harmCertain = []string{"CachewatchRedisUnreachable", "CachewatchRedisNodeUnreachable", "CachewatchLocksWithoutTTL"}

func names(as []webhookAlert) []string {
	var out []string
	for _, a := range as {
		out = append(out, a.Labels["alertname"])
	}
	return out
}

func d(x time.Duration) time.Duration { return x.Round(time.Second) }

// dropJob takes job out of Prometheus's scrape configuration: its targets
// leave service discovery.
func (oc *onCall) dropJob(t *testing.T, job string) {
	oc.mu.Lock()
	defer oc.mu.Unlock()
	oc.jobs = slices.DeleteFunc(oc.jobs, func(j scrapeJob) bool { return j.name == job })
	oc.prom.setJobs(t, oc.jobs)
}

// neverPending polls q until until and fails t if it ever returns series.
func (oc *onCall) neverPending(t *testing.T, q string, until time.Time) {
	t.Helper()
	for time.Now().Before(until) {
		if n, err := query(context.Background(), oc.prom.api, q); err != nil || n > 0 {
			t.Fatalf("%s: %d series (err %v)", q, n, err)
		}
		time.Sleep(5 * time.Second)
	}
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

// waitFor waits, up to bound, for a notification of alertname with status
// whose labels include want, received after from, and fails t if none
// comes.
func waitFor(t *testing.T, hook *webhook, alertname, status string, want map[string]string, from time.Time, bound time.Duration) webhookAlert {
	t.Helper()
	var got webhookAlert
	err := poll.Check(context.Background(), bound, time.Second, func() error {
		var ok bool
		if got, ok = hook.first(alertname, status, want, from); !ok {
			return fmt.Errorf("no %s notification of %s %v", status, alertname, want)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v; received:%s", err, hook.summary())
	}
	return got
}

// holdQuietFor watches for hold and fails t if a notification of
// alertname with status and labels want arrives after from.
func holdQuietFor(t *testing.T, hook *webhook, alertname, status string, want map[string]string, from time.Time, hold time.Duration) {
	t.Helper()
	end := time.Now().Add(hold)
	for time.Now().Before(end) {
		if a, ok := hook.first(alertname, status, want, from); ok {
			t.Fatalf("%s %s at %s: %v", alertname, status, a.received.Format(time.TimeOnly), a.Labels)
		}
		time.Sleep(time.Second)
	}
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
