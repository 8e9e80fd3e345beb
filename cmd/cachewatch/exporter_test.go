package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/cachewatch/cachewatch/internal/metrictest"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

// lockedBuffer is a bytes.Buffer safe for a command writing while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *lockedBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *lockedBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func freeListenAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestFlagErrorsExitTwo(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"unknown flag", []string{"exporter", "--nope"}, "flag provided but not defined: -nope"},
		{"bad duration", []string{"exporter", "--sample.interval", "soon"}, `invalid value "soon"`},
		{"positional", []string{"exporter", "extra"}, `unexpected argument "extra"`},
		{"url and addr", []string{"exporter", "--redis.url", "redis://h:1", "--redis.addr", "h:2"}, "not both"},
		{"password in url", []string{"exporter", "--redis.url", "redis://u:hunter2@h:1"}, "must not contain a password"},
		{"bad scheme", []string{"exporter", "--redis.url", "http://h:1"}, "scheme must be redis or rediss"},
		{"bad mode", []string{"exporter", "--redis.mode", "sentinel"}, `--redis.mode "sentinel"`},
		{"missing password file", []string{"exporter", "--redis.password-file", filepath.Join(dir, "none")}, "--redis.password-file"},
		{"bad rule", []string{"exporter", "--keygroup.rule", "session:*"}, "want glob=group"},
		{"bad path", []string{"exporter", "--web.telemetry-path", "metrics"}, "must start with /"},
		{"bad web config", []string{"exporter", "--web.config.file", filepath.Join(dir, "none.yml")}, "none.yml"},
		{"zero budget", []string{"exporter", "--sample.max-keys", "0"}, "--sample.max-keys must be positive"},
		{"bad log level", []string{"exporter", "--log.level", "loud"}, "loud"},
		{"doctor format", []string{"doctor", "--format", "yaml"}, `--format "yaml"`},
		{"doctor interval", []string{"doctor", "--interval", "0s"}, "must be positive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), c.args, &out, &errOut)
			if code != 2 || !strings.Contains(errOut.String(), c.msg) {
				t.Fatalf("code %d, stderr %q; want 2 and %q", code, errOut.String(), c.msg)
			}
			if strings.Contains(errOut.String(), "hunter2") {
				t.Fatal("the password was printed")
			}
		})
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"exporter", "-h"}, &out, &errOut); code != 0 ||
		!strings.Contains(errOut.String(), "-web.listen-address") || strings.Contains(errOut.String(), "-redis.password ") {
		t.Fatalf("-h: code %d\n%s", code, errOut.String())
	}
}

// The command wires flags, the password file, sampling and the web server:
// /metrics shows the node up, the landing page links to it, and basic auth
// from --web.config.file is enforced.
func TestExporterCommand(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	const password = "exporter-secret"
	if err := srv.Client(t).ConfigSet(ctx, "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	hash, err := bcrypt.GenerateFromPassword([]byte("scrape-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	for path, content := range map[string]string{pwFile: password + "\n", webCfg: "basic_auth_users:\n  prom: " + string(hash) + "\n"} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	listen := freeListenAddr(t)
	ctx, cancel := context.WithCancel(ctx)
	var stderr lockedBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"exporter", "--redis.url", "redis://" + srv.Addr, "--redis.password-file", pwFile,
			"--web.listen-address", listen, "--web.config.file", webCfg, "--sample.interval", "100ms"}, io.Discard, &stderr)
	}()
	body := waitForBody(t, "http://"+listen+"/metrics", "prom", "scrape-pw", `cachewatch_exporter_up{node="`+srv.Addr+`"} 1`)
	if !strings.Contains(body, "go_goroutines") {
		t.Error("no Go runtime metrics")
	}
	metrictest.PromtoolCheck(t, body)
	if code := httpStatus(t, "http://"+listen+"/metrics", "", ""); code != http.StatusUnauthorized {
		t.Errorf("scrape without credentials: %d, want 401", code)
	}
	landing := waitForBody(t, "http://"+listen+"/", "prom", "scrape-pw", `href="/metrics"`)
	if !strings.Contains(landing, "cachewatch exporter") {
		t.Errorf("landing page: %s", landing)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stderr.String(), password) {
		t.Fatal("the Redis password was logged")
	}
}

func httpStatus(t *testing.T, url, user, pw string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if user != "" {
		req.SetBasicAuth(user, pw)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// waitForBody fetches url until the body contains want.
func waitForBody(t *testing.T, url, user, pw, want string) string {
	t.Helper()
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.SetBasicAuth(user, pw)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			last = err.Error()
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if last = string(b); strings.Contains(last, want) {
			return last
		}
	}
	t.Fatalf("%s never contained %q; last:\n%s", url, want, last)
	return ""
}
