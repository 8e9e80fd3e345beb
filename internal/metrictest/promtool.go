package metrictest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cachewatch/cachewatch/internal/redistest"
)

// PromtoolCheck runs the real `promtool check metrics` on a /metrics page
// and fails the test on any complaint. Without promtool the test skips with
// a message saying how to install it, or fails when CACHEWATCH_REQUIRE_REDIS=1
// (CI installs it).
func PromtoolCheck(t testing.TB, exposition string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(redistest.RequireEnv) == "1" {
			t.Fatalf("promtool not found (scripts/test.sh installs it): %v", err)
		}
		t.Skip("promtool not found: apt-get install prometheus, or run scripts/test.sh")
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(exposition)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// Exposition returns g's /metrics page as promhttp serves it.
func Exposition(t testing.TB, g prometheus.Gatherer) string {
	t.Helper()
	ts := httptest.NewServer(promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	defer ts.Close()
	resp, err := http.Get(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	page, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(page)
}
