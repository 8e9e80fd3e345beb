package demo

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/exporter"
)

// Phase names.
const (
	PhaseUnprotected = "unprotected"
	PhaseCachewatch  = "cachewatch"
)

// Report is the outcome of a run: per phase, each figure as the cachewatch
// metrics tell it and as the demo counted it.
type Report struct {
	Server             string        `json:"server"`
	Embedded           bool          `json:"embedded"`
	Instances          int           `json:"instances"`
	CallersPerInstance int           `json:"callers_per_instance"`
	Keys               int           `json:"keys"`
	FreshTTL           string        `json:"fresh_ttl"`
	Phases             []PhaseReport `json:"phases"`
	Exporter           ExporterNote  `json:"exporter"`
	// Notes say what to keep in mind reading this run's figures.
	Notes []string `json:"notes,omitempty"`
	// Queries are the PromQL expressions behind the report's figures and
	// charts, by figure name, from the generated dashboards.
	Queries map[string]Query `json:"promql"`
}

// Figure is one measured quantity: Metric as read back from the cachewatch
// metrics, Truth as the demo counted it. Either is nil where it cannot be
// known: a signal that does not see this phase's traffic, or a count the
// demo's callers cannot make.
type Figure struct {
	Metric *float64 `json:"metric"`
	Truth  *float64 `json:"truth"`
}

// PhaseReport is one phase's figures.
type PhaseReport struct {
	Name     string  `json:"name"`
	Seconds  float64 `json:"seconds"`
	Requests int64   `json:"requests"`
	// Refreshes are the times a key needed a new value from the database
	// (the demo's own count: calls for one key closer together than half
	// the fresh TTL are one refresh).
	Refreshes int64 `json:"refreshes"`

	LoaderCalls           Figure `json:"loader_calls"`
	LoaderCallsPerRefresh Figure `json:"loader_calls_per_refresh"`
	// Fallbacks are lookups the cachewatch client served by loading
	// directly because Redis failed or timed out: loader calls outside the
	// one-per-refresh claim (0 unless Redis struggled).
	Fallbacks            Figure `json:"fallbacks"`
	CallerP50Ms          Figure `json:"caller_p50_ms"`
	CallerP99Ms          Figure `json:"caller_p99_ms"`
	StaleServed          Figure `json:"stale_served"`
	CacheMisses          Figure `json:"cache_misses"`
	FirstTryLockAttempts Figure `json:"first_try_lock_attempts"`
	// FirstTryContention is the busy share of the first attempts of
	// callers that wait for a lock (mode="wait"), as the contention panel
	// and alerts count it.
	FirstTryContention Figure `json:"first_try_lock_contention"`
	// TryOnceContention is the busy share of the first attempts of
	// try-once acquisitions (mode="try_once": the periodic job's lock,
	// whose losers skip the run by design, and, as the hook infers on the
	// wire, busy first attempts never retried because their caller found
	// the value), which the contention alerts leave out.
	TryOnceContention Figure `json:"try_once_lock_contention"`
	LocksLost         Figure `json:"locks_lost"`
	// JobLockExpired counts the periodic job's runs whose lock ended under
	// them, before their release (expired, or lost: its lease ends other
	// than released and error); JobLockTaken those of them whose release
	// found another instance holding the lock, which ran the job at the
	// same time (the hook's refused, the client's taken_over; on cachewatch
	// the demo cannot tell them apart: no truth).
	JobLockExpired Figure `json:"job_lock_expired"`
	JobLockTaken   Figure `json:"job_lock_taken"`
	// WriteSkewPrevented counts older versions refused by compare-and-set;
	// OlderWritesLanded those that replaced a newer value (only the demo
	// can see those: no signal observes a plain SET's version).
	WriteSkewPrevented Figure `json:"write_skew_prevented"`
	OlderWritesLanded  Figure `json:"older_writes_landed"`
	// MissBursts' truth is the number of stampedes: refreshes that took
	// more than one database call.
	MissBursts Figure `json:"miss_bursts"`

	Timeline []Point `json:"timeline"`
}

