package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// commandRun is what a command run by runCommand left: its exit status and
// what it wrote.
type commandRun struct {
	code           int
	stdout, stderr string
}

// runCommand runs the command with args as main does, capturing its output.
func runCommand(t *testing.T, command string, args ...string) commandRun {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), append([]string{command}, args...), &out, &errOut)
	return commandRun{code: code, stdout: out.String(), stderr: errOut.String()}
}

func TestRunDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"version"}, &out, &errOut); code != 0 || !strings.HasPrefix(out.String(), "cachewatch ") {
		t.Fatalf("version: code %d, out %q", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"nope"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `expected command but got "nope"`) {
		t.Fatalf("unknown command: code %d, stderr %q", code, errOut.String())
	}
	out.Reset()
	if code := run(context.Background(), nil, &out, &errOut); code != 0 || !strings.Contains(out.String(), "version") {
		t.Fatalf("help: code %d, out %q", code, out.String())
	}
}

// --log.format json applies to every line, go-redis's own included.
func TestLogsAreJSONIncludingGoRedis(t *testing.T) {
	var out, errOut bytes.Buffer
	addr := freeListenAddr(t) // nothing listens there
	if code := run(context.Background(), []string{"doctor", "--log.format=json", "--redis.addr", addr}, &out, &errOut); code != exitIncomplete {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	goRedis := 0
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		if strings.HasPrefix(line, "cachewatch doctor: ") {
			continue // the final error for the operator
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		if rec["component"] == "go-redis" {
			goRedis++
		}
	}
	if goRedis == 0 {
		t.Fatalf("no go-redis line went through the logger:\n%s", errOut.String())
	}
}

func TestRedisLoggerRedacts(t *testing.T) {
	var buf bytes.Buffer
	redisLogger{slog.New(slog.NewTextHandler(&buf, nil))}.Printf(context.Background(),
		"redis: dial %s failed", "rediss://user:hunter2@h:6380/0?password=hunter3")
	if s := buf.String(); strings.Contains(s, "hunter") || !strings.Contains(s, "rediss://xxxxx@h:6380/0?xxxxx") {
		t.Fatalf("log line %q", s)
	}
}

// Redaction hides what a URL may hide a password in, and leaves usage
// notation and sentences alone.
func TestRedactLeavesHelpTextAlone(t *testing.T) {
	for in, want := range map[string]string{
		"--redis wants redis://[user@]host:port[/db] or rediss://…": "--redis wants redis://[user@]host:port[/db] or rediss://…",
		"did you mean redis://localhost:6390?":                      "did you mean redis://localhost:6390?",
		"dial redis://u:hunter2@h:1/0?password=hunter3 failed":      "dial redis://xxxxx@h:1/0?xxxxx failed",
		"redis://[u:hunter2]@h:1":                                   "redis://xxxxx@h:1",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
