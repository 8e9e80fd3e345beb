package probe_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/redis/go-redis/v9"

	"github.com/cachewatch/cachewatch/exporter"
	"github.com/cachewatch/cachewatch/exporter/probe"
	"github.com/cachewatch/cachewatch/internal/keygrouptest"
	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/poll"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// testName is the client name of the tests' own connections, left out when
// counting the sampler's.
const testName = "probe-test"

// newProber serves a Prober whose targets keep every key-group name at once
// and sample unpaced every second.
func newProber(t *testing.T, opts probe.Options) (*probe.Prober, *httptest.Server) {
	t.Helper()
	opts.Sampling = func() (exporter.Options, error) {
		return exporter.Options{
			KeyGroups: keygrouptest.Named(t),
			Sample:    exporter.SampleOptions{KeysPerSecond: -1, Interval: time.Second},
			Locks:     exporter.LockOptions{Notifications: exporter.NotifyOff},
		}, nil
	}
	p, err := probe.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

// get probes target with module and returns the status and body.
func get(t *testing.T, srv *httptest.Server, target, module string) (int, string) {
	t.Helper()
	q := url.Values{"target": {target}}
	if module != "" {
		q.Set("module", module)
	}
	resp, err := http.Get(srv.URL + "/probe?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// families parses an exposition.
func families(t *testing.T, body string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%v in\n%s", err, body)
	}
	return fams
}

// value returns the value of the series of name with the given labels (a
// subset of its labels), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels map[string]string) (float64, bool) {
	for _, m := range fams[name].GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range labels {
			match = match && have[k] == v
		}
		if match {
			if m.Counter != nil {
				return m.GetCounter().GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// checkTarget fails t unless every series of fams carries target=want.
func checkTarget(t *testing.T, fams map[string]*dto.MetricFamily, want string) {
	t.Helper()
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			got := "<none>"
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" {
					got = l.GetValue()
				}
			}
			if got != want {
				t.Errorf("%s: target %q, want %q", name, got, want)
			}
		}
	}
}

