package e2e

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Bounds of the waits. Generous on purpose: CI runs this on a busy 2-core
// machine. They bound polls; nothing is asserted on time.
const (
	dataTimeout = 4 * time.Minute
	// alertTimeout counts from the moment the alert is caused.
	alertTimeout = 5 * time.Minute
	pollEvery    = 2 * time.Second
)

// Job names of the two scrape targets.
const (
	appJob      = "cachewatch-app"
	exporterJob = "cachewatch-exporter"
)

// dashboardVars stands in for Grafana's template variables: every job,
// instance and key group; a rate window of several 1s scrapes.
var dashboardVars = strings.NewReplacer(
	"${__rate_interval}", "15s", "$__rate_interval", "15s",
	"${__interval}", "5s", "$__interval", "5s",
	"${job}", ".+", "$job", ".+",
	"${instance}", ".+", "$instance", ".+",
	"${client}", ".+", "$client", ".+",
	"${key_group}", ".+", "$key_group", ".+",
)

// leftoverVar finds a template variable the replacer did not know.
var leftoverVar = regexp.MustCompile(`\$\{?[A-Za-z_]`)

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: starts Redis, Prometheus and Alertmanager and runs for about a minute; skipped with -short")
	}
	t.Parallel()
	began := time.Now()
	bins := findBinaries(t)
	ctx := context.Background()

	// Redis, the traffic against it, and the exporter sampling it plus a
	// node where nothing answers (exporter errors, up 0).
	redis := redistest.Start(t)
	deadPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := loopback(deadPort)
	traffic, appAddr := startTraffic(t, redis.Addr, dead)
	exp, expAddr := startExporter(t, redis.Addr, dead)

	// Alertmanager delivering to the test's webhook, Prometheus loading
	// the generated rules.
	hook := startWebhook(t)
	am, amAddr := startAlertmanager(t, bins.alertmanager, alertmanagerConfig(t, hook.srv.URL))
	cfg := ruleConfig(t)
	rules := writeRules(t, t.TempDir(), cfg)
	ruleExprs, grafanaExprs := generatedExprs(t, cfg)
	prom, api := startPrometheus(t, bins.prometheus, rules, amAddr, []scrapeJob{
		{name: appJob, targets: []string{appAddr}},
		{name: exporterJob, targets: []string{expAddr}},
	})
	t.Logf("stack up after %v: redis %s, traffic %s, exporter %s, alertmanager %s", time.Since(began).Round(time.Millisecond), redis.Addr, appAddr, expAddr, amAddr)
	defer func() {
		for _, p := range []*process{exp, am, prom} {
			p.alive(t)
		}
		t.Logf("e2e: elapsed %v", time.Since(began).Round(time.Millisecond))
	}()

	panels := dashboards.Queries()
	if len(panels) == 0 {
		t.Fatal("dashboards.Queries() is empty")
	}
	loaded := loadedRules(t, api)

	t.Run("expressions parse", func(t *testing.T) {
		expressionsParse(t, api, panels, loaded, ruleExprs, grafanaExprs)
	})

	waitTargetsUp(t, ctx, api, 2)

	caused := causeLockWithoutTTL(t, api, traffic)

	t.Run("every panel query returns series", func(t *testing.T) {
		waitForSeries(t, ctx, api, "panel", panelNames(t, panels), pendingEmitter)
		for m := range pendingEmitters {
			if n, err := query(ctx, api, m); err == nil && n > 0 {
				t.Logf("NOTE: %s is emitted now; remove it from pendingEmitters", m)
			}
		}
	})
	t.Run("the signals report what the traffic did", func(t *testing.T) {
		waitForSeries(t, ctx, api, "traffic", happened(dead), nil)
	})
	t.Run("every recording rule produces series", func(t *testing.T) {
		recordingRulesProduceSeries(t, api, loaded)
	})
	t.Run("alert delivered to the webhook", func(t *testing.T) {
		alertDelivered(t, hook, cfg, caused)
	})
}

// expressionsParse checks that Prometheus parses every expression of the
// generated dashboards, rules and Grafana-managed rules, and that it loaded
// every generated rule.
func expressionsParse(t *testing.T, api promv1.API, panels []dashboards.Query, loaded []loadedRule, ruleExprs, grafanaExprs []string) {
	ctx := context.Background()
	var exprs []string
	for _, p := range panels {
		exprs = append(exprs, panelExpr(t, p))
	}
	exprs = append(exprs, ruleExprs...)
	exprs = append(exprs, grafanaExprs...)
	if len(loaded) != len(ruleExprs) {
		t.Errorf("Prometheus loaded %d rules of the %d generated", len(loaded), len(ruleExprs))
	}
	// The check can fail: a broken expression is a parse error.
	if _, err := query(ctx, api, `sum(rate(cachewatch_lock_attempts_total[5m])`); !isParseError(err) {
		t.Fatalf("a broken expression was not reported as a parse error: %v", err)
	}
	for _, e := range exprs {
		if _, err := query(ctx, api, e); err != nil {
			if isParseError(err) {
				t.Errorf("Prometheus cannot parse %q: %v", e, err)
			} else {
				t.Errorf("query %q: %v", e, err)
			}
		}
	}
	t.Logf("Prometheus parsed %d panel, %d rule and %d Grafana-rule expressions", len(panels), len(ruleExprs), len(grafanaExprs))
}

