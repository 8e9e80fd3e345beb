package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// webhookAlert is one alert of an Alertmanager webhook notification
// (payload version 4).
type webhookAlert struct {
	Status      string            `json:"status"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	StartsAt    time.Time         `json:"startsAt"`
	EndsAt      time.Time         `json:"endsAt"`

	receiver string    // the Alertmanager receiver that sent it
	received time.Time // when the webhook got it
}

// webhook is the on-call receiver: an HTTP server in the test that keeps
// every alert Alertmanager delivers.
type webhook struct {
	srv *httptest.Server

	mu     sync.Mutex
	alerts []webhookAlert
}

func startWebhook(t *testing.T) *webhook {
	w := &webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var n struct {
			Receiver string         `json:"receiver"`
			Alerts   []webhookAlert `json:"alerts"`
		}
		if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&n) != nil {
			http.Error(rw, "want a POSTed Alertmanager notification", http.StatusBadRequest)
			return
		}
		now := time.Now()
		w.mu.Lock()
		for _, a := range n.Alerts {
			a.receiver, a.received = n.Receiver, now
			w.alerts = append(w.alerts, a)
		}
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// find returns the first delivered alert named name that is firing.
func (w *webhook) find(name string) (webhookAlert, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.alerts {
		if a.Labels["alertname"] == name && a.Status == "firing" {
			return a, true
		}
	}
	return webhookAlert{}, false
}

// first returns the first notification of alertname with status whose
// labels include want, received after from.
func (w *webhook) first(alertname, status string, want map[string]string, from time.Time) (webhookAlert, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.alerts {
		if a.Labels["alertname"] != alertname || a.Status != status || a.received.Before(from) {
			continue
		}
		if hasLabels(a.Labels, want) {
			return a, true
		}
	}
	return webhookAlert{}, false
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// firing returns the firing notifications that match, received after
// from, one per alert (by labels): the first of each.
func (w *webhook) firing(from time.Time, match func(webhookAlert) bool) []webhookAlert {
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := map[string]bool{}
	var out []webhookAlert
	for _, a := range w.alerts {
		if a.Status != "firing" || a.received.Before(from) || !match(a) {
			continue
		}
		key := fmt.Sprint(a.Labels)
		if !seen[key] {
			seen[key] = true
			out = append(out, a)
		}
	}
	return out
}

// all returns every notified alert so far.
func (w *webhook) all() []webhookAlert {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]webhookAlert(nil), w.alerts...)
}

// summary lists the notifications so far, one per line, for failures.
func (w *webhook) summary() string {
	var b strings.Builder
	for _, a := range w.all() {
		fmt.Fprintf(&b, "\n  %s %s %s %s %v", a.received.Format(time.TimeOnly), a.receiver, a.Status, a.Labels["alertname"], a.Labels)
	}
	return b.String()
}

// bySeverity returns the names of the delivered alerts of a severity.
func (w *webhook) bySeverity(severity string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, a := range w.alerts {
		if a.Labels["severity"] == severity {
			out = append(out, a.Labels["alertname"])
		}
	}
	return out
}

// startAlertmanager runs a real Alertmanager, clustering off, with the
// configuration cfg (YAML as a map).
func startAlertmanager(t *testing.T, bin string, config map[string]any) (*process, string) {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "alertmanager.yml")
	writeJSON(t, cfg, config)
	p, port := startOnFreePort(t, "alertmanager", bin, func(port int) []string {
		return []string{
			"--config.file=" + cfg, "--storage.path=" + filepath.Join(dir, "data"),
			"--web.listen-address=" + loopback(port), "--cluster.listen-address=", "--log.level=warn",
		}
	}, func(port int) error { return httpOK("http://" + loopback(port) + "/-/ready") })
	return p, loopback(port)
}

// scrapeJob is one Prometheus scrape job of static targets.
type scrapeJob struct {
	name    string
	targets []string
}

// startPrometheus runs a real Prometheus that scrapes jobs and evaluates
// rules every second and sends alerts to the Alertmanager at am.
func startPrometheus(t *testing.T, bin, rulesFile, am string, jobs []scrapeJob) (*process, promv1.API) {
	t.Helper()
	s := startPrometheusServer(t, bin, rulesFile, am, time.Second, jobs)
	return s.p, s.api
}

// promInstance is a running Prometheus: its process, address and API.
type promInstance struct {
	p    *process
	addr string
	api  promv1.API
}

// promServer is a running Prometheus whose scrape jobs can change.
type promServer struct {
	promInstance
	cfg      string
	rules    string
	am       string
	interval time.Duration
}

// startPrometheusServer runs a real Prometheus that scrapes jobs and
// evaluates rules every interval, sends alerts to the Alertmanager at am,
// and reloads its configuration when asked (setJobs).
func startPrometheusServer(t *testing.T, bin, rulesFile, am string, interval time.Duration, jobs []scrapeJob) *promServer {
	t.Helper()
	s := &promServer{cfg: filepath.Join(t.TempDir(), "prometheus.yml"), rules: rulesFile, am: am, interval: interval}
	s.writeConfig(t, jobs)
	s.promInstance = runPrometheus(t, "prometheus", bin, s.cfg, "--web.enable-lifecycle")
	return s
}

// runPrometheus runs the Prometheus bin with the configuration file cfg, its
// data in a new directory, and the flags extra, and returns it, its address
// and its API once it is ready.
func runPrometheus(t *testing.T, name, bin, cfg string, extra ...string) promInstance {
	t.Helper()
	data := filepath.Join(t.TempDir(), "data")
	p, port := startOnFreePort(t, name, bin, func(port int) []string {
		return append([]string{"--config.file=" + cfg, "--storage.tsdb.path=" + data,
			"--web.listen-address=" + loopback(port), "--log.level=warn"}, extra...)
	}, func(port int) error { return httpOK("http://" + loopback(port) + "/-/ready") })
	client, err := api.NewClient(api.Config{Address: "http://" + loopback(port)})
	if err != nil {
		t.Fatal(err)
	}
	return promInstance{p: p, addr: loopback(port), api: promv1.NewAPI(client)}
}

func (s *promServer) writeConfig(t *testing.T, jobs []scrapeJob) {
	t.Helper()
	var scrapes []any
	for _, j := range jobs {
		scrapes = append(scrapes, map[string]any{
			"job_name":       j.name,
			"static_configs": []any{map[string]any{"targets": j.targets}},
		})
	}
	every := model.Duration(s.interval).String()
	writeJSON(t, s.cfg, map[string]any{
		"global":     map[string]any{"scrape_interval": every, "scrape_timeout": every, "evaluation_interval": every},
		"rule_files": []string{s.rules},
		"alerting": map[string]any{"alertmanagers": []any{map[string]any{
			"static_configs": []any{map[string]any{"targets": []string{s.am}}},
		}}},
		"scrape_configs": scrapes,
	})
}

// setJobs makes Prometheus scrape jobs from now on: a job left out leaves
// service discovery, its targets and their up series gone.
func (s *promServer) setJobs(t *testing.T, jobs []scrapeJob) {
	t.Helper()
	s.writeConfig(t, jobs)
	resp, err := http.Post("http://"+s.addr+"/-/reload", "", nil)
	if err != nil {
		t.Fatalf("reload Prometheus: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload Prometheus: %s", resp.Status)
	}
}

// query runs expr at the current time and returns the number of series (or
// 1 for a scalar or string result).
func query(ctx context.Context, prom promv1.API, expr string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, _, _, err := prom.Query(ctx, expr, time.Now())
	if err != nil {
		return 0, err
	}
	switch v := v.(type) {
	case model.Vector:
		return len(v), nil
	case model.Matrix:
		return len(v), nil
	default:
		return 1, nil
	}
}

// isParseError tells a query the parser rejected from other failures.
func isParseError(err error) bool {
	var perr *promv1.Error
	return errors.As(err, &perr) && perr.Type == promv1.ErrBadData
}