// Point is one half-second of a phase: caller latency quantiles of the
// requests in it and the loader calls so far (metric and truth).
type Point struct {
	T                 float64 `json:"t"`
	P50Ms             float64 `json:"p50_ms"`
	P99Ms             float64 `json:"p99_ms"`
	Requests          int     `json:"requests"`
	LoaderCallsMetric float64 `json:"loader_calls_metric"`
	LoaderCallsTruth  float64 `json:"loader_calls_truth"`
}

// ExporterNote says what the exporter could sample of the demo's Redis.
type ExporterNote struct {
	Up          bool     `json:"up"`
	KeysScanned uint64   `json:"keys_scanned"`
	Missing     []string `json:"missing,omitempty"`
}

func num(v float64) *float64 { return &v }

func ratio(a, b float64) *float64 {
	if b == 0 {
		return num(0)
	}
	return num(a / b)
}

func ms(d time.Duration) *float64 { return num(float64(d.Microseconds()) / 1000) }

// loaderCalls is how the metrics count a phase's database calls: the
// cachewatch client counts its loader calls; for the naive services, the
// hook sees the SETEX that follows each one.
func loaderCalls(phase string, s phaseSignals) float64 {
	if phase == PhaseUnprotected {
		return s.ValueWrites
	}
	return s.LoaderCalls
}

func buildPhase(spec phaseSpec, s phaseSignals, t *truth, db dbCounts, timeline []Point) PhaseReport {
	whole := t.latency.quantiles(0, 1<<62)
	refreshes := float64(db.refreshes)
	calls := loaderCalls(spec.name, s)
	r := PhaseReport{
		Name: spec.name, Seconds: spec.duration.Seconds(), Requests: t.requests.Load(), Refreshes: db.refreshes,
		LoaderCalls:           Figure{num(calls), num(float64(db.calls))},
		LoaderCallsPerRefresh: Figure{ratio(calls, refreshes), ratio(float64(db.calls), refreshes)},
		Fallbacks:             Figure{num(s.Fallbacks), nil},
		CallerP50Ms:           Figure{nil, ms(whole.p50)},
		CallerP99Ms:           Figure{nil, ms(whole.p99)},
		StaleServed:           Figure{num(s.Stale), num(float64(t.stale.Load()))},
		FirstTryLockAttempts:  Figure{num(s.FirstAttempts), num(float64(t.firstAttempts.Load()))},
		FirstTryContention: Figure{ratio(s.FirstBusy-s.TryOnceBusy, s.FirstAttempts-s.TryOnceFirst),
			ratio(float64(t.firstBusy.Load()-t.jobBusy.Load()), float64(t.firstAttempts.Load()-t.jobTries.Load()-t.skippedBusy.Load()))},
		TryOnceContention: Figure{ratio(s.TryOnceBusy, s.TryOnceFirst),
			ratio(float64(t.jobBusy.Load()+t.skippedBusy.Load()), float64(t.jobTries.Load()+t.skippedBusy.Load()))},
		LocksLost:          Figure{num(s.LocksLost), num(float64(t.locksLost.Load()))},
		JobLockExpired:     Figure{num(s.JobLockEnded), num(float64(t.jobLockLost.Load()))},
		JobLockTaken:       Figure{num(s.JobLockTaken), nil},
		WriteSkewPrevented: Figure{num(s.WriteSkew), num(float64(t.olderRefused.Load()))},
		OlderWritesLanded:  Figure{nil, num(float64(t.olderLanded.Load()))},
		MissBursts:         Figure{num(s.MissBursts), num(float64(db.stampedes))},
	}
	if spec.name == PhaseUnprotected {
		r.CacheMisses = Figure{num(s.Misses), num(float64(t.misses.Load()))}
		r.Fallbacks = Figure{} // no cachewatch client in this phase
		r.JobLockTaken.Truth = num(float64(t.jobLockTaken.Load()))
	} else {
		// A Fetch does not tell its caller whether it missed.
		r.CacheMisses = Figure{num(s.Misses), nil}
	}
	from := time.Duration(0)
	for i := range timeline {
		to := time.Duration(timeline[i].T * float64(time.Second))
		q := t.latency.quantiles(from, to)
		timeline[i].P50Ms, timeline[i].P99Ms, timeline[i].Requests = *ms(q.p50), *ms(q.p99), q.n
		from = to
	}
	r.Timeline = timeline
	return r
}

