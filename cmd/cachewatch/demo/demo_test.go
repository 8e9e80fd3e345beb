package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/internal/redistest"
	"github.com/cachewatch/cachewatch/signals"
)

// testOptions are short enough for the suite and give each 4 s phase
// several refreshes (fresh TTL 1 s), with half the default callers so that
// the embedded miniredis keeps up under the race detector on a busy
// machine, and a retry horizon that a waiting caller stalled by such a
// machine seldom outlasts.
func testOptions() Options {
	return Options{Duration: 8 * time.Second, Callers: 2, FreshTTL: time.Second, retryHorizon: 4 * time.Second}
}

func TestRunEmbeddedMiniredis(t *testing.T) {
	reg := prometheus.NewRegistry()
	o := testOptions()
	o.Registry = reg
	last := map[string]Progress{}
	o.Progress = func(p Progress) { last[p.Phase] = p } // called from Run's goroutine
	// The locks are listed as the command the demo prints does: one
	// server (miniredis cannot say whether it is a Cluster).
	var url string
	o.Announce = func(_, u string) { url = u }
	o.holdPhase = watchJobLock(t, reg, &url, exporter.ModeStandalone)
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(url, "redis://127.0.0.1:") || !strings.Contains(r.Server, strings.TrimPrefix(url, "redis://")) {
		t.Errorf("announced URL %q, server %q: want the embedded miniredis's address", url, r.Server)
	}
	// The progress line counts as the report does: on cachewatch no caller
	// waits for a lock (the job's try-once lock is not contention) and no
	// older write lands (the refused ones are not counted).
	if p := last[PhaseCachewatch]; p.WaitFirst != 0 || p.OlderLanded != 0 {
		t.Errorf("cachewatch phase's last progress %+v: want no waiting caller and no older write landed", p)
	}
	if p := last[PhaseUnprotected]; p.WaitFirst == 0 || p.WaitBusy > p.WaitFirst {
		t.Errorf("unprotected phase's last progress %+v: want the hand-written lock's waiting callers", p)
	}
	if !r.Embedded || !strings.Contains(r.Server, "miniredis") {
		t.Errorf("server %q embedded=%v, want the embedded miniredis", r.Server, r.Embedded)
	}
	checkReport(t, r)
	checkJobLock(t, reg, r)
	// The exporter sampled the embedded server: up, keys scanned, and the
	// INFO sections miniredis lacks named.
	snap, err := gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.sum(signals.ExporterUp); got != 1 {
		t.Errorf("exporter up = %v on miniredis, want 1", got)
	}
	if r.Exporter.KeysScanned == 0 || len(r.Exporter.Missing) == 0 {
		t.Errorf("exporter note %+v: want keys scanned and INFO's missing sections named", r.Exporter)
	}
	// Every command the clients, hooks and exporter sent works on miniredis,
	// but for the first EVALSHA of each script (NOSCRIPT, then EVAL) and INFO's
	// sections (the exporter's info stage). A command miniredis does not
	// support would fail every time; a rare failure is a call cancelled by
	// its caller (a renewal cut short by Release). Timeouts and dropped
	// connections say the machine is busy, not that a command is missing.
	for _, series := range snap[signals.CommandErrors.String()] {
		l := labels(series.GetLabel())
		switch {
		case l["error_class"] == "noscript",
			l["error_class"] == "timeout", l["error_class"] == "connection":
			continue
		}
		failed := series.GetCounter().GetValue()
		calls := snap.sum(signals.CommandDuration, "client", l["client"], "command", l["command"])
		if failed > 0.01*calls {
			t.Errorf("miniredis failed %v %v times in %v calls", l, failed, calls)
		}
	}
	// The cachewatch phase's only lock is the job's, taken once: every
	// attempt of it is labelled try_once, none waits.
	var tryOnce float64
	for _, series := range snap[signals.LockAttempts.String()] {
		l := labels(series.GetLabel())
		if !strings.HasPrefix(l["client"], "cachewatch-") {
			continue
		}
		if l[signals.ModeLabel] != signals.ModeTryOnce {
			t.Errorf("cachewatch phase: lock attempts %v: want every one mode=%q (the job's lock)", l, signals.ModeTryOnce)
		}
		if l["attempt"] == "first" {
			tryOnce += series.GetCounter().GetValue()
		}
	}
	if cw := r.Phases[1]; tryOnce == 0 || tryOnce != *cw.FirstTryLockAttempts.Metric {
		t.Errorf("cachewatch phase: %v try-once first attempts, %v first attempts in all; want all of them, some",
			tryOnce, *cw.FirstTryLockAttempts.Metric)
	}
	for _, series := range snap[signals.ExporterErrors.String()] {
		if l := labels(series.GetLabel()); l["stage"] != "info" {
			t.Errorf("exporter failed on miniredis: %v ×%v", l, series.GetCounter().GetValue())
		}
	}
	checkJSON(t, r)

	html := filepath.Join(t.TempDir(), "report.html")
	f, err := os.Create(html)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	checkHTMLInBrowser(t, html)
}

