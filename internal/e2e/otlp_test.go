package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/cachewatch/cachewatch/alerts"
	"github.com/cachewatch/cachewatch/dashboards"
	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// Prometheus3Env names the Prometheus 3 binary (with an OTLP receiver) for
// TestOTLPAnswersLikeScrape; by default it is looked up in the tools
// directory that scripts/test.sh builds it into.
const Prometheus3Env = "CACHEWATCH_PROMETHEUS3"

// otlpSnapshots is how many states of the traffic both paths receive.
const otlpSnapshots = 40

// TestOTLPAnswersLikeScrape runs the traffic of TestEndToEnd through clients,
// hooks and an embedded exporter that have both a Registerer and an
// OpenTelemetry MeterProvider, and feeds the same states to two real
// Prometheus 3 servers: one scrapes the registries (client_golang's
// exposition), the other receives OTLP pushed by the OpenTelemetry SDK's
// exporter. Then every query of the generated dashboards, every recording
// rule and alert expression and every Grafana-managed rule query must answer
// the same on both, series for series and value for value.
//
// So that both see exactly the same samples, the traffic is paused at each
// state (every loop holds a gate between its steps), both pipelines are read
// while nothing changes, and each state carries one timestamp on both paths:
// the scrape endpoint serves it with explicit timestamps, the OTLP push with
// that time on every data point.
func TestOTLPAnswersLikeScrape(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: starts Redis and two Prometheus 3 servers and runs for about a minute; skipped with -short")
	}
	t.Parallel()
	bin := findPrometheus3(t)
	redis := redistest.Start(t)
	deadPort, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := loopback(deadPort)
	app := newPath(t, appJob)
	exp := newPath(t, exporterJob)

	var gate sync.RWMutex
	tr := &traffic{t: t, addr: redis.Addr, dead: dead, reg: app.reg, mp: app.mp}
	tr.start(context.WithValue(context.Background(), gateKey{}, &gate))
	e, err := exporter.New(exporter.Options{
		Target:        exporter.Target{Addrs: []string{redis.Addr, dead}},
		Queues:        []string{streamQueue, listQueue, delayedQueue},
		MeterProvider: exp.mp,
		KeyGroups:     keygrouptest.Named(t),
		Sample:        exporter.SampleOptions{MaxKeys: 200, Interval: time.Second},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	exp.reg.MustRegister(e)

	scrape := startPrometheus3(t, bin, []scrapeJob{{appJob, []string{app.addr}}, {exporterJob, []string{exp.addr}}})
	push := startPrometheus3(t, bin, nil)
	app.pushTo(t, push.addr)
	exp.pushTo(t, push.addr)

	var last time.Time
	for i := range otlpSnapshots {
		last = snapshot(t, &gate, e, app, exp)
		if i < otlpSnapshots-1 {
			time.Sleep(500 * time.Millisecond) // traffic between states
		}
	}
	tr.stop()
	scrape.p.alive(t)
	push.p.alive(t)

	cfg := ruleConfig(t)
	ruleExprs, grafanaExprs := generatedExprs(t, cfg)
	exprs := map[string]string{}
	for i, p := range dashboards.Queries() {
		exprs[fmt.Sprintf("panel %s / %s [%d]", p.Board, p.Panel, i)] = panelExpr(t, p)
	}
	records := recordedExprs(t, cfg)
	for i, x := range ruleExprs {
		// An SLO's 30-day ratio averages its 5m ratio, which is compared
		// itself; inlined, it would be a subquery of 43200 steps.
		if strings.Contains(x, "[30d])") {
			continue
		}
		exprs[fmt.Sprintf("rule [%d]", i)] = inlineRecorded(x, records)
	}
	for i, x := range grafanaExprs {
		exprs[fmt.Sprintf("grafana rule [%d]", i)] = inlineRecorded(x, records)
	}
	compareAnswers(t, scrape.api, push.api, exprs, last)
}

// pipelinePath is one job's two pipelines: a registry served as scraped
// snapshots, and a MeterProvider read by a ManualReader and pushed as OTLP.
type pipelinePath struct {
	job  string
	reg  *prometheus.Registry
	mp   *sdkmetric.MeterProvider
	rd   *sdkmetric.ManualReader
	addr string // the snapshot endpoint, also the instance on both paths
	otlp *otlpmetrichttp.Exporter

	mu     sync.Mutex
	body   []byte // the snapshot served
	seq    int    // its number
	served int    // the number of the last snapshot served
}

func newPath(t *testing.T, job string) *pipelinePath {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pipelinePath{job: job, reg: prometheus.NewRegistry(), rd: sdkmetric.NewManualReader(), addr: l.Addr().String()}
	// service.name and service.instance.id become job and instance.
	res := resource.NewSchemaless(semconv.ServiceName(job), semconv.ServiceInstanceID(p.addr))
	p.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(p.rd), sdkmetric.WithResource(res))
	t.Cleanup(func() { _ = p.mp.Shutdown(context.Background()) })
	srv := &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

func (p *pipelinePath) serve(w http.ResponseWriter, _ *http.Request) {
	p.mu.Lock()
	body, seq := p.body, p.seq
	p.served = seq
	p.mu.Unlock()
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	_, _ = w.Write(body)
}

func (p *pipelinePath) pushTo(t *testing.T, prom string) {
	t.Helper()
	exp, err := otlpmetrichttp.New(context.Background(),
		otlpmetrichttp.WithEndpointURL("http://"+prom+"/api/v1/otlp/v1/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exp.Shutdown(context.Background()) })
	p.otlp = exp
}

// snapshot pauses the traffic, samples the exporter, reads both pipelines of
// both paths in a quiescent state, publishes it with one timestamp on both
// and waits until the scraping Prometheus has read it.
func snapshot(t *testing.T, gate *sync.RWMutex, e *exporter.Exporter, paths ...*pipelinePath) time.Time {
	t.Helper()
	gate.Lock()
	defer gate.Unlock()
	e.Sample(context.Background())
	families, rms := quiescent(t, paths)
	at := time.Now().Truncate(time.Millisecond)
	for i, p := range paths {
		stampAll(rms[i], at)
		if err := p.otlp.Export(context.Background(), rms[i]); err != nil {
			t.Fatalf("%s: OTLP push: %v", p.job, err)
		}
		p.mu.Lock()
		p.body, p.seq = stampText(t, families[i], at), p.seq+1
		p.mu.Unlock()
	}
	for _, p := range paths {
		err := poll.Check(context.Background(), time.Minute, 50*time.Millisecond, func() error {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.served != p.seq {
				return fmt.Errorf("%s: snapshot %d not scraped yet", p.job, p.seq)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return at
}

// quiescent reads every path's registry and reader until two gathers around
// the collection agree: background work of the clients (refreshes,
// renewals) can still record while the loops are paused.
func quiescent(t *testing.T, paths []*pipelinePath) ([][]*dto.MetricFamily, []*metricdata.ResourceMetrics) {
	t.Helper()
	for try := 0; try < 100; try++ {
		before, _ := gatherAll(t, paths)
		rms := make([]*metricdata.ResourceMetrics, len(paths))
		for i, p := range paths {
			rms[i] = new(metricdata.ResourceMetrics)
			if err := p.rd.Collect(context.Background(), rms[i]); err != nil {
				t.Fatal(err)
			}
		}
		after, families := gatherAll(t, paths)
		same := true
		for i := range before {
			same = same && bytes.Equal(before[i], after[i])
		}
		if same {
			return families, rms
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the metrics never held still while the traffic was paused")
	return nil, nil
}

// gatherAll gathers every path's registry, as text (to compare) and as
// metric families.
func gatherAll(t *testing.T, paths []*pipelinePath) ([][]byte, [][]*dto.MetricFamily) {
	t.Helper()
	out := make([][]byte, len(paths))
	families := make([][]*dto.MetricFamily, len(paths))
	for i, p := range paths {
		mfs, err := p.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		families[i] = mfs
		var b bytes.Buffer
		enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		out[i] = b.Bytes()
	}
	return out, families
}

// stampText writes mfs as a text exposition with the timestamp at on every
// sample.
func stampText(t *testing.T, mfs []*dto.MetricFamily, at time.Time) []byte {
	t.Helper()
	ms := at.UnixMilli()
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			m.TimestampMs = &ms
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// stampAll gives every data point of rm the time at.
func stampAll(rm *metricdata.ResourceMetrics, at time.Time) {
	for i := range rm.ScopeMetrics {
		for j := range rm.ScopeMetrics[i].Metrics {
			m := &rm.ScopeMetrics[i].Metrics[j]
			switch d := m.Data.(type) {
			case metricdata.Sum[float64]:
				stampPoints(d.DataPoints, at)
			case metricdata.Sum[int64]:
				stampPoints(d.DataPoints, at)
			case metricdata.Gauge[float64]:
				stampPoints(d.DataPoints, at)
			case metricdata.Gauge[int64]:
				stampPoints(d.DataPoints, at)
			case metricdata.Histogram[float64]:
				for k := range d.DataPoints {
					d.DataPoints[k].Time = at
				}
			}
		}
	}
}

func stampPoints[N int64 | float64](points []metricdata.DataPoint[N], at time.Time) {
	for k := range points {
		points[k].Time = at
	}
}

// findPrometheus3 returns a Prometheus binary with an OTLP receiver, or
// skips t (fails it with CACHEWATCH_REQUIRE_REDIS=1).
func findPrometheus3(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(Prometheus3Env)
	if bin == "" {
		dir := os.Getenv("CACHEWATCH_TOOLS")
		if dir == "" {
			home, _ := os.UserHomeDir()
			dir = filepath.Join(home, ".cache", "cachewatch", "tools")
		}
		bin = filepath.Join(dir, "prometheus")
	}
	help, err := exec.Command(bin, "--help").CombinedOutput()
	if err == nil && bytes.Contains(help, []byte("web.enable-otlp-receiver")) {
		return bin
	}
	why := fmt.Sprintf("e2e: no Prometheus 3 at %s (set %s, or run scripts/test.sh, which builds it)", bin, Prometheus3Env)
	if os.Getenv(redistest.RequireEnv) == "1" {
		t.Fatalf("%s, and %s=1 requires it", why, redistest.RequireEnv)
	}
	t.Skip(why)
	return ""
}

// startPrometheus3 runs a Prometheus 3 that scrapes jobs every second
// (honouring the exposition's timestamps) and receives OTLP.
func startPrometheus3(t *testing.T, bin string, jobs []scrapeJob) promInstance {
	t.Helper()
	dir := t.TempDir()
	scrapes := []any{}
	for _, j := range jobs {
		scrapes = append(scrapes, map[string]any{"job_name": j.name, "honor_timestamps": true,
			"static_configs": []any{map[string]any{"targets": j.targets}}})
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	writeJSON(t, cfg, map[string]any{
		"global":         map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s"},
		"scrape_configs": scrapes,
	})
	return runPrometheus(t, "prometheus3", bin, cfg, "--web.enable-otlp-receiver")
}

// recordedExprs maps each recording rule's name to its expression.
func recordedExprs(t *testing.T, cfg alerts.Config) map[string]string {
	t.Helper()
	groups, err := alerts.Rules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range groups {
		for _, r := range g.Recording {
			out[r.Record] = r.Expr
		}
	}
	return out
}

var seriesName = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// inlineRecorded replaces each recorded series that expr reads by its
// rule's expression, as the Grafana-managed rules do: the two servers would
// evaluate the rules at different instants, so the recorded series would
// differ; inlined, every expression is read at the query's instant on both.
// A recorded series read over a range becomes a subquery of the same range.
func inlineRecorded(expr string, records map[string]string) string {
	ranged := regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\[([0-9a-z]+)\]`)
	expr = ranged.ReplaceAllStringFunc(expr, func(m string) string {
		parts := ranged.FindStringSubmatch(m)
		if x, ok := records[parts[1]]; ok {
			return "(" + strings.ReplaceAll(x, "\n", " ") + ")[" + parts[2] + ":]"
		}
		return m
	})
	return seriesName.ReplaceAllStringFunc(expr, func(name string) string {
		if x, ok := records[name]; ok {
			return "(" + strings.ReplaceAll(x, "\n", " ") + ")"
		}
		return name
	})
}

// compareAnswers runs every expression at the instant at on both servers
// and fails t for each that answers differently. The le label is compared
// as a number: Prometheus writes a scraped bucket's bound as "1.0" and an
// OTLP one as "1".
func compareAnswers(t *testing.T, scrape, push promv1.API, exprs map[string]string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	same, nonEmpty, scrapeOnly := map[string]int{}, 0, 0
	names := make([]string, 0, len(exprs))
	for n := range exprs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		expr := exprs[n]
		if scrapeOnlyExpr.MatchString(expr) {
			scrapeOnly++
			continue
		}
		a, errA := answer(ctx, scrape, expr, at)
		b, errB := answer(ctx, push, expr, at)
		switch {
		case errA != nil || errB != nil:
			t.Errorf("%s: %q: scrape error %v, OTLP error %v", n, expr, errA, errB)
		case a != b:
			t.Errorf("%s: %q answers differently:\nscrape: %s\nOTLP:   %s", n, expr, a, b)
		default:
			same[strings.Fields(n)[0]]++
			if a != "" {
				nonEmpty++
			}
		}
	}
	total := same["panel"] + same["rule"] + same["grafana"]
	t.Logf("OTLP vs scrape: %d of %d expressions answered the same (%d dashboard queries, %d recording-rule and alert expressions, %d Grafana-rule queries; %d returned series); %d read scrape-only series (up) and were not compared",
		total, len(exprs)-scrapeOnly, same["panel"], same["rule"], same["grafana"], nonEmpty, scrapeOnly)
	if nonEmpty < len(exprs)/2 {
		t.Errorf("only %d expressions returned series: the traffic did not reach both paths", nonEmpty)
	}
}

// scrapeOnlyExpr finds series that only a scrape produces.
var scrapeOnlyExpr = regexp.MustCompile(`\b(up|scrape_[a-z_]+)\s*[{\[(]`)

// answer runs expr at at and returns its result canonically: one line per
// series, sorted, le as a number, values exactly.
func answer(ctx context.Context, api promv1.API, expr string, at time.Time) (string, error) {
	v, _, _, err := api.Query(ctx, expr, at)
	if err != nil {
		return "", err
	}
	var lines []string
	switch r := v.(type) {
	case model.Vector:
		for _, s := range r {
			lines = append(lines, canonicalLabels(s.Metric)+" "+canonicalValue(float64(s.Value)))
		}
	case *model.Scalar:
		lines = append(lines, canonicalValue(float64(r.Value)))
	default:
		return "", fmt.Errorf("unexpected result type %T", v)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

func canonicalLabels(m model.Metric) string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, string(k))
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, k := range names {
		v := string(m[model.LabelName(k)])
		if k == "le" {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				v = canonicalValue(f)
			}
		}
		parts[i] = k + "=" + strconv.Quote(v)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func canonicalValue(f float64) string {
	if math.IsNaN(f) {
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}