// exporterSummary lists what the exporter could not sample; on miniredis,
// INFO knows only the clients and stats sections.
func exporterSummary(exp *exporter.Exporter, embedded bool) ExporterNote {
	var n ExporterNote
	stages := map[string]bool{}
	for _, s := range exp.Snapshots() {
		n.Up = n.Up || s.Up
		n.KeysScanned += s.KeysScanned
		for _, e := range s.Errors {
			stages[string(e.Stage)] = true
		}
		if s.Server != nil && s.Server.Version == "" && embedded {
			stages["info"] = true
		}
	}
	for st := range stages {
		n.Missing = append(n.Missing, missingNote(st, embedded))
	}
	sort.Strings(n.Missing)
	return n
}

func missingNote(stage string, embedded bool) string {
	if stage == "info" && embedded {
		return "info: miniredis answers INFO with clients and stats only — no server hits/misses, expired keys, command stats, memory or latency series (run with --redis for them)"
	}
	return stage + ": the sampler's " + stage + " stage failed; see cachewatch_exporter_sample_errors_total"
}

// Query is the PromQL behind one figure or chart: the panel of the
// generated dashboards that shows it, with the dashboards' variables ($job,
// $instance, $client, $key_group, $__rate_interval) left in.
type Query struct {
	// Row names the figure as the report's table does.
	Row       string `json:"row"`
	Expr      string `json:"expr"`
	Dashboard string `json:"dashboard"`
	Panel     string `json:"panel"`
}

// figurePanels names, per figure, its row in the report and the dashboard
// panel that shows it, in the order of the report's table.
var figurePanels = []struct{ figure, row, board, panel string }{
	{"loader_calls_per_refresh", "loader (database) calls per refresh", "cachewatch-contention", "Loader amplification (loader calls per kept result)"},
	{"loader_calls_cachewatch", "loader (database) calls, on cachewatch", "cachewatch-contention", "Loader calls by result"},
	{"loader_calls_unprotected", "loader (database) calls, unprotected (the hook's setex)", "cachewatch-redis", "Commands by command"},
	{"caller_latency", "caller p50 / p99 (cachewatch's share: Redis command latency)", "cachewatch-redis", "Command latency p99 by command"},
	{"stale_served", "stale served", "cachewatch-contention", "Cache lookups by result (share)"},
	{"cache_misses", "cache misses", "cachewatch-contention", "Cache lookups by result (share)"},
	{"first_try_lock_contention", "first-try lock contention (waiting callers)", "cachewatch-contention", "Contention rate (busy first attempts / first attempts)"},
	{"locks_lost", "locks lost", "cachewatch-contention", "Lost locks by reason"},
	{"job_lock_expired", "job lock expired under its holder (lease ends by outcome)", "cachewatch-contention", "Lease ends by outcome"},
	{"job_lock_holders", "who holds the job lock (the exporter)", "cachewatch-keyspace", "Lock holders (longest-held)"},
	{"write_skew_prevented", "write skew prevented", "cachewatch-contention", "Write skew and refused stale writes"},
	{"miss_bursts", "miss bursts", "cachewatch-contention", "Miss bursts"},
	{"exporter_lock_state", "locks held (the exporter)", "cachewatch-keyspace", "Locks held"},
	{"exporter_expiry_sync", "expiry synchronisation (the exporter)", "cachewatch-keyspace", "Expiry synchronisation per key group"},
}

// chartQueries finds each figure's panel in the generated dashboards and
// takes its first query.
func chartQueries() map[string]Query {
	out := map[string]Query{}
	all := dashboards.Queries()
	for _, want := range figurePanels {
		for _, q := range all {
			if q.Board == want.board && q.Panel == want.panel {
				out[want.figure] = Query{Row: want.row, Expr: q.Expr, Dashboard: q.Board, Panel: q.Panel}
				break
			}
		}
	}
	return out
}