// Two targets probed from one Prober: each probe answers only its
// target's series, each labelled with it, and the lock counts are Redis's.
func TestProbeTwoTargets(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	ctx := context.Background()
	ca, cb := a.Client(t), b.Client(t)
	for _, k := range []string{"lock:order:1", "lock:order:2"} {
		if err := ca.Set(ctx, k, "tok-"+k, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cb.Set(ctx, "lock:order:9", "tok", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	p, srv := newProber(t, probe.Options{})
	for target, want := range map[string]float64{"redis://" + a.Addr: 2, b.Addr: 1} {
		var fams map[string]*dto.MetricFamily
		poll.Until(t, target+"'s locks to be counted", func() bool {
			code, body := get(t, srv, target, "")
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", target, code, body)
			}
			fams = families(t, body)
			_, ok := value(fams, "cachewatch_exporter_locks_held", nil)
			return ok
		})
		checkTarget(t, fams, target)
		if up, _ := value(fams, "cachewatch_exporter_up", nil); up != 1 {
			t.Errorf("%s: up %v", target, up)
		}
		if got, _ := value(fams, "cachewatch_exporter_locks_held", map[string]string{"key_group": "lock:order:*"}); got != want {
			t.Errorf("%s: locks_held %v, want %v", target, got, want)
		}
	}
	if n := p.Targets(); n != 2 {
		t.Errorf("%d targets sampled, want 2", n)
	}
}

// A target not probed within the idle timeout is stopped: its sampler's
// connections to Redis are closed, and the next probe starts it again.
func TestProbeIdleTargetStops(t *testing.T) {
	s := redistest.Start(t)
	c := redistest.NewClient(t, &redis.Options{Addr: s.Addr, ClientName: testName, PoolSize: 1})
	clock := clockwork.NewFakeClock()
	p, srv := newProber(t, probe.Options{IdleTimeout: time.Minute, Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	if code, body := get(t, srv, s.Addr, ""); code != http.StatusOK || !strings.Contains(body, "cachewatch_exporter_up") {
		t.Fatalf("probe: %d %s", code, body)
	}
	if n := redistest.OtherClients(t, c, testName); n == 0 {
		t.Fatal("no sampler connection after a probe")
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil { // Run's ticker
		t.Fatal(err)
	}
	clock.Advance(50 * time.Second) // probed 50 s ago: still sampled
	clock.Advance(6 * time.Second)
	if p.Targets() != 1 {
		t.Fatalf("target stopped before its idle timeout")
	}
	clock.Advance(6 * time.Second) // 62 s since the probe
	poll.Until(t, "the idle target to stop", func() bool { return p.Targets() == 0 })
	poll.Until(t, "the sampler's connections to close", func() bool { return redistest.OtherClients(t, c, testName) == 0 })

	if code, _ := get(t, srv, s.Addr, ""); code != http.StatusOK || p.Targets() != 1 {
		t.Errorf("a probe after the stop: %d, %d targets", code, p.Targets())
	}
}

// What a probe cannot use is refused with 400 and says why, never quoting
// a password; a target that is not reachable answers 200 with up 0 and the
// failed stage.
func TestProbeRefusals(t *testing.T) {
	modules, err := probe.ParseModules([]byte("modules:\n  cache:\n    lock_patterns: ['mutex:*']\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, srv := newProber(t, probe.Options{Modules: modules, MaxTargets: 1})
	for _, c := range []struct{ target, module, want string }{
		{"", "", "target parameter is missing"},
		{"redis://u:hunter2@h:6379", "", "must not contain a password"},
		{"redis://h:6379/?password=hunter2", "", "must not contain a password"},
		{"u:hunter2@h:6379", "", "has no scheme"},
		{"redis://sampler@h:6379", "", "set username in the module"},
		{"http://h:1", "", "scheme must be redis or rediss"},
		{"h:99999", "", "outside 1-65535"},
		{strings.Repeat("h", 300) + ":1", "", "longer than 256"},
		{"h:6379", "nope", `unknown module "nope" (known: cache)`},
	} {
		code, body := get(t, srv, c.target, c.module)
		if code != http.StatusBadRequest || !strings.Contains(body, c.want) || strings.Contains(body, "hunter2") {
			t.Errorf("target %q module %q: %d %q, want 400 with %q", c.target, c.module, code, body, c.want)
		}
	}
	if p.Targets() != 0 {
		t.Errorf("%d targets started by refused probes", p.Targets())
	}

	dead := "127.0.0.1:1" // nothing listens on port 1
	code, body := get(t, srv, dead, "cache")
	if code != http.StatusOK {
		t.Fatalf("unreachable target: %d %s", code, body)
	}
	fams := families(t, body)
	checkTarget(t, fams, dead)
	if up, ok := value(fams, "cachewatch_exporter_up", map[string]string{"node": dead}); !ok || up != 0 {
		t.Errorf("unreachable target: up %v (%t), want 0", up, ok)
	}
	if n, _ := value(fams, "cachewatch_exporter_sample_errors_total", map[string]string{"stage": "connect", "class": "connection"}); n < 1 {
		t.Errorf("unreachable target: no connect error counted in\n%s", body)
	}
	if code, body := get(t, srv, "127.0.0.1:2", "cache"); code != http.StatusServiceUnavailable || !strings.Contains(body, "1 targets sampled") {
		t.Errorf("second target over max targets 1: %d %s", code, body)
	}
}

// A modules file with a password, an unknown field or an unset variable
// is refused naming what to fix, never the password.
func TestModulesRefused(t *testing.T) {
	t.Setenv("PROBE_TEST_EMPTY", "")
	for yml, want := range map[string]string{
		"modules:\n  a:\n    password: hunter2\n":                   "unknown field password (use password_file or password_env)",
		"modules:\n  a:\n    password_env: PROBE_TEST_EMPTY\n":      "$PROBE_TEST_EMPTY is empty or unset",
		"modules:\n  a:\n    mode: sentinel\n":                      `mode "sentinel"`,
		"modules:\n  a:\n    password_file: /nonexistent/pw\n":      "password_file:",
		"modules:\n  'a b':\n    mode: auto\n":                      `module "a b": a name is`,
		"modules: {}\n":                                             "no modules",
		"modules:\n  a:\n    interval: hunter2\n":                   "a value of the wrong type",
		"modules:\n  a:\n    password_file: x\n    password_env: Y": "not both",
	} {
		_, err := probe.ParseModules([]byte(yml))
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: %v, want an error with %q", yml, err, want)
		}
	}
	if _, err := probe.LoadModules(filepath.Join(t.TempDir(), "none.yml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

// A module's password, read from its file, reaches Redis: a target that
// requires it is sampled.
func TestProbeModulePassword(t *testing.T) {
	s := redistest.Start(t)
	if err := s.Client(t).ConfigSet(context.Background(), "requirepass", "s3cret-pw").Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var yml bytes.Buffer
	yml.WriteString("modules:\n  auth:\n    password_file: " + pw + "\n")
	modules, err := probe.ParseModules(yml.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	_, srv := newProber(t, probe.Options{Modules: modules})
	for module, want := range map[string]float64{"auth": 1, "": 0} {
		code, body := get(t, srv, s.Addr, module)
		up, _ := value(families(t, body), "cachewatch_exporter_up", nil)
		if code != http.StatusOK || up != want || strings.Contains(body, "s3cret") {
			t.Errorf("module %q: %d, up %v, want %v", module, code, up, want)
		}
	}
}

// The Prober's self-metrics count what its answers did: the targets
// sampled, the limit, and each refused probe by reason.
func TestProbeSelfMetrics(t *testing.T) {
	s := redistest.Start(t)
	p, srv := newProber(t, probe.Options{MaxTargets: 1})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(p)
	read := func(name string, labels ...string) float64 { return metrictest.Sum(t, reg, name, labels...) }
	if got := read("cachewatch_exporter_probe_targets"); got != 0 {
		t.Fatalf("%v targets before any probe", got)
	}
	if code, _ := get(t, srv, s.Addr, ""); code != http.StatusOK {
		t.Fatalf("probe: %d", code)
	}
	for range 2 {
		get(t, srv, "redis://u:secret@h:6379", "") // 400
	}
	get(t, srv, "h:6379", "nope")  // 400: unknown module
	get(t, srv, "127.0.0.1:2", "") // 503: over max targets
	get(t, srv, s.Addr, "")        // sampled already: not refused
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"cachewatch_exporter_probe_targets", nil, 1},
		{"cachewatch_exporter_probe_max_targets", nil, 1},
		{"cachewatch_exporter_probe_refused_total", []string{"reason", "bad_request"}, 3},
		{"cachewatch_exporter_probe_refused_total", []string{"reason", "max_targets"}, 1},
	} {
		if got := read(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 4 {
		t.Errorf("%d series (%v), want 4", n, err)
	}
}

// A Cluster probed by one seed address: the module's mode samples every
// master, each series carries the target, and the lock counts summed over
// the masters are Redis's.
func TestProbeClusterTarget(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	rdb := c.Client(t)
	ctx := context.Background()
	const locks = 30 // spread over the masters by their slots
	for i := range locks {
		if err := rdb.Set(ctx, "lock:order:"+strconv.Itoa(i), "tok", time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	modules, err := probe.ParseModules([]byte("modules:\n  cluster:\n    mode: cluster\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, srv := newProber(t, probe.Options{Modules: modules})
	target := c.Addrs()[0]
	var fams map[string]*dto.MetricFamily
	perNode := map[string]float64{}
	poll.Until(t, "every master's locks to be counted", func() bool {
		code, body := get(t, srv, target, "cluster")
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, body)
		}
		fams = families(t, body)
		for _, addr := range c.Addrs() {
			if n, ok := value(fams, "cachewatch_exporter_locks_held", map[string]string{"node": addr, "key_group": "lock:order:*"}); ok {
				perNode[addr] = n
			}
		}
		return len(perNode) == len(c.Addrs())
	})
	checkTarget(t, fams, target)
	sum := 0.0
	for addr, n := range perNode {
		if up, _ := value(fams, "cachewatch_exporter_up", map[string]string{"node": addr}); up != 1 {
			t.Errorf("%s: up %v", addr, up)
		}
		sum += n
	}
	if sum != locks {
		t.Errorf("locks held over the masters %v (%v), want %d", sum, perNode, locks)
	}
}