// causeLockWithoutTTL writes a lock key without a TTL, after checking that
// its alert is not firing yet, and returns when it did.
func causeLockWithoutTTL(t *testing.T, api promv1.API, tr *traffic) time.Time {
	t.Helper()
	ctx := context.Background()
	alertQuery := fmt.Sprintf(`ALERTS{alertname=%q}`, locksWithoutTTLAlert)
	if n, err := query(ctx, api, alertQuery); err != nil || n != 0 {
		t.Fatalf("%s before any lock without TTL exists: %d series, err %v", alertQuery, n, err)
	}
	if err := tr.raw.Set(ctx, stuckLock, "crashed-owner", 0).Err(); err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

// recordingRulesProduceSeries waits for every loaded recording rule to
// return series.
func recordingRulesProduceSeries(t *testing.T, api promv1.API, loaded []loadedRule) {
	ctx := context.Background()
	recs := map[string]string{}
	for _, r := range loaded {
		if r.record {
			recs["recording rule "+r.name] = r.name
		}
	}
	if len(recs) == 0 {
		t.Fatal("the rule file has no recording rules")
	}
	waitForSeries(t, ctx, api, "recording rule", recs, nil)
}

// alertDelivered waits for the lock-without-TTL alert caused at caused to
// reach the webhook, with the labels, receiver and annotations of its rule,
// and checks that no info alert notified anyone.
func alertDelivered(t *testing.T, hook *webhook, cfg alerts.Config, caused time.Time) {
	ctx := context.Background()
	var got webhookAlert
	err := poll.Check(ctx, time.Until(caused.Add(alertTimeout)), time.Second, func() error {
		var ok bool
		if got, ok = hook.find(locksWithoutTTLAlert); !ok {
			return fmt.Errorf("no firing %s delivered", locksWithoutTTLAlert)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s delivered to receiver %s %v after the lock without TTL was written: labels %v", locksWithoutTTLAlert,
		got.receiver, got.received.Sub(caused).Round(time.Millisecond), got.Labels)
	if got.Labels["key_group"] != stuckLockGroup {
		t.Errorf("key_group = %q, want %q", got.Labels["key_group"], stuckLockGroup)
	}
	rule := alertRule(t, cfg, locksWithoutTTLAlert, got.Labels["severity"])
	for k, v := range rule.Labels {
		if got.Labels[k] != v {
			t.Errorf("label %s = %q, want the rule's %q", k, got.Labels[k], v)
		}
	}
	if want := receiverFor[rule.Severity]; got.receiver != want {
		t.Errorf("delivered by receiver %q, want %q for severity %s", got.receiver, want, rule.Severity)
	}
	u := got.Annotations["runbook_url"]
	if u != rule.Annotations["runbook_url"] || !strings.HasSuffix(u, "docs/runbooks.md#"+alerts.RunbookAnchor(locksWithoutTTLAlert)) {
		t.Errorf("runbook_url = %q, want the rule's %q, into docs/runbooks.md", u, rule.Annotations["runbook_url"])
	}
	if got.Annotations["summary"] != rule.Annotations["summary"] {
		t.Errorf("summary = %q, want %q", got.Annotations["summary"], rule.Annotations["summary"])
	}
	if d := got.Annotations["description"]; d == "" || strings.Contains(d, "{{") {
		t.Errorf("description = %q, want the rule's template filled in", d)
	}
	if info := hook.bySeverity(alerts.SeverityInfo); len(info) > 0 {
		t.Errorf("info alerts must notify nobody, but %v reached the webhook", info)
	}
}

// startExporter builds cachewatch and runs `cachewatch exporter` on the live
// Redis and a dead address, sampling every second, with the traffic's queues.
// Its key budget is below the keyspace's size, so passes span samples.
func startExporter(t *testing.T, live, dead string) (*process, string) {
	t.Helper()
	bin := buildCachewatch(t, t.TempDir())
	p, port := startOnFreePort(t, "exporter", bin, func(port int) []string {
		return []string{"exporter",
			"--redis.addr=" + live, "--redis.addr=" + dead, "--redis.mode=standalone",
			"--web.listen-address=" + loopback(port),
			"--sample.interval=1s", "--sample.max-keys=200", "--locks.long-held=2s", "--server.miss-burst=3",
			"--queue=" + streamQueue, "--queue=" + listQueue, "--queue=" + delayedQueue, "--queue=" + bigQueue,
			"--keys.memory-sample=10", "--keygroup.min-keys=1", "--log.level=error",
		}
	}, func(port int) error { return httpOK("http://" + loopback(port) + "/metrics") })
	return p, loopback(port)
}

// loadedRule is a rule as Prometheus loaded it.
type loadedRule struct {
	name, expr string
	record     bool
}

// loadedRules returns the rules Prometheus loaded from the rule file, failing
// t if one is unhealthy or there are none.
func loadedRules(t *testing.T, api promv1.API) []loadedRule {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := api.Rules(ctx, nil)
	if err != nil {
		t.Fatalf("rules API: %v", err)
	}
	var out []loadedRule
	for _, g := range res.Groups {
		for _, r := range g.Rules {
			switch r := r.(type) {
			case promv1.RecordingRule:
				out = append(out, loadedRule{name: r.Name, expr: r.Query, record: true})
			case promv1.AlertingRule:
				out = append(out, loadedRule{name: r.Name, expr: r.Query})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("Prometheus loaded no rules")
	}
	return out
}

// panelExpr is a panel's query with the dashboard variables filled in.
func panelExpr(t *testing.T, p dashboards.Query) string {
	e := dashboardVars.Replace(p.Expr)
	if v := leftoverVar.FindString(e); v != "" {
		t.Errorf("%s / %s: unknown dashboard variable %q in %q", p.Board, p.Panel, v, p.Expr)
	}
	return e
}

func panelNames(t *testing.T, panels []dashboards.Query) map[string]string {
	out := map[string]string{}
	for i, p := range panels {
		out[fmt.Sprintf("%s / %s [%d]", p.Board, p.Panel, i)] = panelExpr(t, p)
	}
	return out
}

// waitForSeries polls until every query (by description) returns at least
// one series, then fails t naming those that never did. A query for which
// excused (if not nil) gives a reason may stay empty: it is polled with the
// others but not waited for, and reported with its reason if it stays empty.
func waitForSeries(t *testing.T, ctx context.Context, api promv1.API, what string, queries map[string]string, excused func(expr string) string) {
	t.Helper()
	pending := map[string]string{}
	for k, v := range queries {
		pending[k] = v
	}
	required := func() (n int) {
		for _, q := range pending {
			if excused == nil || excused(q) == "" {
				n++
			}
		}
		return n
	}
	start := time.Now()
	err := poll.Check(ctx, dataTimeout, pollEvery, func() error {
		for desc, q := range pending {
			if n, err := query(ctx, api, q); err == nil && n > 0 {
				delete(pending, desc)
			}
		}
		if n := required(); n > 0 {
			return fmt.Errorf("%d of %d %s queries return no series", n, len(queries), what)
		}
		return nil
	})
	var failed, skipped []string
	for desc, q := range pending {
		if why := excusedReason(excused, q); why != "" {
			skipped = append(skipped, fmt.Sprintf("%s (%s)", desc, why))
		} else {
			failed = append(failed, fmt.Sprintf("%s: %s", desc, q))
		}
	}
	sort.Strings(failed)
	sort.Strings(skipped)
	if len(skipped) > 0 {
		t.Logf("SKIPPED, allowed to stay empty (their metric has no emitter yet): %d %s queries:\n  %s", len(skipped), what, strings.Join(skipped, "\n  "))
	}
	if err != nil {
		t.Errorf("%v:\n  %s", err, strings.Join(failed, "\n  "))
		return
	}
	t.Logf("%d of %d %s queries returned series after %v", len(queries)-len(skipped), len(queries), what, time.Since(start).Round(time.Millisecond))
}

func excusedReason(excused func(string) string, expr string) string {
	if excused == nil {
		return ""
	}
	return excused(expr)
}

// pendingEmitters are catalog metrics that no emitter records yet, each
// with the reason; a panel query that reads one of them may stay empty (and
// is reported as skipped). An entry goes when its emitter records it.
var pendingEmitters = map[string]string{}

// pendingEmitter names the pending emitter a query reads, if any.
func pendingEmitter(expr string) string {
	for m, why := range pendingEmitters {
		if strings.Contains(expr, m) {
			return m + " " + why
		}
	}
	return ""
}

// waitTargetsUp waits until Prometheus has scraped n targets successfully.
func waitTargetsUp(t *testing.T, ctx context.Context, api promv1.API, n int) {
	t.Helper()
	err := poll.Check(ctx, dataTimeout, time.Second, func() error {
		up, err := query(ctx, api, `up == 1`)
		if err != nil {
			return err
		}
		if up < n {
			return fmt.Errorf("%d of %d targets up", up, n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
