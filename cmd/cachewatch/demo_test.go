package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/cmd/cachewatch/demo"
	"github.com/cachewatch/cachewatch/exporter/locks"
	"github.com/cachewatch/cachewatch/internal/syncbuf"
)

func TestDemoBadInputIsOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string // in the message, when set
	}{
		{[]string{"--bogus"}, 2, ""},
		{[]string{"--duration", "abc"}, 2, ""},
		{[]string{"--duration", "1s"}, 2, ""},
		{[]string{"--format", "xml"}, 2, ""},
		{[]string{"--instances", "0"}, 2, ""},
		{[]string{"--redis", "localhost:6390"}, 2, "did you mean redis://localhost:6390?"},
		{[]string{"--redis", "redis://u:secret@localhost:6390"}, 2, "use $" + PasswordEnv},
		{[]string{"extra"}, 2, ""},
		{[]string{"--web.listen-address", "127.0.0.1:99999"}, 2, ""},
		{[]string{"--redis", "redis://127.0.0.1:1"}, exitRedisUnreachable, ""},
	} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"demo"}, tc.args...), &out, &errOut)
		msg := errOut.String()
		if code != tc.code || strings.Count(msg, "\n") != 1 || !strings.HasPrefix(msg, "cachewatch") {
			t.Errorf("demo %v: code %d (want %d), stderr %q: want one line", tc.args, code, tc.code, msg)
		}
		if !strings.Contains(msg, tc.want) {
			t.Errorf("demo %v: stderr %q lacks %q", tc.args, msg, tc.want)
		}
		if strings.Contains(msg, "goroutine") || strings.Contains(msg, "secret") || strings.Contains(msg, "xxxxx") {
			t.Errorf("demo %v: stderr %q has a stack trace or the password", tc.args, msg)
		}
	}
}

func TestDemoHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"demo", "--help"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "-redis") {
		t.Fatalf("demo --help: code %d, stdout %q", code, out.String())
	}
}

// TestDemoJSONAndMetrics runs a short demo on the embedded miniredis:
// /metrics answers while it runs, the locks command it prints lists its
// locks, stdout is one JSON document, and the HTML report is written.
func TestDemoJSONAndMetrics(t *testing.T) {
	html := filepath.Join(t.TempDir(), "report.html")
	var out bytes.Buffer
	progress := &syncbuf.Buffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"demo", "--duration", "4s", "--format", "json", "--report", html}, &out, progress)
	}()

	addr := regexp.MustCompile(`metrics: (http://\S+/metrics)`)
	scraped := false
	for !scraped {
		select {
		case code := <-done:
			t.Fatalf("demo ended (code %d) before /metrics was scraped; stderr:\n%s", code, progress.String())
		case <-time.After(50 * time.Millisecond):
		}
		m := addr.FindStringSubmatch(progress.String())
		if m == nil {
			continue
		}
		resp, err := http.Get(m[1])
		if err != nil {
			t.Fatalf("GET %s while the demo runs: %v", m[1], err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", m[1], resp.StatusCode)
		}
		// The first series appear with the fleet's first commands.
		scraped = bytes.Contains(body, []byte("cachewatch_lock_attempts_total"))
	}
	checkDemoLocksCommand(t, progress.String())
	if code := <-done; code != 0 {
		t.Fatalf("demo: code %d, stderr:\n%s", code, progress.String())
	}
	if !strings.Contains(progress.String(), "embedded miniredis") {
		t.Errorf("the output does not say which Redis is in use:\n%s", progress.String())
	}
	var doc map[string]any
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatalf("stdout is not one JSON document: %v\n%s", err, out.String())
	}
	if phases, _ := doc["phases"].([]any); len(phases) != 2 {
		t.Errorf("JSON has %d phases, want 2", len(phases))
	}
	if b, err := os.ReadFile(html); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("HTML report not written (%v)", err)
	}
}

// checkDemoLocksCommand runs the cachewatch locks command a running demo
// printed (once, as JSON): it lists the demo's locks on the embedded
// miniredis. Without its --redis.mode standalone, the listing fails
// (miniredis refuses INFO cluster) with an error that names that flag.
func checkDemoLocksCommand(t *testing.T, printed string) {
	t.Helper()
	m := regexp.MustCompile(`\n  (cachewatch locks [^\n]+)\n`).FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("the demo printed no cachewatch locks command:\n%s", printed)
	}
	args := shellWords(m[1])[1:]
	var out, errOut bytes.Buffer
	if code := run(context.Background(), append(args, "--once", "--format", "json"), &out, &errOut); code != 0 {
		t.Fatalf("%s: exit %d\n%s", m[1], code, errOut.String())
	}
	var l locks.Listing
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatalf("%s: %v\n%s", m[1], err, out.String())
	}
	for _, lk := range l.Locks {
		if !strings.HasPrefix(lk.Key, strings.TrimSuffix(demo.LockPattern, "*")) {
			t.Errorf("%s lists %q, not a lock of the demo", m[1], lk.Key)
		}
	}
	var auto []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--redis.mode" {
			i++
			continue
		}
		auto = append(auto, args[i])
	}
	errOut.Reset()
	if code := run(context.Background(), append(auto, "--once"), &out, &errOut); code != exitIncomplete ||
		!strings.Contains(errOut.String(), "--redis.mode standalone") {
		t.Errorf("cachewatch %s: exit %d, stderr %q: want %d and the flag that reads miniredis as one server",
			strings.Join(auto, " "), code, errOut.String(), exitIncomplete)
	}
}
