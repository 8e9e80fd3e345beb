package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cachewatch/cachewatch/dashboards"
)

const grafanaTestToken = "glsa_test_token"

// grafanaStub answers every request with status and remembers the
// Authorization headers and paths it saw.
func grafanaStub(t *testing.T, status int, body string) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

func TestDashboardsCommandWrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "boards")
	r := runCommand(t, "dashboards", "--out", dir)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	ds, err := dashboards.Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		got, err := os.ReadFile(filepath.Join(dir, d.UID+".json"))
		want, _ := d.JSON()
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s.json: %v", d.UID, err)
		}
	}
	if !strings.Contains(r.stdout, dir) {
		t.Errorf("stdout %q", r.stdout)
	}
}

func TestDashboardsCommandPushes(t *testing.T) {
	srv, seen := grafanaStub(t, http.StatusOK, `{"status":"success"}`)
	t.Setenv(GrafanaTokenEnv, grafanaTestToken)
	r := runCommand(t, "dashboards", "--grafana-url", srv.URL)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	want := "POST /api/dashboards/db Bearer " + grafanaTestToken
	if s := seen(); len(s) != 3 || s[0] != want || s[2] != want {
		t.Fatalf("Grafana saw %q, want 3 × %q", s, want)
	}

	// The token from a file instead (trailing newline trimmed).
	t.Setenv(GrafanaTokenEnv, "")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(grafanaTestToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCommand(t, "dashboards", "--grafana-url", srv.URL, "--grafana-token-file", file); r.code != 0 {
		t.Fatalf("token file: exit %d: %s", r.code, r.stderr)
	}
	if s := seen(); len(s) != 6 || s[5] != want {
		t.Fatalf("Grafana saw %q", s)
	}
}

func TestDashboardsCommandUsageErrors(t *testing.T) {
	t.Setenv(GrafanaTokenEnv, "")
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(grafanaTestToken), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  string
		args []string
		want string
	}{
		{"nothing to do", "", nil, "nothing to do"},
		{"unknown flag", "", []string{"--out", "x", "--grafana-token", grafanaTestToken}, "unknown long flag '--grafana-token'"},
		{"no token", "", []string{"--grafana-url", "http://127.0.0.1:1"}, "needs a token"},
		{"env and file", "x", []string{"--grafana-url", "http://127.0.0.1:1", "--grafana-token-file", file}, "not both"},
		{"missing file", "", []string{"--grafana-url", "http://127.0.0.1:1", "--grafana-token-file", file + ".nope"}, "--grafana-token-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(GrafanaTokenEnv, tc.env)
			r := runCommand(t, "dashboards", tc.args...)
			if r.code != exitUsage || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q: want exit 2 and one line with %q", r.code, r.stderr, r.stdout, tc.want)
			}
			if strings.Contains(r.stderr, grafanaTestToken) {
				t.Fatalf("token in stderr: %q", r.stderr)
			}
		})
	}
}

func TestDashboardsCommandGrafanaError(t *testing.T) {
	srv, _ := grafanaStub(t, http.StatusUnauthorized, "{\"message\": \"invalid API key\",\n \"status\": \"unauthorized\"}")
	t.Setenv(GrafanaTokenEnv, grafanaTestToken)
	r := runCommand(t, "dashboards", "--grafana-url", srv.URL)
	if r.code != exitPushFailed || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, grafanaTestToken) ||
		!strings.Contains(r.stderr, "401 Unauthorized: invalid API key") {
		t.Fatalf("exit %d, stderr %q: want exit 1 and one line with Grafana's message", r.code, r.stderr)
	}

	// Unreachable Grafana, with credentials in the URL: redacted, one line.
	r = runCommand(t, "dashboards", "--grafana-url", "http://admin:hunter2@127.0.0.1:1/")
	if r.code != exitPushFailed || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "hunter2") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}