// QueryRows are the Queries in the order of the report's table.
func (r *Report) QueryRows() []Query {
	var out []Query
	for _, f := range figurePanels {
		if q, ok := r.Queries[f.figure]; ok {
			out = append(out, q)
		}
	}
	return out
}

// WriteText prints the side-by-side report.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "\ncachewatch demo on %s: %d instances × %d callers, %d hot keys, fresh TTL %s\n",
		r.Server, r.Instances, r.CallersPerInstance, r.Keys, r.FreshTTL)
	fmt.Fprintf(&b, "metric = read back from the cachewatch metrics; truth = what the demo counted itself; – = not observable\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t\t", p.Name)
	}
	fmt.Fprint(tw, "\n\t")
	for range r.Phases {
		fmt.Fprint(tw, "metric\ttruth\t")
	}
	fmt.Fprintln(tw)
	for _, row := range textRows() {
		fmt.Fprintf(tw, "%s\t", row.label)
		for _, p := range r.Phases {
			fig := row.pick(p)
			fmt.Fprintf(tw, "%s\t%s\t", cell(fig.Metric, row.f), cell(fig.Truth, row.f))
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "\n%s: %d requests, %d refreshes in %.0fs", p.Name, p.Requests, p.Refreshes, p.Seconds)
	}
	b.WriteString("\n")
	for _, n := range r.Notes {
		b.WriteString("\nnote: " + n + "\n")
	}
	if len(r.Exporter.Missing) > 0 {
		b.WriteString("\nexporter: sampled " + fmt.Sprint(r.Exporter.KeysScanned) + " keys; not available here:\n")
		for _, m := range r.Exporter.Missing {
			b.WriteString("  " + m + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// textRow is one row of the text report: its label, the phase's figure and
// its format.
type textRow struct {
	label string
	pick  func(PhaseReport) Figure
	f     string
}

// textRows are the rows of the text report, in order.
func textRows() []textRow {
	return []textRow{
		{"loader (database) calls per refresh", func(p PhaseReport) Figure { return p.LoaderCallsPerRefresh }, "%.2f"},
		{"loader (database) calls", func(p PhaseReport) Figure { return p.LoaderCalls }, "%.0f"},
		{"… of them direct, Redis failing", func(p PhaseReport) Figure { return p.Fallbacks }, "%.0f"},
		{"caller p50 (ms)", func(p PhaseReport) Figure { return p.CallerP50Ms }, "%.1f"},
		{"caller p99 (ms)", func(p PhaseReport) Figure { return p.CallerP99Ms }, "%.1f"},
		{"stale served", func(p PhaseReport) Figure { return p.StaleServed }, "%.0f"},
		{"cache misses", func(p PhaseReport) Figure { return p.CacheMisses }, "%.0f"},
		{"first-try lock contention (waiting callers)", func(p PhaseReport) Figure { return percent(p.FirstTryContention) }, "%.1f%%"},
		{"… of try-once acquisitions (the job's lock)", func(p PhaseReport) Figure { return percent(p.TryOnceContention) }, "%.1f%%"},
		{"locks lost", func(p PhaseReport) Figure { return p.LocksLost }, "%.0f"},
		{"job lock expired under its holder", func(p PhaseReport) Figure { return p.JobLockExpired }, "%.0f"},
		{"… and taken: two ran the job at once", func(p PhaseReport) Figure { return p.JobLockTaken }, "%.0f"},
		{"write skew prevented", func(p PhaseReport) Figure { return p.WriteSkewPrevented }, "%.0f"},
		{"older writes that landed", func(p PhaseReport) Figure { return p.OlderWritesLanded }, "%.0f"},
		{fmt.Sprintf("miss bursts, ≥%d misses/%v (truth: stampedes)", burstThreshold, burstWindow), func(p PhaseReport) Figure { return p.MissBursts }, "%.0f"},
	}
}

func percent(f Figure) Figure {
	scale := func(v *float64) *float64 {
		if v == nil {
			return nil
		}
		return num(*v * 100)
	}
	return Figure{scale(f.Metric), scale(f.Truth)}
}

func cell(v *float64, format string) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf(format, *v)
}