func TestRunRealRedis(t *testing.T) {
	srv := redistest.Start(t)
	o := testOptions()
	o.RedisURL = "redis://" + srv.Addr
	o.Registry = prometheus.NewRegistry()
	var url string
	o.Announce = func(_, u string) { url = u }
	o.holdPhase = watchJobLock(t, o.Registry, &url, exporter.ModeAuto)
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Embedded || !strings.Contains(r.Server, srv.Addr) || url != o.RedisURL {
		t.Errorf("server %q embedded=%v, URL %q: want the redis-server at %s", r.Server, r.Embedded, url, srv.Addr)
	}
	checkReport(t, r)
	checkJobLock(t, o.Registry, r)
	if len(r.Exporter.Missing) != 0 {
		t.Errorf("exporter could not sample a real Redis: %v", r.Exporter.Missing)
	}
	// The demo leaves nothing behind.
	if n, err := srv.Client(t).DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Errorf("after the run the server holds %d keys (%v), want 0", n, err)
	}
}

func TestRunUnreachableRedis(t *testing.T) {
	_, err := Run(context.Background(), Options{RedisURL: "redis://127.0.0.1:1"})
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("err = %v, want ErrRedisUnreachable naming the address", err)
	}
	if !errors.Is(err, ErrRedisUnreachable) {
		t.Errorf("err = %v does not wrap ErrRedisUnreachable", err)
	}
}

