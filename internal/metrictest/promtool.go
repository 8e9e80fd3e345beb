package metrictest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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
	path := Promtool(t)
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

// Promtool returns the path of the real promtool (see Tool).
func Promtool(t testing.TB) string {
	t.Helper()
	return Tool(t, "promtool", "prometheus")
}

// Tool finds a real tool (promtool, amtool, …) installed by the Debian
// package pkg. Without it the test skips with how to install it, or fails
// when CACHEWATCH_REQUIRE_REDIS=1 (scripts/test.sh installs them).
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(redistest.RequireEnv) == "1" {
			t.Fatalf("%s not found (apt-get install -y %s, or run scripts/test.sh): %v", name, pkg, err)
		}
		t.Skipf("%s not found: apt-get install -y %s, or run scripts/test.sh", name, pkg)
	}
	return path
}

// RunTool runs path with args and returns its combined output, failing t
// with that output when the tool fails.
func RunTool(t testing.TB, path string, args ...string) string {
	t.Helper()
	out, err := exec.Command(path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(path), strings.Join(args, " "), err, out)
	}
	return string(out)
}