func TestRunBadOptions(t *testing.T) {
	for _, o := range []Options{
		{Duration: time.Second},
		{Instances: -1},
		{RedisURL: "http://localhost:6379"},
		{RedisURL: "redis://user:secret@localhost:6379"},
	} {
		_, err := Run(context.Background(), o)
		if !errors.Is(err, ErrBadOptions) {
			t.Errorf("%+v: err = %v, want ErrBadOptions", o, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("error repeats the password: %v", err)
		}
	}
}

// checkReport asserts the demo's claims: the unprotected phase makes many
// loader calls per refresh, cachewatch at most one (beyond loads made
// directly because Redis failed, which the client counts), and every
// figure the metrics can see equals the demo's own count.
func checkReport(t *testing.T, r *Report) {
	t.Helper()
	if len(r.Phases) != 2 || r.Phases[0].Name != PhaseUnprotected || r.Phases[1].Name != PhaseCachewatch {
		t.Fatalf("phases %v, want unprotected then cachewatch", r.Phases)
	}
	for _, p := range r.Phases {
		if p.Requests == 0 || p.Refreshes == 0 {
			t.Fatalf("%s: %d requests, %d refreshes: the fleet did not run", p.Name, p.Requests, p.Refreshes)
		}
		equal(t, p.Name+" loader calls", p.LoaderCalls)
		equal(t, p.Name+" first-try lock attempts", p.FirstTryLockAttempts)
		equal(t, p.Name+" first-try lock contention", p.FirstTryContention)
		equal(t, p.Name+" try-once lock contention", p.TryOnceContention)
		equal(t, p.Name+" locks lost", p.LocksLost)
		equal(t, p.Name+" job lock expired under its holder", p.JobLockExpired)
		equal(t, p.Name+" write skew prevented", p.WriteSkewPrevented)
		if *p.FirstTryLockAttempts.Truth == 0 {
			t.Errorf("%s: no lock attempts", p.Name)
		}
	}
	un, cw := r.Phases[0], r.Phases[1]
	equal(t, "unprotected cache misses", un.CacheMisses)
	equal(t, "unprotected stale served", un.StaleServed)
	equal(t, "unprotected job lock taken by another instance", un.JobLockTaken)

	if perRefresh := *un.LoaderCallsPerRefresh.Truth; perRefresh < 1.5 {
		t.Errorf("unprotected: %.2f loader calls per refresh, want a stampede (≥ 1.5)", perRefresh)
	}
	if calls, direct := *cw.LoaderCalls.Truth, *cw.Fallbacks.Metric; calls-direct > float64(cw.Refreshes) {
		t.Errorf("cachewatch: %v loader calls (%v direct) for %d refreshes, want at most one per refresh",
			calls, direct, cw.Refreshes)
	}
	if *un.OlderWritesLanded.Truth == 0 || *un.WriteSkewPrevented.Metric != 0 {
		t.Errorf("unprotected: %v older writes landed, %v prevented; want some landed, none prevented",
			*un.OlderWritesLanded.Truth, *un.WriteSkewPrevented.Metric)
	}
	if *cw.OlderWritesLanded.Truth != 0 || *cw.WriteSkewPrevented.Truth == 0 {
		t.Errorf("cachewatch: %v older writes landed, %v prevented; want none landed, some prevented",
			*cw.OlderWritesLanded.Truth, *cw.WriteSkewPrevented.Truth)
	}
	// Staleness is judged by the client at its read and by the demo when
	// the call returns, a millisecond or so apart: close, not equal.
	if m, tr := *cw.StaleServed.Metric, *cw.StaleServed.Truth; m == 0 || math.Abs(m-tr) > 0.2*max(m, tr)+5 {
		t.Errorf("cachewatch stale served: metric %v, truth %v; want some, close to each other", m, tr)
	}
	if len(un.Timeline) == 0 || len(cw.Timeline) == 0 {
		t.Error("empty timeline")
	}
}

func labels(pairs []*dto.LabelPair) map[string]string {
	m := map[string]string{}
	for _, p := range pairs {
		m[p.GetName()] = p.GetValue()
	}
	return m
}

func equal(t *testing.T, what string, f Figure) {
	t.Helper()
	if f.Metric == nil || f.Truth == nil {
		t.Errorf("%s: metric %v, truth %v: want both", what, f.Metric, f.Truth)
		return
	}
	if *f.Metric != *f.Truth {
		t.Errorf("%s: metrics say %v, the demo counted %v", what, *f.Metric, *f.Truth)
	}
}

// checkJSON asserts the report encodes to valid JSON with the same figures.
func checkJSON(t *testing.T, r *Report) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatal("report JSON is not valid")
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for i, p := range back.Phases {
		if *p.LoaderCalls.Metric != *r.Phases[i].LoaderCalls.Metric || p.CallerP99Ms.Metric != nil {
			t.Errorf("phase %s: JSON figures differ from the report", p.Name)
		}
	}
	if !bytes.Contains(b, []byte(`"loader_calls_per_refresh"`)) || !bytes.Contains(b, []byte(signals.LoaderCalls.String())) {
		t.Errorf("JSON lacks the figures or their PromQL: %.300s", b)
	}
}

// Every figure's PromQL comes from a panel of the generated dashboards; a
// renamed panel must fail here, not leave the report without its query.
func TestChartQueriesFindEveryPanel(t *testing.T) {
	q := chartQueries()
	for _, want := range figurePanels {
		if q[want.figure].Expr == "" {
			t.Errorf("figure %s: no panel %q on dashboard %s", want.figure, want.panel, want.board)
		}
	}
	if !strings.Contains(q["loader_calls_cachewatch"].Expr, signals.LoaderCalls.String()) {
		t.Errorf("loader calls query %q does not read %s", q["loader_calls_cachewatch"].Expr, signals.LoaderCalls.String())
	}
}
